#!/usr/bin/env bash
# test_image_podman_hpc.sh: the README's podman-hpc path, through NERSC's real podman-hpc (PyPI
# podman-hpc 1.2.2, its own module files and hook, fuse-overlayfs-wrap and squashfuse) with a
# private configuration (tests/e2e/lib/podman_hpc.sh):
#   1. `./build.sh image --cpu` with podman-hpc as the tool (the other image tests' layer cache);
#   2. before `podman-hpc migrate`, a compute node cannot run the image (the message is shown);
#   3. `podman-hpc migrate` makes the squashed image; from here on every run is a compute node's
#      view: an empty local store, the image only from the squash directory;
#   4. `podman-hpc run --rm -v RUNS:/runs IMAGE galley train recipes/quickstart.yaml` trains and
#      leaves its run directory in /runs;
#   5. `--gpu` on this GPU-less host: the entrypoint says so, galley trains on the CPU;
#   6. `--nccl` with a fake host tree holding the files nccl.yaml copies: the entrypoint finds the
#      plugin, sets the NCCL/libfabric profile and keeps the module's own variables; with the
#      host files missing (the real module on this host) it says what is missing and what to do;
#   7. `srun --mpi=pmix -n 2 podman-hpc run --rm --openmpi-pmix IMAGE galley train` on the private
#      Slurm trains data-parallel with the losses and final weights of the same srun outside.
# What it cannot show: a real GPU (--gpu binds nothing here), real Slingshot (the plugin and
# libraries are stubs; NCCL is not in the CPU image), rootless podman (NERSC's users; here root).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/image.sh"
# shellcheck source=tests/e2e/lib/podman_hpc.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/podman_hpc.sh"
# shellcheck source=tests/e2e/lib/slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm.sh"
image_need
need_galley
need_cmd timeout
phpc_need
t_start=$SECONDS
phpc_install
phpc_setup
trap 'phpc_cleanup; gl_cleanup' EXIT
IMAGE=localhost/galley-test:podman-hpc
info "podman-hpc $PHPC_VERSION in $PHPC_VENV, private config $PODMANHPC_CONFIG_FILE ($((SECONDS - t_start)) s)"

# ---- 0. the configuration is the private one --------------------------------------------------
run podman-hpc infohpc
assert_rc 0
assert_contains "$OUT" "Podman-HPC Version: $PHPC_VERSION" "podman-hpc infohpc"
for want in "graph_root (file: graph_root): $IMAGE_CACHE/storage" \
    "modules_dir (file: modules_dir): $PHPC_DIR/etc/modules.d" \
    "hooks_dir (file: hooks_dir): $PHPC_DIR/hooks.d" \
    "mount_program (file: mount_program): $PHPC_VENV/bin/fuse-overlayfs-wrap" \
    "$PHPC_DIR/etc/modules.d/nccl.yaml"; do
    assert_contains "$OUT" "$want" "podman-hpc infohpc"
done
assert_not_contains "$OUT" " /etc/podman_hpc" "podman-hpc infohpc"

# ---- 1. ./build.sh image --cpu with podman-hpc ------------------------------------------------
t0=$SECONDS
image_lock
image_base
ctx=$GL_TMP/context
log=$IMAGE_CACHE/build-cpu.$GL_TEST_NAME.log
image_context "$ctx"
GALLEY_CONTAINER_TOOL=podman-hpc GALLEY_JOBS=${GALLEY_JOBS:-2} "$ctx/build.sh" image --cpu \
    --base "$IMAGE_BASE" --tag "$IMAGE" >"$log" 2>&1 </dev/null || {
    tail -n 40 "$log" >&2
    fail "GALLEY_CONTAINER_TOOL=podman-hpc ./build.sh image --cpu failed (last lines above; full log $log)"
}
image_unlock
build_out=$(<"$log")
assert_contains "$build_out" "with podman-hpc" "./build.sh image output"
assert_contains "$build_out" "compute nodes see it after: podman-hpc migrate $IMAGE" "./build.sh image output"
run podman image inspect --format '{{json .Config.Env}}' "$IMAGE"
assert_rc 0
assert_not_contains "$OUT" "PODMANHPC_MODULES_DIR" "the image's ENV (podman-hpc build adds it; build.sh unsets it)"
info "built $IMAGE with podman-hpc in $((SECONDS - t0)) s ($(grep -c -- '--> Using cache' "$log" || true) steps from the layer cache)"

