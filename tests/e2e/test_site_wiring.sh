#!/usr/bin/env bash
# test_site_wiring.sh: `galley info --wiring`: inside the entrypoint (fake Perlmutter tree) it
# prints the hooks' report and the variables galley sees; outside it says no hooks ran and still
# lists the NCCL_*/FI_*/rank variables; an unreadable report and a bad argument are reported.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/site/fake_host.sh
source "$GALLEY_SRC/tests/site/fake_host.sh"
need_galley

# Outside a container: no hooks ran; the relevant variables are still listed, others are not.
run env -u GALLEY_WIRING_FILE NCCL_DEBUG=INFO FI_PROVIDER=tcp SLURM_PROCID=3 CUDA_VISIBLE_DEVICES=0 \
    UNRELATED_VAR=1 "$GALLEY" info --wiring
assert_rc 0
assert_no_crash
assert_contains "$OUT" "no site hooks ran: GALLEY_WIRING_FILE is not set" "stdout"
assert_contains "$OUT" "  NCCL_DEBUG=INFO" "stdout"
assert_contains "$OUT" "  FI_PROVIDER=tcp" "stdout"
assert_contains "$OUT" "  SLURM_PROCID=3" "stdout"
assert_contains "$OUT" "  CUDA_VISIBLE_DEVICES=0" "stdout"
assert_not_contains "$OUT" "UNRELATED_VAR" "stdout"
info "outside: no hooks ran, $(grep -c '^  [A-Z]' <<<"$OUT") variables listed"

# Through the entrypoint on a fake Perlmutter node (podman-hpc --gpu --nccl), rank 5 of 8.
fh_new pm
fh_podman_hpc_nccl
fh_gpus 4
fh_run "${FH_PODMAN_NCCL_ENV[@]}" SLURM_CLUSTER_NAME=perlmutter SLURM_LOCALID=1 SLURM_PROCID=5 \
    SLURM_NTASKS=8 SLURM_STEP_NUM_NODES=2 PMIX_RANK=5 -- "$GALLEY" info --wiring
assert_rc 0
assert_no_crash
assert_contains "$OUT" "galley wiring report: $FH_ROOT/opt/galley/site/galley-entrypoint" "stdout"
assert_contains "$OUT" "site:    perlmutter" "stdout"
assert_contains "$OUT" "set  CUDA_VISIBLE_DEVICES=2" "stdout"
assert_contains "$OUT" "set  NCCL_NET=AWS Libfabric  (NCCL fails instead of silently falling back" "stdout"
assert_contains "$OUT" "  NCCL_NET=AWS Libfabric" "stdout"
assert_contains "$OUT" "  FI_CXI_RDZV_EAGER_SIZE=0" "stdout"
assert_contains "$OUT" "  PMIX_MCA_gds=hash" "stdout"
assert_contains "$OUT" "  GALLEY_WIRING_FILE=$FH_ROOT/tmp/galley-wiring-" "stdout"
assert_not_contains "$OUT" "no site hooks ran" "stdout"
info "inside: the report ($(wc -l <<<"$OUT") lines) and the variables"

# A report that went missing.
run env GALLEY_WIRING_FILE="$GL_TMP/nonexistent.txt" "$GALLEY" info --wiring
assert_rc 0
assert_contains "$OUT" "no wiring report: GALLEY_WIRING_FILE=$GL_TMP/nonexistent.txt cannot be read" "stdout"

# Usage.
assert_exit 2 "$GALLEY" info --bogus
assert_contains "$ERR" "usage: galley info [--wiring]" "stderr"
assert_exit 0 "$GALLEY" help info
assert_contains "$OUT" "--wiring" "galley help info"
info "missing report, bad argument (exit 2), help text"
info "PASS"
