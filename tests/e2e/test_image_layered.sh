#!/usr/bin/env bash
# test_image_layered.sh: the images/examples Containerfiles build FROM the CPU image (ARG
# GALLEY_IMAGE) and run: the lab-recipes example trains its own recipe; the staging example
# copies HDF5 files from the /data mount to a node-local /stage once, then trains from the copy;
# the site example's folder is picked up by galley-entrypoint, with its own hook.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/image.sh"
image_need
image_build_cpu

examples=$GALLEY_SRC/images/examples

# build_example NAME: podman build images/examples/NAME on top of $IMAGE_CPU, as the README says.
build_example() {
    local name=$1 t0=$SECONDS
    run podman build --format docker -f "$examples/$name/Containerfile" \
        --build-arg "GALLEY_IMAGE=$IMAGE_CPU" -t "localhost/galley-test-$name:cpu" "$examples/$name"
    assert_rc 0
    info "built examples/$name on $IMAGE_CPU in $((SECONDS - t0)) s"
}

# ---- 1. recipes: a lab's recipe in /opt/galley/recipes/lab -------------------------------------
build_example recipes
image_run localhost/galley-test-recipes:cpu galley train recipes/lab/spirals-3arm.yaml
assert_rc 0
assert_no_crash
assert_contains "$OUT$ERR" "target reached" "spirals-3arm in the layered image"
info "examples/recipes: recipes/lab/spirals-3arm.yaml trained, target reached"

# ---- 2. staging: /data -> /stage once, then train from HDF5 -----------------------------------
build_example staging
mkdir -p "$GL_TMP/data" "$GL_TMP/stage"
# shellcheck disable=SC2016 # expanded inside the container
image_run -v "$GL_TMP/data:/data" "$IMAGE_CPU" sh -c '
    galley data synth spirals /data/spirals-train.h5 n=8192 classes=5 noise=0.04 &&
    galley data synth spirals /data/spirals-val.h5 n=2048 classes=5 noise=0.04 split=val'
assert_rc 0
staged=(podman run --rm -v "$GL_TMP/data:/data:ro" -v "$GL_TMP/stage:/stage" localhost/galley-test-staging:cpu
    galley-stage /data /stage galley train recipes/staged/spirals-h5.yaml)
run "${staged[@]}"
assert_rc 0
assert_no_crash
assert_contains "$ERR" "galley-stage: copied 2 files" "galley-stage's report"
assert_contains "$OUT$ERR" "target reached" "spirals-h5 from the staged copy"
[[ -f $GL_TMP/stage/spirals-train.h5 && -f $GL_TMP/stage/.galley-staged ]] ||
    fail "the staged files or the marker are not in the /stage mount"
run "${staged[@]}"
assert_rc 0
assert_contains "$ERR" "already staged" "a second run on the same node"
info "examples/staging: staged 2 HDF5 files once, trained from them (target reached), reused the copy"

# ---- 3. site: a site folder with its own hook ---------------------------------------------------
build_example site
image_run -e GALLEY_HOOKS_DEBUG=1 -e SLURM_CLUSTER_NAME=labcluster localhost/galley-test-site:cpu galley --version
assert_rc 0
assert_contains "$ERR" "labcluster" "the wiring report (GALLEY_HOOKS_DEBUG=1)"
assert_contains "$ERR" "NCCL_IB_HCA=mlx5" "the wiring report: the site's hooks/ib.sh"
# shellcheck disable=SC2016 # expanded inside the container
image_run -e GALLEY_HOOKS_DEBUG=1 -e NCCL_IB_HCA=mlx4 -e SLURM_CLUSTER_NAME=labcluster \
    localhost/galley-test-site:cpu sh -c 'echo "NCCL_IB_HCA=$NCCL_IB_HCA in the command"'
assert_rc 0
assert_contains "$OUT" "NCCL_IB_HCA=mlx4 in the command" "a value the user set"
info "examples/site: labcluster detected from SLURM_CLUSTER_NAME, its ib hook ran, the user's value kept"
info "PASS"
