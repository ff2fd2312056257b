# shellcheck shell=bash
# common.sh: helpers for tests/e2e/test_*.sh. Source it first thing:
#
#   #!/usr/bin/env bash
#   set -euo pipefail
#   # shellcheck source=tests/e2e/lib/common.sh
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
#   need_galley
#   run "$GALLEY" --version        # sets RC, OUT, ERR (never exits on failure)
#   assert_rc 0
#   assert_contains "$OUT" "galley "
#
# Environment from ctest: GALLEY (binary), GALLEY_SRC, GALLEY_BUILD, GALLEY_SANITIZE (0/1),
# GALLEY_HAVE_CUDA (0/1). Exit codes: 0 pass, 1 fail, 77 skip.
# GL_TMP is a fresh temporary directory, removed when the script exits.

: "${GALLEY_SANITIZE:=0}"
: "${GALLEY_HAVE_CUDA:=0}"
: "${GALLEY_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)}"
: "${GALLEY_BUILD:=$GALLEY_SRC/build}"
: "${GALLEY:=$GALLEY_BUILD/galley}"
export GALLEY GALLEY_SRC GALLEY_BUILD GALLEY_SANITIZE GALLEY_HAVE_CUDA

GL_TMP=$(mktemp -d "${TMPDIR:-/tmp}/galley-e2e.XXXXXX")
export GL_TMP
gl_cleanup() { rm -rf "$GL_TMP"; }
trap gl_cleanup EXIT

GL_TEST_NAME=$(basename "$0" .sh)

# info MSG...: progress line on stdout.
info() { echo "[$GL_TEST_NAME] $*"; }

# fail MSG...: report and exit 1.
fail() {
    echo "[$GL_TEST_NAME] FAIL: $*" >&2
    exit 1
}

# skip WHY...: report and exit 77 (ctest SKIP_RETURN_CODE).
skip() {
    echo "[$GL_TEST_NAME] SKIP: $*"
    exit 77
}

# need_cmd CMD...: skip unless each command exists.
need_cmd() {
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 || skip "needs '$c'"
    done
}

# need_galley: fail unless $GALLEY is an executable.
need_galley() {
    [[ -x $GALLEY ]] || fail "GALLEY=$GALLEY is not an executable (build first)"
}

# run CMD...: run a command with stdin from /dev/null; sets RC, OUT, ERR and RUN_CMD.
# Never exits, whatever the command's status.
run() {
    RUN_CMD="$*"
    RC=0
    "$@" >"$GL_TMP/.out" 2>"$GL_TMP/.err" </dev/null || RC=$?
    OUT=$(cat "$GL_TMP/.out")
    ERR=$(cat "$GL_TMP/.err")
}

# show_run: the last run's command, status and output, on stderr.
show_run() {
    {
        echo "  command: $RUN_CMD"
        echo "  exit: $RC"
        echo "  --- stdout ---"
        printf '%s\n' "$OUT"
        echo "  --- stderr ---"
        printf '%s\n' "$ERR"
        echo "  --------------"
    } >&2
}

# assert_rc N: the last run exited with N.
assert_rc() {
    if [[ $RC -ne $1 ]]; then
        show_run
        fail "'$RUN_CMD' exited $RC, expected $1"
    fi
}

# assert_exit N CMD...: run CMD and check it exits with N (RC, OUT, ERR stay set).
assert_exit() {
    local want=$1
    shift
    run "$@"
    assert_rc "$want"
}

# assert_contains TEXT NEEDLE [WHAT]: TEXT contains NEEDLE (a plain substring).
assert_contains() {
    if [[ $1 != *"$2"* ]]; then
        echo "  in ${3:-text}:" >&2
        printf '%s\n' "$1" | sed 's/^/    | /' >&2
        fail "expected ${3:-text} to contain '$2'"
    fi
}

# assert_not_contains TEXT NEEDLE [WHAT]
assert_not_contains() {
    if [[ $1 == *"$2"* ]]; then
        echo "  in ${3:-text}:" >&2
        printf '%s\n' "$1" | sed 's/^/    | /' >&2
        fail "expected ${3:-text} not to contain '$2'"
    fi
}

# assert_no_crash: the last run's stderr has no sanitizer report or crash message.
assert_no_crash() {
    local bad
    for bad in AddressSanitizer LeakSanitizer "runtime error" Segmentation; do
        if [[ $ERR == *"$bad"* ]]; then
            show_run
            fail "'$RUN_CMD': stderr mentions '$bad'"
        fi
    done
}
