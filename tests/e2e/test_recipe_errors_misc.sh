#!/usr/bin/env bash
# test_recipe_errors_misc.sh: recipe errors that a tests/recipes/bad/*.yaml file cannot express:
# a recipe path that does not exist, a directory, an unreadable file, missing or unknown
# arguments, a non key=value argument, an empty file, bytes that are not UTF-8, and a deeply
# nested document (rejected quickly, not after a quadratic parse).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

# now: seconds since the epoch, with a fraction (bash 5 has EPOCHREALTIME; else date).
now() { if [[ -n ${EPOCHREALTIME:-} ]]; then echo "$EPOCHREALTIME"; else date +%s.%N; fi; }

good=$GL_TMP/good.yaml
cat >"$good" <<'EOF'
model:
  layers:
    - {type: dense, units: 3}
optimizer:
  lr: 0.1
EOF
assert_exit 0 "$GALLEY" check "$good"
assert_no_crash

for cmd in check train; do
    # ---- a recipe path that does not exist ---------------------------------------------------
    missing=$GL_TMP/no/such/recipe.yaml
    assert_exit 2 "$GALLEY" "$cmd" "$missing"
    assert_no_crash
    assert_contains "$ERR" "$missing" "stderr of 'galley $cmd MISSING'"
    assert_contains "$ERR" "No such file or directory" "stderr of 'galley $cmd MISSING'"
    assert_not_contains "$OUT" "epoch" "stdout of 'galley $cmd MISSING'"
    info "$cmd: missing recipe file: exit 2, names the file"

    # Also with overrides after it (the file error comes first, whatever the overrides).
    assert_exit 2 "$GALLEY" "$cmd" "$missing" train.epochs=1
    assert_contains "$ERR" "$missing" "stderr of 'galley $cmd MISSING train.epochs=1'"

    # ---- a directory as the recipe --------------------------------------------------------
    mkdir -p "$GL_TMP/adir.yaml"
    assert_exit 2 "$GALLEY" "$cmd" "$GL_TMP/adir.yaml"
    assert_no_crash
    assert_contains "$ERR" "$GL_TMP/adir.yaml" "stderr of 'galley $cmd DIR'"
    assert_contains "$ERR" "Is a directory" "stderr of 'galley $cmd DIR'"
    info "$cmd: a directory as recipe: exit 2, says it is a directory"

    # ---- an unreadable file (root reads it anyway: skip that part then) -------------------
    if [[ $(id -u) -ne 0 ]]; then
        cp "$good" "$GL_TMP/unreadable.yaml"
        chmod 000 "$GL_TMP/unreadable.yaml"
        assert_exit 2 "$GALLEY" "$cmd" "$GL_TMP/unreadable.yaml"
        chmod 600 "$GL_TMP/unreadable.yaml"
        assert_no_crash
        assert_contains "$ERR" "$GL_TMP/unreadable.yaml" "stderr of 'galley $cmd UNREADABLE'"
        assert_contains "$ERR" "Permission denied" "stderr of 'galley $cmd UNREADABLE'"
        info "$cmd: unreadable recipe: exit 2, names the file"
    else
        info "$cmd: unreadable recipe: skipped (running as root, which can read a mode-000 file)"
    fi

    # ---- no recipe at all ----------------------------------------------------------------------
    assert_exit 2 "$GALLEY" "$cmd"
    assert_no_crash
    assert_contains "$ERR" "missing RECIPE" "stderr of 'galley $cmd'"
    assert_contains "$ERR" "usage: galley $cmd RECIPE" "stderr of 'galley $cmd'"
    info "$cmd without arguments: exit 2, usage"

    # ---- unknown options, before or after the recipe -------------------------------------
    assert_exit 2 "$GALLEY" "$cmd" --frobnicate "$good"
    assert_no_crash
    assert_contains "$ERR" "unknown option '--frobnicate'" "stderr of 'galley $cmd --frobnicate R'"
    assert_exit 2 "$GALLEY" "$cmd" "$good" -x
    assert_no_crash
    assert_contains "$ERR" "unknown option '-x'" "stderr of 'galley $cmd R -x'"
    assert_not_contains "$OUT" "epoch" "stdout of 'galley $cmd R -x'"
    info "$cmd: unknown option: exit 2"

    # ---- a valid recipe plus an argument that is no key=value ----------------------------
    assert_exit 2 "$GALLEY" "$cmd" "$good" train.epochs=1 epochs
    assert_no_crash
    assert_contains "$ERR" "'epochs' is not a key=value override" "stderr of 'galley $cmd R k=v epochs'"
    assert_not_contains "$OUT" "epoch " "stdout of 'galley $cmd R k=v epochs'"
    # Two recipes are a special case of that.
    assert_exit 2 "$GALLEY" "$cmd" "$good" "$good"
    assert_no_crash
    assert_contains "$ERR" "is not a key=value override" "stderr of 'galley $cmd R R'"
    info "$cmd: a non key=value argument: exit 2"