# ---- 2. not migrated: a compute node does not see it -------------------------------------------
t0=$SECONDS
run timeout 120 "${PHPC_NODE[@]}" podman-hpc run --rm "${PHPC_RUN[@]}" "$IMAGE" galley info
[[ $RC -ne 0 ]] || {
    show_run
    fail "a compute node ran $IMAGE before podman-hpc migrate"
}
not_migrated=$(grep -m1 -i 'error' <<<"$ERR" || head -n 1 <<<"$ERR")
info "not migrated: exit $RC in $((SECONDS - t0)) s: $not_migrated"
# The README quotes this message and says what it means (run podman-hpc migrate).
readme=$(<"$GALLEY_SRC/README.md")
assert_contains "$ERR" "docker://$IMAGE" "the not-migrated message"
if [[ $ERR == *"pinging container registry localhost"* ]]; then
    assert_contains "$readme" "${not_migrated#*"docker://$IMAGE"}" "README.md's podman-hpc section (the not-migrated message)"
fi
# shellcheck disable=SC2016 # backquotes of the README's markdown
assert_contains "$readme" 'That message means: run `podman-hpc migrate IMAGE`' "README.md's podman-hpc section"

# ---- 3. podman-hpc migrate ---------------------------------------------------------------------
t0=$SECONDS
run timeout 300 podman-hpc migrate "$IMAGE"
assert_rc 0
# podman-hpc 1.2.2 exits 0 when mksquashfs fails ("ERROR:root:Squash Failed"): look for the result.
assert_not_contains "$ERR" "Squash Failed" "podman-hpc migrate's messages"
squash=$(find "$SQUASH_DIR/overlay/l" -maxdepth 1 -name '*.squash' -newer "$PODMANHPC_CONFIG_FILE" | head -n 1)
[[ -s $squash ]] || {
    show_run
    fail "podman-hpc migrate made no squash file in $SQUASH_DIR/overlay/l"
}
run "${PHPC_NODE[@]}" podman-hpc images --format '{{.Repository}}:{{.Tag}} {{.ReadOnly}}'
assert_rc 0
assert_contains "$OUT" "$IMAGE true" "a compute node's podman-hpc images (read-only: from the squash directory)"
info "migrated in $((SECONDS - t0)) s: $(du -m "$squash" | cut -f1) MiB squash file; a compute node lists it read-only"

# ---- 4. the quickstart from the squashed image, run directory in /runs ------------------------
t0=$SECONDS
mkdir -p "$GL_TMP/runs"
run timeout 300 "${PHPC_NODE[@]}" podman-hpc run --rm "${PHPC_RUN[@]}" -v "$GL_TMP/runs:/runs" \
    -e GALLEY_HOOKS_DEBUG=1 "$IMAGE" galley train recipes/quickstart.yaml
assert_rc 0
assert_no_crash
assert_contains "$OUT$ERR" "target reached" "quickstart output"
assert_contains "$ERR" "runtime: podman-hpc (PODMANHPC_MODULES_DIR is set)" "the entrypoint's report"
metrics=$(find "$GL_TMP/runs" -name metrics.jsonl | head -n 1)
[[ -n $metrics ]] || fail "no metrics.jsonl under the /runs mount"
info "quickstart: 'target reached' in $((SECONDS - t0)) s; run directory in /runs: ${metrics#"$GL_TMP/runs/"}"

# ---- 5. --gpu without a GPU ---------------------------------------------------------------------
t0=$SECONDS
quick=(recipes/quickstart.yaml train.steps=20 train.target=null log.every=10)
run timeout 300 "${PHPC_NODE[@]}" podman-hpc run --rm "${PHPC_RUN[@]}" --gpu "$IMAGE" \
    galley train "${quick[@]}" --run-dir /tmp/gpu-run
