#!/usr/bin/env bash
# test_site_podman_hpc.sh: site/galley-entrypoint in the containers podman-hpc 1.2.2's own module
# files make (what tests/e2e/test_image_podman_hpc.sh found with the real tool, as fake trees):
# the runtime is told by PODMANHPC_MODULES_DIR, which every `podman-hpc run` sets, since only some
# modules create /opt/udiImage; --nccl copies libfabric and libcxi into the plugin's deps/lib and
# puts /usr/lib64 last on its LD_LIBRARY_PATH; its variables are kept. A module whose host files
# are missing (--gpu on a host without GPUs, --nccl where the host lacks the plugin and libfabric)
# is silent in podman-hpc: the entrypoint warns once, naming what is missing and what to do, and
# the command still runs. Needs no galley binary.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/site/fake_host.sh
source "$GALLEY_SRC/tests/site/fake_host.sh"

plugin=/opt/udiImage/modules/nccl-plugin

# ---- --nccl, the host had the files: one rank, no Slurm site variable ---------------------------
fh_new phpc-nccl
fh_podman_hpc_122_nccl
fh_write /opt/galley/etc/ld_library_path "/opt/image/lib"
fh_run "${FH_PODMAN_HPC_122_NCCL_ENV[@]}"
fh_ok
fh_expect LD_LIBRARY_PATH "$plugin/lib:$plugin/deps/lib:/usr/lib64:/opt/image/lib"
fh_expect NCCL_NET "AWS Libfabric"
fh_expect FI_PROVIDER cxi
fh_expect NCCL_PROTO "^LL128"
for kv in FI_CXI_DISABLE_HOST_REGISTER=1 FI_MR_CACHE_MONITOR=userfaultfd NCCL_CROSS_NIC=1 \
    NCCL_SOCKET_IFNAME=hsn NCCL_NET_GDR_LEVEL=PHB; do
    fh_expect "${kv%%=*}" "${kv#*=}"
done
fh_report
assert_contains "$REPORT" "runtime: podman-hpc (PODMANHPC_MODULES_DIR is set; modules --nccl); modules in /opt/udiImage/modules: nccl-plugin" "wiring report"
assert_contains "$REPORT" "site:    perlmutter (matched path:$plugin)" "wiring report"
assert_contains "$REPORT" "plugin: $plugin/lib/libnccl-net.so" "wiring report"
assert_contains "$REPORT" "libcxi: $plugin/deps/lib/libcxi.so.1; libfabric: $plugin/deps/lib/libfabric.so.1" "wiring report"
assert_contains "$REPORT" "kept NCCL_SOCKET_IFNAME=hsn (already set, to the value the site wants)" "wiring report"
info "--nccl (1.2.2 layout): runtime podman-hpc, plugin and deps/lib fabric found, module variables kept"

# ---- --nccl, the host lacked the files: nothing copied, the variables set all the same ----------
fh_new phpc-nccl-missing
fh_touch /run/.containerenv
fh_run "${FH_PODMAN_HPC_122_NCCL_ENV[@]}"
assert_rc 0
fh_stderr_lines
[[ $NLINES -eq 1 ]] || {
    show_run
    fail "--nccl without host files: expected one warning line, got $NLINES"
}
assert_contains "$ERR" "galley-entrypoint: warning: podman-hpc --nccl, but the container lacks the NCCL OFI plugin (libnccl-net*.so in $plugin/lib), the host's libfabric ($plugin/deps/lib/libfabric.so*), libcxi ($plugin/deps/lib/libcxi.so*)" "stderr"
assert_contains "$ERR" "nccl.yaml in /etc/podman_hpc/modules.d" "stderr"
assert_contains "$ERR" "leave out --nccl" "stderr"
fh_expect NCCL_SOCKET_IFNAME hsn
fh_expect_unset NCCL_NET FI_PROVIDER
fh_report
assert_contains "$REPORT" "runtime: podman-hpc (PODMANHPC_MODULES_DIR is set; modules --nccl)" "wiring report"
info "--nccl, host files missing: $ERR"

# The plugin there but libfabric not (a host whose libfabric moved): that alone is named.
fh_touch "$plugin/lib/libnccl-net.so" "$plugin/deps/lib/libcxi.so.1"
fh_run "${FH_PODMAN_HPC_122_NCCL_ENV[@]}"
assert_rc 0
assert_contains "$ERR" "the container lacks the host's libfabric ($plugin/deps/lib/libfabric.so*):" "stderr"
assert_not_contains "$ERR" "OFI plugin" "stderr"
info "--nccl, libfabric missing: named alone"

# Another rank stays quiet.
fh_run "${FH_PODMAN_HPC_122_NCCL_ENV[@]}" SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_STEP_NUM_NODES=1
fh_ok

# ---- --gpu on a host without GPUs: the module binds nothing -------------------------------------
fh_new phpc-gpu
fh_touch /run/.containerenv
fh_run "${FH_PODMAN_HPC_122[@]}" ENABLE_GPU=1
assert_rc 0
fh_stderr_lines
[[ $NLINES -eq 1 ]] || {
    show_run
    fail "--gpu without GPUs: expected one warning line, got $NLINES"
}
assert_contains "$ERR" "galley-entrypoint: warning: podman-hpc --gpu, but no GPU in the container (no /dev/nvidia[0-9]*)" "stderr"
assert_contains "$ERR" "galley runs on the CPU" "stderr"
fh_expect_unset CUDA_VISIBLE_DEVICES
fh_report
assert_contains "$REPORT" "runtime: podman-hpc (PODMANHPC_MODULES_DIR is set; modules --gpu)" "wiring report"
info "--gpu, no GPU: $ERR"
# With GPUs it binds, nothing is said.
fh_gpus 4
fh_run "${FH_PODMAN_HPC_122[@]}" ENABLE_GPU=1 SLURM_LOCALID=0
fh_ok
fh_expect CUDA_VISIBLE_DEVICES 0
# Without --gpu, no GPU is no news (a CPU run): the report only.
fh_new phpc-cpu
fh_touch /run/.containerenv
fh_run "${FH_PODMAN_HPC_122[@]}"
fh_ok
fh_report
assert_contains "$REPORT" "runtime: podman-hpc (PODMANHPC_MODULES_DIR is set)" "wiring report"
assert_contains "$REPORT" "[gpu] no GPU device" "wiring report"

# ---- plain podman: no PODMANHPC_MODULES_DIR ------------------------------------------------------
fh_run
fh_ok
fh_report
assert_contains "$REPORT" "runtime: podman (/run/.containerenv exists)" "wiring report"
info "podman-hpc told from plain podman by PODMANHPC_MODULES_DIR"
info "PASS"
