#!/usr/bin/env bash
# test_site_nccl.sh: site/galley-entrypoint on Perlmutter without the NCCL OFI plugin (or without
# the fabric): a multi-node job stops with a clear error (site data NCCL_PLUGIN_MISSING=fail), or
# warns once and runs over TCP (GALLEY_NCCL_PLUGIN_REQUIRED=0, or the site data says fallback);
# a single node or a user-chosen NCCL_NET is left alone. Needs no galley binary.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/site/fake_host.sh
source "$GALLEY_SRC/tests/site/fake_host.sh"

# Perlmutter under podman-hpc without --nccl: the fabric (device, host libcxi/libfabric), no plugin.
fh_new pm-noplugin
fh_touch /run/.containerenv /dev/cxi0 /usr/lib64/libcxi.so.1 /opt/cray/libfabric/1.15.2.0/lib64/libfabric.so.1
fh_dir /opt/udiImage/modules/gpu
fh_gpus 4
job=(SLURM_CLUSTER_NAME=perlmutter SLURM_STEP_NUM_NODES=2 SLURM_NTASKS=8 SLURM_PROCID=0 SLURM_LOCALID=0)

# fail (Perlmutter's site data): exit 1 before the command runs, saying what and how.
fh_run "${job[@]}"
assert_rc 1
[[ -z $OUT ]] || fail "the command ran although the plugin is required"
assert_contains "$ERR" "galley-entrypoint: error: site perlmutter: missing the NCCL OFI plugin (libnccl-net*.so; searched" "stderr"
assert_contains "$ERR" "/opt/udiImage/modules/nccl-plugin/lib" "stderr"
assert_contains "$ERR" "podman-hpc run --gpu --nccl" "stderr"
assert_contains "$ERR" "GALLEY_NCCL_PLUGIN_REQUIRED=0" "stderr"
assert_contains "$ERR" "This job spans 2 nodes" "stderr"
info "plugin missing, 2 nodes, site says fail: exit 1: ${ERR:0:110}..."

# fallback by the variable: one warning line (rank 0), fabric still set up for MPI, no NCCL_NET.
fh_run "${job[@]}" GALLEY_NCCL_PLUGIN_REQUIRED=0
assert_rc 0
fh_stderr_lines
[[ $NLINES -eq 1 ]] || {
    show_run
    fail "fallback: expected one warning line, got $NLINES"
}
assert_contains "$ERR" "galley-entrypoint: warning: site perlmutter: missing the NCCL OFI plugin" "stderr"
assert_contains "$ERR" "TCP sockets" "stderr"
fh_expect_unset NCCL_NET NCCL_SOCKET_IFNAME NCCL_PROTO
fh_expect FI_PROVIDER cxi
fh_expect LD_LIBRARY_PATH /opt/cray/libfabric/1.15.2.0/lib64:/usr/lib64
fh_expect CUDA_VISIBLE_DEVICES 3
info "GALLEY_NCCL_PLUGIN_REQUIRED=0: one warning, FI_* set, no NCCL_NET"

# Other ranks stay quiet.
fh_run "${job[@]/SLURM_PROCID=0/SLURM_PROCID=3}" GALLEY_NCCL_PLUGIN_REQUIRED=0
fh_ok
info "fallback: rank 3 prints nothing"

# fallback by the site data: a site folder that says so.
sed -i 's/^NCCL_PLUGIN_MISSING=fail/NCCL_PLUGIN_MISSING=fallback/' "$FH_ROOT/opt/galley/site/sites/perlmutter/site.env"
grep -q '^NCCL_PLUGIN_MISSING=fallback' "$FH_ROOT/opt/galley/site/sites/perlmutter/site.env" ||
    fail "could not switch the fake site to fallback"
fh_run "${job[@]}"
assert_rc 0
assert_contains "$ERR" "warning: site perlmutter: missing the NCCL OFI plugin" "stderr"
fh_expect_unset NCCL_NET
# ... and GALLEY_NCCL_PLUGIN_REQUIRED=1 overrides it back.
fh_run "${job[@]}" GALLEY_NCCL_PLUGIN_REQUIRED=1
assert_rc 1
assert_contains "$ERR" "(GALLEY_NCCL_PLUGIN_REQUIRED=1 asks for the plugin.)" "stderr"
info "NCCL_PLUGIN_MISSING=fallback in site.env: warning; GALLEY_NCCL_PLUGIN_REQUIRED=1: error"

# A single node needs no network plugin: nothing to say, even where the site says fail.
fh_new pm-noplugin-1node
fh_touch /run/.containerenv /dev/cxi0 /usr/lib64/libcxi.so.1
fh_dir /opt/udiImage/modules/gpu
fh_run SLURM_CLUSTER_NAME=perlmutter SLURM_STEP_NUM_NODES=1 SLURM_NTASKS=4 SLURM_PROCID=0
fh_ok
fh_expect_unset NCCL_NET
fh_report
assert_contains "$REPORT" "a single node needs no network plugin" "wiring report"
# ... nor a single process (login node: galley check in the container).
fh_run SLURM_CLUSTER_NAME=perlmutter
fh_ok
# ... and GALLEY_NCCL_PLUGIN_REQUIRED=1 insists even there.
fh_run SLURM_CLUSTER_NAME=perlmutter GALLEY_NCCL_PLUGIN_REQUIRED=1
assert_rc 1
info "single node / single process: no error; GALLEY_NCCL_PLUGIN_REQUIRED=1 still insists"

# The user chose NCCL_NET: their call, no error.
fh_run "${job[@]}" NCCL_NET=Socket
fh_ok
fh_expect NCCL_NET Socket
info "user-set NCCL_NET=Socket: no error"

# mpirun with every rank on this node (Open MPI's local size is the world's): one node, no error.
fh_run GALLEY_SITE=perlmutter OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0 \
    OMPI_COMM_WORLD_LOCAL_SIZE=4
fh_ok
# ... 2 of the 4 here: several nodes.
fh_run GALLEY_SITE=perlmutter OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0 \
    OMPI_COMM_WORLD_LOCAL_SIZE=2
assert_rc 1
# mpirun without Slurm: node count unknown, several ranks: treated as multi-node.
fh_run GALLEY_SITE=perlmutter OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0
assert_rc 1
info "mpirun, 4 ranks, node count unknown: plugin required"

# The plugin without the fabric (no /dev/cxi*, no libcxi): not wired either.
fh_new pm-nofabric
fh_touch /run/.containerenv /opt/udiImage/modules/nccl-plugin/lib/libnccl-net.so
fh_run "${job[@]}"
assert_rc 1
assert_contains "$ERR" "missing the Slingshot fabric (no /dev/cxi* device, no libcxi.so)" "stderr"
fh_run "${job[@]}" GALLEY_NCCL_PLUGIN_REQUIRED=0
assert_rc 0
fh_expect_prefix_unset NCCL_ FI_
fh_expect_unset LD_LIBRARY_PATH
info "plugin without fabric: error (or warning with GALLEY_NCCL_PLUGIN_REQUIRED=0), nothing set"

info "PASS"
