#!/usr/bin/env bash
# test_cli.sh: the command-line surface: --version, help, usage errors, info.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

assert_exit 0 "$GALLEY" --version
assert_contains "$OUT" "galley " "--version output"
assert_no_crash
info "--version: $OUT"

for h in --help help; do
    assert_exit 0 "$GALLEY" "$h"
    for word in train check info; do
        assert_contains "$OUT$ERR" "$word" "'galley $h' output"
    done
    assert_no_crash
done
info "--help and help list train, check, info"

assert_exit 0 "$GALLEY" help train
assert_no_crash
info "help train: ok"

assert_exit 2 "$GALLEY"
assert_no_crash
info "no arguments: exit 2"

assert_exit 2 "$GALLEY" frobnicate
assert_contains "$ERR" "unknown command" "stderr of 'galley frobnicate'"
assert_no_crash
info "unknown command: exit 2"

assert_exit 0 "$GALLEY" info
assert_contains "$OUT$ERR" "version" "'galley info' output"
assert_no_crash
info "info: ok"

info "PASS"
