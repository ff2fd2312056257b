#!/usr/bin/env bash
# test_ckpt_storage.sh: checkpoints on storage that fails, with real file systems (a private mount
# namespace: `unshare -m`, root only):
#   - a read-only checkpoint directory is reported before training (exit 2), naming the directory
#     and the reason; the checkpoint already there is untouched;
#   - a disk that fills up mid-run: the failed checkpoint is reported (exit 1), no partial or
#     temporary file is left, and the previous checkpoints are untouched and still resume.
# Without root (or unshare) the read-only case uses permissions and the disk-full case is skipped.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd md5sum

cd "$GL_TMP"
MLP=$GALLEY_SRC/recipes/quickstart.yaml
args=(train.steps=40 train.target=null log.every=10 train.threads=1 log.files=false checkpoint.keep=10)

# A previous checkpoint to protect.
mkdir ck
assert_exit 0 "$GALLEY" train "$MLP" "${args[@]}" checkpoint.dir=ck
before=$(md5sum ck/quickstart-step00000040.h5)

# in_ns SCRIPT: runs bash SCRIPT in a private mount namespace (1 if that is not possible).
in_ns() { unshare -m bash -c "$1"; }
can_mount=0
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null 2>&1 &&
    in_ns "mount -t tmpfs -o size=64k tmpfs '$GL_TMP' 2>/dev/null" 2>/dev/null; then
    can_mount=1
fi

info "read-only checkpoint directory: refused before training, previous checkpoint untouched"
if [[ $can_mount == 1 ]]; then
    run in_ns "mount --bind '$GL_TMP/ck' '$GL_TMP/ck' && mount -o remount,ro,bind '$GL_TMP/ck' &&
        exec '$GALLEY' train '$MLP' ${args[*]} checkpoint.dir=ck checkpoint.every_steps=10"
    assert_contains "$ERR" "Read-only file system"
elif [[ $(id -u) != 0 ]]; then
    chmod a-w ck
    run "$GALLEY" train "$MLP" "${args[@]}" checkpoint.dir=ck checkpoint.every_steps=10
    chmod u+w ck
    assert_contains "$ERR" "Permission denied"
else
    skip "root without unshare -m: cannot make a read-only directory"
fi
assert_rc 2
assert_contains "$ERR" "checkpoint directory ck is not writable"
assert_contains "$ERR" "hint: set checkpoint.dir to a directory you can write"
assert_not_contains "$OUT" "step     10/40"
[[ $(md5sum ck/quickstart-step00000040.h5) == "$before" ]] || fail "the previous checkpoint changed"
assert_exit 0 "$GALLEY" ckpt inspect ck/quickstart-step00000040.h5

[[ $can_mount == 1 ]] || skip "disk-full case needs root and unshare -m (the read-only case passed)"

info "disk full mid-run: reported, nothing partial left, previous checkpoints intact and resumable"
# Each checkpoint takes 220 KiB: 600 KiB hold two, the third fails with ENOSPC.
mkdir small
run in_ns "mount -t tmpfs -o size=600k tmpfs '$GL_TMP/small' &&
    '$GALLEY' train '$MLP' ${args[*]} checkpoint.dir=small checkpoint.every_steps=10; rc=\$?;
    ls -A '$GL_TMP/small' > '$GL_TMP/left.txt'; cp -r '$GL_TMP/small' '$GL_TMP/kept'; exit \$rc"
assert_rc 1
assert_contains "$OUT" "checkpoint: small/quickstart-step00000010.h5"
assert_contains "$OUT" "checkpoint: small/quickstart-step00000020.h5"
assert_contains "$ERR" "checkpoint at step 30 not written"
assert_contains "$ERR" "the disk is full"
assert_contains "$ERR" "the previous checkpoints are untouched"
[[ $(cat left.txt) == "quickstart-step00000010.h5"$'\n'"quickstart-step00000020.h5" ]] ||
    fail "the full disk holds: $(cat left.txt) (want exactly the two complete checkpoints)"
assert_exit 0 "$GALLEY" ckpt inspect kept/quickstart-step00000020.h5
assert_exit 0 "$GALLEY" train "$MLP" "${args[@]}" checkpoint.dir=kept --resume auto
assert_contains "$OUT" "resumed from kept/quickstart-step00000020.h5 at step 20"

info "ok"
