#!/usr/bin/env bash
# check_bad_recipe.sh GALLEY FILE: run `GALLEY check FILE [args]` on a recipe that must be
# rejected, and check how. The expectations are comment lines in FILE itself:
#
#   # expect: <substring>     one or more; each must occur in stderr. `{FILE}` in it stands for
#                             FILE exactly as given on this script's command line
#   # expect-exit: N          the exit status (default 2, a usage/recipe error)
#   # args: k=v k2=v2         extra command-line overrides after FILE (split on whitespace;
#                             several args lines add up)
#
# Fails (exit 1, saying what it expected and what it got) unless the exit status matches and
# every substring occurs in stderr; also fails when stderr shows a sanitizer report or a crash.
set -euo pipefail

if [[ $# -ne 2 ]]; then
    echo "usage: $0 GALLEY FILE" >&2
    exit 2
fi
galley=$1
file=$2
[[ -x $galley ]] || { echo "check_bad_recipe: not an executable: $galley" >&2; exit 1; }
[[ -r $file ]] || { echo "check_bad_recipe: cannot read: $file" >&2; exit 1; }

expects=()
expect_exit=2
args=()
re_expect='^[[:space:]]*#[[:space:]]*expect:[[:space:]]?(.*)$'
re_exit='^[[:space:]]*#[[:space:]]*expect-exit:[[:space:]]*([0-9]+)[[:space:]]*$'
re_args='^[[:space:]]*#[[:space:]]*args:(.*)$'
while IFS= read -r line || [[ -n $line ]]; do
    line=${line%$'\r'}
    if [[ $line =~ $re_expect ]]; then
        exp=${BASH_REMATCH[1]}
        exp=${exp%"${exp##*[![:space:]]}"}        # trailing blanks
        exp=${exp//\{FILE\}/"$file"}
        [[ -n $exp ]] && expects+=("$exp")
    elif [[ $line =~ $re_exit ]]; then
        expect_exit=${BASH_REMATCH[1]}
    elif [[ $line =~ $re_args ]]; then
        read -r -a more <<<"${BASH_REMATCH[1]}"
        args+=("${more[@]}")
    fi
done <"$file"

if [[ ${#expects[@]} -eq 0 ]]; then
    echo "check_bad_recipe: $file has no '# expect: <substring>' line" >&2
    exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rc=0
"$galley" check "$file" "${args[@]}" >"$tmp/out" 2>"$tmp/err" </dev/null || rc=$?
out=$(cat "$tmp/out")
err=$(cat "$tmp/err")

problems=()
if [[ $rc -ne $expect_exit ]]; then
    problems+=("exit status $rc, expected $expect_exit")
fi
for exp in "${expects[@]}"; do
    if [[ $err != *"$exp"* ]]; then
        problems+=("stderr lacks: $exp")
    fi
done
for bad in AddressSanitizer LeakSanitizer "runtime error" Segmentation; do
    if [[ $err == *"$bad"* ]]; then
        problems+=("stderr mentions '$bad' (crash or sanitizer report)")
    fi
done

cmd="$galley check $file${args[*]:+ ${args[*]}}"
if [[ ${#problems[@]} -eq 0 ]]; then
    echo "ok: $cmd -> exit $rc"
    printf '%s\n' "$err"
    exit 0
fi

{
    echo "FAIL: $cmd"
    printf '  problem: %s\n' "${problems[@]}"
    echo "  expected exit: $expect_exit"
    printf '  expected in stderr: %s\n' "${expects[@]}"
    echo "  got exit: $rc"
    echo "  --- stderr ---"
    printf '%s\n' "$err"
    echo "  --- stdout ---"
    printf '%s\n' "$out"
    echo "  --------------"
} >&2
exit 1