assert_rc 0
assert_no_crash
assert_contains "$ERR" "galley-entrypoint: warning: podman-hpc --gpu, but no GPU in the container" "stderr"
assert_contains "$OUT" "device cpu" "galley's banner"
assert_contains "$OUT" "done: 20 steps" "galley's output"
info "--gpu, no GPU: $(grep -m1 'podman-hpc --gpu' <<<"$ERR" | cut -c1-120)... and trained on the CPU ($((SECONDS - t0)) s)"

# ---- 6. --nccl: the fake host tree, then the real module with the host files missing ----------
# What nccl.yaml copies, under the fake host root: libfabric (with its .so link), libcxi, and the
# plugin from NERSC's global common (stubs: nothing loads them, the CPU image has no NCCL).
lf=$PHPC_HOST/opt/cray/libfabric/1.20.1/lib64
mkdir -p "$lf" "$PHPC_HOST/usr/lib64" "$PHPC_HOST/global/common/software/nersc9/nccl/2.19/plugin/lib"
: >"$lf/libfabric.so.1"
ln -sf libfabric.so.1 "$lf/libfabric.so"
: >"$PHPC_HOST/usr/lib64/libcxi.so.1"
: >"$PHPC_HOST/global/common/software/nersc9/nccl/2.19/plugin/lib/libnccl-net.so"
t0=$SECONDS
run timeout 120 "${PHPC_TEST_MODULES[@]}" "${PHPC_NODE[@]}" podman-hpc run --rm "${PHPC_RUN[@]}" --nccl \
    -e GALLEY_HOOKS_DEBUG=1 "$IMAGE" env
