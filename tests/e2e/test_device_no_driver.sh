#!/usr/bin/env bash
# test_device_no_driver.sh: a CUDA build on a node without an NVIDIA driver says so (issue #27):
# "no GPU to use (no NVIDIA driver found: ...)", not the CUDA runtime's "CUDA driver version is
# insufficient for CUDA runtime version", which sent users looking for a driver update. Skipped
# in builds without CUDA and on nodes that have a driver.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
[[ $GALLEY_HAVE_CUDA == 1 ]] || skip "built without CUDA"
if [[ -e /proc/driver/nvidia/version ]] || { command -v ldconfig >/dev/null && ldconfig -p | grep -q 'libcuda\.so\.1'; }; then
    skip "this node has an NVIDIA driver"
fi

cd "$GL_TMP"
MLP=$GALLEY_SRC/recipes/quickstart.yaml
info "train.device: auto trains on the CPU and says no driver was found"
assert_exit 0 "$GALLEY" train "$MLP" train.steps=2 train.target=null train.threads=1 log.files=false \
    checkpoint.at_end=false train.device=auto
assert_contains "$OUT" "galley: no GPU to use (no NVIDIA driver found"
assert_not_contains "$OUT$ERR" "insufficient"

info "train.device: cuda is refused with the same reason"
run "$GALLEY" train "$MLP" train.steps=2 train.target=null log.files=false checkpoint.at_end=false train.device=cuda
assert_rc 2
assert_contains "$ERR" "no GPU can be used"
assert_contains "$ERR" "no NVIDIA driver found"

info "galley info says it too"
assert_exit 0 "$GALLEY" info
assert_contains "$OUT" "no NVIDIA driver found"
assert_not_contains "$OUT" "insufficient"
info "ok"