done

# ---- --help after the command: usage on stdout, exit 0 -----------------------------------
assert_exit 0 "$GALLEY" check --help
assert_contains "$OUT" "usage: galley check RECIPE" "stdout of 'galley check --help'"

# ---- an empty recipe argument ----------------------------------------------------------------
assert_exit 2 "$GALLEY" check ""
assert_no_crash
info "an empty recipe path: exit 2"

# ---- an empty file, a comment-only file: the required sections are missing ----------------
: >"$GL_TMP/empty.yaml"
assert_exit 2 "$GALLEY" check "$GL_TMP/empty.yaml"
assert_no_crash
assert_contains "$ERR" "$GL_TMP/empty.yaml:1:1: error: model: missing required key 'model'" "stderr for an empty file"
assert_contains "$ERR" "missing required key 'optimizer'" "stderr for an empty file"
printf '# nothing but a comment\n' >"$GL_TMP/comment.yaml"
assert_exit 2 "$GALLEY" check "$GL_TMP/comment.yaml"
assert_no_crash
assert_contains "$ERR" "missing required key 'model'" "stderr for a comment-only file"
info "empty and comment-only files: exit 2, missing model and optimizer"

# ---- bytes that are not UTF-8 --------------------------------------------------------------
{ cat "$good"; printf 'name: caf\xe9\n'; } >"$GL_TMP/latin1.yaml"
assert_exit 2 "$GALLEY" check "$GL_TMP/latin1.yaml"
assert_no_crash
assert_contains "$ERR" "$GL_TMP/latin1.yaml:6:" "stderr for a Latin-1 file"
assert_contains "$ERR" "UTF-8" "stderr for a Latin-1 file"
info "non-UTF-8 bytes: exit 2 at line 6, says UTF-8"

# ---- a UTF-8 byte order mark is fine ---------------------------------------------------------
{ printf '\xef\xbb\xbf'; cat "$good"; } >"$GL_TMP/bom.yaml"
assert_exit 0 "$GALLEY" check "$GL_TMP/bom.yaml"
assert_no_crash
info "a UTF-8 BOM: accepted"

# ---- galley train on an invalid recipe: exit 2 before any training -------------------------
printf 'model:\n  layers:\n    - {type: dense, units: 3}\noptimizer:\n  lr: fast\n' >"$GL_TMP/badlr.yaml"
assert_exit 2 "$GALLEY" train "$GL_TMP/badlr.yaml"
assert_no_crash
assert_contains "$ERR" "$GL_TMP/badlr.yaml:5:7: error: optimizer.lr:" "stderr of train on a bad recipe"
assert_not_contains "$OUT" "epoch " "stdout of train on a bad recipe"
info "train on an invalid recipe: exit 2, no epochs"

# ---- deep nesting: rejected fast ----------------------------------------------------------------
# 100000 nested flow lists (a 200 KB file). The loader allows 200 levels; a document nested
# deeper must be refused without first parsing the whole of it in quadratic time.
python_free_nest() {
    local n=$1 open close
    open=$(printf '%*s' "$n" '' | tr ' ' '[')
    close=$(printf '%*s' "$n" '' | tr ' ' ']')
    printf 'junk: %s%s\n' "$open" "$close"
}
python_free_nest 100000 >"$GL_TMP/deep.yaml"
cat "$good" >>"$GL_TMP/deep.yaml"
t0=$(now)
run timeout 120 "$GALLEY" check "$GL_TMP/deep.yaml"
t1=$(now)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
[[ $RC -ne 124 ]] || fail "galley check on 100000 nested lists did not finish within 120 s"
assert_rc 2
assert_no_crash
assert_contains "$ERR" "nesting too deep" "stderr for a deeply nested file"
info "100000 nested lists: exit 2 in ${secs} s"
awk -v s="$secs" 'BEGIN { exit !(s < 10) }' ||
    fail "rejecting 100000 nested lists took ${secs} s (expected < 10 s: the depth limit should stop the parse early)"

info "PASS"