assert_rc 0
declare -A ENV=()
while IFS= read -r line; do
    [[ $line == [A-Za-z_]*=* ]] && ENV[${line%%=*}]=${line#*=}
done <<<"$OUT"
expect() {
    [[ ${ENV[$1]-unset} == "$2" ]] || {
        show_run
        fail "--nccl: expected $1=$2 in the command's environment, found ${ENV[$1]-nothing}"
    }
}
nccl_lib=/opt/udiImage/modules/nccl-plugin
assert_contains "$ERR" "runtime: podman-hpc (PODMANHPC_MODULES_DIR is set; modules --nccl)" "the entrypoint's report"
assert_contains "$ERR" "site:    perlmutter" "the entrypoint's report"
assert_contains "$ERR" "plugin: $nccl_lib/lib/libnccl-net.so" "the entrypoint's report"
assert_contains "$ERR" "libcxi: $nccl_lib/deps/lib/libcxi.so.1; libfabric: $nccl_lib/deps/lib/libfabric.so" "the entrypoint's report"
assert_not_contains "$ERR" "warning" "stderr"
[[ ${ENV[LD_LIBRARY_PATH]:-} == "$nccl_lib/lib:$nccl_lib/deps/lib:"* ]] || {
    show_run
    fail "--nccl: LD_LIBRARY_PATH=${ENV[LD_LIBRARY_PATH]:-} does not start with the plugin's folders"
}
# The module's own variables (set by podman-hpc before the entrypoint) are kept ...
for kv in FI_CXI_DISABLE_HOST_REGISTER=1 FI_MR_CACHE_MONITOR=userfaultfd NCCL_CROSS_NIC=1 \
    NCCL_SOCKET_IFNAME=hsn NCCL_NET_GDR_LEVEL=PHB ENABLE_NCCL=1; do
    expect "${kv%%=*}" "${kv#*=}"
done
assert_contains "$ERR" "kept NCCL_SOCKET_IFNAME=hsn (already set" "the entrypoint's report"
# ... and the site's profiles add what the module does not set.
expect NCCL_NET "AWS Libfabric"
expect NCCL_PROTO "^LL128"
expect FI_PROVIDER cxi
expect FI_CXI_DEFAULT_CQ_SIZE 131072
info "--nccl with the fake host files: plugin found, LD_LIBRARY_PATH=${ENV[LD_LIBRARY_PATH]}; NCCL_NET, FI_PROVIDER set; the module's 5 variables kept ($((SECONDS - t0)) s)"

# The real module on this host, which has none of the files: podman-hpc copies nothing, silently.
run timeout 120 "${PHPC_NODE[@]}" podman-hpc run --rm "${PHPC_RUN[@]}" --nccl "$IMAGE" \
    galley train "${quick[@]}" --run-dir /tmp/nccl-run
assert_rc 0
assert_contains "$ERR" "galley-entrypoint: warning: podman-hpc --nccl, but the container lacks the NCCL OFI plugin" "stderr"
assert_contains "$ERR" "nccl.yaml" "stderr"
nccl_missing=$(grep -m1 'podman-hpc --nccl' <<<"$ERR")
info "--nccl, host files missing: $nccl_missing"

# ---- 7. srun --mpi=pmix -n 2 podman-hpc run --openmpi-pmix, against the same srun outside -------
slurm_start
trap 'phpc_cleanup; slurm_stop; gl_cleanup' EXIT
common=(train.steps=40 train.target=null log.every=10 train.threads=1
    distributed.deterministic=true distributed.parts=2)
losses() {
    sed -nE 's/^\{"kind":"(train|eval)".*"step":([0-9]+),.*"loss":([^,}]+).*$/\1 \2 \3/p' "$1/metrics.jsonl"
}
t0=$SECONDS
run timeout 180 srun --label -n 2 --mpi="$GL_SLURM_MPI" --kill-on-bad-exit=1 \
    "$GALLEY" train "$GALLEY_SRC/recipes/quickstart.yaml" "${common[@]}" checkpoint.dir="$GL_TMP/host-ck" \
    --run-dir "$GL_TMP/host-np2"
assert_rc 0
t_host=$((SECONDS - t0))
# The private Slurm keeps the PMIx server's files in its own TmpFS ($GL_SLURM_DIR); on NERSC the
# module's /var/spool/slurmd bind covers that.
t0=$SECONDS
run timeout 300 srun --label -n 2 --mpi="$GL_SLURM_MPI" --kill-on-bad-exit=1 \
    "${PHPC_TEST_MODULES[@]}" "${PHPC_NODE[@]}" podman-hpc run --rm "${PHPC_RUN[@]}" --openmpi-pmix \
    -v "$GL_SLURM_DIR:$GL_SLURM_DIR" -v "$GL_TMP/runs:/runs" "$IMAGE" \
    galley train recipes/quickstart.yaml "${common[@]}" checkpoint.dir=/runs/ck --run-dir /runs/np2
assert_rc 0
assert_no_crash
t_ctr=$((SECONDS - t0))
assert_contains "$OUT" "2 ranks" "galley's banner under srun + podman-hpc"
[[ $(grep -c 'galley: training' <<<"$OUT") -eq 1 ]] || {
    show_run
    fail "expected one 'galley: training' banner (rank 0's)"
}
[[ -s $GL_TMP/runs/np2/metrics.jsonl ]] || fail "no metrics.jsonl in /runs/np2"
a=$(losses "$GL_TMP/host-np2")
b=$(losses "$GL_TMP/runs/np2")
[[ -n $a && $a == "$b" ]] || {
    diff <(echo "$a") <(echo "$b") | head -n 20 >&2
    fail "srun -n 2: the losses in the containers differ from the same run outside (diff above)"
}
ck_host=$(find "$GL_TMP/host-ck" -name '*.h5' | LC_ALL=C sort | tail -n 1)
ck_ctr=$(find "$GL_TMP/runs/ck" -name '*.h5' | LC_ALL=C sort | tail -n 1)
[[ -n $ck_host && -n $ck_ctr && ${ck_host##*/} == "${ck_ctr##*/}" ]] ||
    fail "final checkpoints: '${ck_host##*/}' outside vs '${ck_ctr##*/}' in the containers"
if command -v h5diff >/dev/null 2>&1; then
    h5diff -r "$ck_host" "$ck_ctr" /params /params >"$GL_TMP/h5diff.out" 2>&1 || {
        head -n 20 "$GL_TMP/h5diff.out" >&2
        fail "final checkpoints differ in /params (h5diff above)"
    }
    same="losses as text and the final /params (h5diff)"
else
    same="losses as text (no h5diff: weights not compared)"
fi
info "srun --mpi=pmix -n 2 podman-hpc run --openmpi-pmix: 2 ranks, $(grep -c . <<<"$a") records; same $same as outside (containers $t_ctr s, outside $t_host s)"

info "PASS in $((SECONDS - t_start)) s"
