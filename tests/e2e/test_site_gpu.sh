#!/usr/bin/env bash
# test_site_gpu.sh: site/hooks/gpu.sh: local rank -> CUDA_VISIBLE_DEVICES. Perlmutter's site data
# reverses the order (local ranks 0..3 -> GPUs 3,2,1,0), generic keeps it; a list already in
# CUDA_VISIBLE_DEVICES is narrowed in the site's order, a single GPU is kept; the MPI launcher's
# local rank wins over Slurm's. Needs no galley binary.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/site/fake_host.sh
source "$GALLEY_SRC/tests/site/fake_host.sh"

fh_new gpus4
fh_gpus 4

# gpu_of SITE VAR=VALUE...: the CUDA_VISIBLE_DEVICES the command sees ("-" when unset), in GOT.
gpu_of() {
    local site=$1
    shift
    fh_run GALLEY_SITE="$site" GALLEY_HOOKS=gpu "$@"
    fh_ok
    GOT=${FH_ENV[CUDA_VISIBLE_DEVICES]--}
}

# expect_gpus SITE WANT VAR=VALUE...: GOT for local ranks 0..n-1 (SLURM_LOCALID) is WANT.
expect_gpus() {
    local site=$1 want=$2 got="" i n
    shift 2
    n=$(($(tr -cd , <<<"$want" | wc -c) + 1))
    for ((i = 0; i < n; i++)); do
        gpu_of "$site" SLURM_LOCALID="$i" "$@"
        got+=${got:+,}$GOT
    done
    [[ $got == "$want" ]] || fail "$site ${*:-}: local ranks 0..$((n - 1)) got GPUs $got, expected $want"
    info "$site${*:+ $*}: local ranks 0..$((n - 1)) -> $got"
}

expect_gpus perlmutter 3,2,1,0
expect_gpus generic 0,1,2,3
# More local ranks than GPUs: they wrap around (GPUs shared).
expect_gpus perlmutter 3,2,1,0,3,2
gpu_of perlmutter SLURM_LOCALID=5
fh_report
assert_contains "$REPORT" "more local ranks than GPUs" "wiring report"

# Pre-restricted lists: the listed GPUs, in the site's order; one GPU is kept as it is.
expect_gpus perlmutter 1,0 CUDA_VISIBLE_DEVICES=0,1
expect_gpus generic 0,1 CUDA_VISIBLE_DEVICES=0,1
expect_gpus perlmutter 3,1 CUDA_VISIBLE_DEVICES=1,3
expect_gpus perlmutter 2,2,2,2 CUDA_VISIBLE_DEVICES=2
expect_gpus perlmutter GPU-aa,GPU-bb CUDA_VISIBLE_DEVICES=GPU-aa,GPU-bb
gpu_of perlmutter SLURM_LOCALID=0 CUDA_VISIBLE_DEVICES=2
fh_report
assert_contains "$REPORT" "CUDA_VISIBLE_DEVICES=2 already names one GPU: kept" "wiring report"

# The MPI launcher's local rank wins over Slurm's (mpirun inside a batch step).
gpu_of perlmutter SLURM_LOCALID=0 OMPI_COMM_WORLD_LOCAL_RANK=2
[[ $GOT == 1 ]] || fail "OMPI_COMM_WORLD_LOCAL_RANK=2 on perlmutter: expected GPU 1, got $GOT"
gpu_of generic MPI_LOCALRANKID=3
[[ $GOT == 3 ]] || fail "MPI_LOCALRANKID=3 on generic: expected GPU 3, got $GOT"
gpu_of generic PALS_LOCAL_RANKID=1
[[ $GOT == 1 ]] || fail "PALS_LOCAL_RANKID=1 on generic: expected GPU 1, got $GOT"
info "OMPI_COMM_WORLD_LOCAL_RANK over SLURM_LOCALID; MPI_LOCALRANKID, PALS_LOCAL_RANKID read"

# Nothing set: no local rank, GALLEY_GPU_BIND=0.
gpu_of perlmutter
[[ $GOT == - ]] || fail "no local rank: expected CUDA_VISIBLE_DEVICES unset, got $GOT"
gpu_of perlmutter SLURM_LOCALID=1 GALLEY_GPU_BIND=0
[[ $GOT == - ]] || fail "GALLEY_GPU_BIND=0: expected CUDA_VISIBLE_DEVICES unset, got $GOT"
info "no local rank, GALLEY_GPU_BIND=0: nothing set"

# Two GPUs on a site whose order names four: the order keeps the GPUs present.
fh_new gpus2
fh_gpus 2
expect_gpus perlmutter 1,0

info "PASS"
