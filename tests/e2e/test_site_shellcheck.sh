#!/usr/bin/env bash
# test_site_shellcheck.sh: `shellcheck -x` finds nothing in any shell file of the repository:
# *.sh files, files whose first line is a sh/bash shebang (site/galley-entrypoint, .ci/run,
# build.sh) and files that declare `# shellcheck shell=`. Skipped without shellcheck
# (`./build.sh test` installs it). Needs no galley binary.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_cmd shellcheck
# Same files, same verdict in either tree: the release tree's run is enough.
[[ $GALLEY_SANITIZE != 1 ]] || skip "runs in the release tree only (the sanitizer build changes nothing here)"

cd "$GALLEY_SRC"
# The repository's files (tracked and new, not ignored); without git, every file outside the
# build trees.
if command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t candidates < <(git ls-files --cached --others --exclude-standard)
else
    mapfile -t candidates < <(find . -path ./.git -prune -o -path './build*' -prune -o -type f -print | sed 's|^\./||')
fi

files=()
for f in "${candidates[@]}"; do
    [[ -f $f ]] || continue # listed by git but deleted in the working tree
    case $f in
    *.sh) files+=("$f") ;;
    *.md | *.c | *.h | *.cu | *.yaml | *.json | *.txt | *.py | *.cmake | *.env | *.h5) ;;
    *)
        IFS= read -r first <"$f" || true
        if [[ $first =~ ^#!.*(/|[[:space:]])(ba)?sh([[:space:]]|$) ]] ||
            grep -q -m1 '^# shellcheck shell=' "$f" 2>/dev/null; then
            files+=("$f")
        fi
        ;;
    esac
done
((${#files[@]} > 0)) || fail "found no shell file under $GALLEY_SRC"

if ! shellcheck -x "${files[@]}" >"$GL_TMP/findings" 2>&1; then
    cat "$GL_TMP/findings" >&2
    bad=$(grep -c '^In ' "$GL_TMP/findings" || true)
    fail "shellcheck -x: $bad findings in ${#files[@]} shell files (listed above)"
fi
info "shellcheck $(shellcheck --version | sed -n 's/^version: //p') -x: clean on ${#files[@]} files: ${files[*]}"
info "PASS"
