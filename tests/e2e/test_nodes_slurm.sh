#!/usr/bin/env bash
# test_nodes_slurm.sh: a private Slurm across 2 "nodes" (tests/e2e/lib/nodes.sh, slurm_nodes.sh):
# one slurmd per node, srun from the first node.
#   - the site hooks under srun: Perlmutter without the NCCL OFI plugin (the fabric there) stops a
#     2-node job (srun -N 2, exit 1 before the command, saying the job spans 2 nodes) and leaves a
#     1-node job alone (srun -N 1); with GALLEY_NCCL_PLUGIN_REQUIRED=0 the 2-node job runs after
#     one warning (rank 0's), each node's local ranks 0 and 1 on GPUs 3 and 2 (fake tree, 4 GPUs);
#   - galley trained by `srun -N 2 -n 4 --mpi=pmix` equals `srun -N 1 -n 4` bitwise in
#     deterministic mode (parts=4): the same losses as text, the same checkpoint tensors (h5diff);
#     rank 0 says "launched by srun, 2 on this node".
# Under ASan the hooks part runs, galley's is left to the release tree (Open MPI and Slurm's
# PMIx plugin report leaks of their own there, as in test_dist_srun.sh).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/nodes.sh"
# shellcheck source=tests/e2e/lib/slurm_nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm_nodes.sh"
# shellcheck source=tests/site/fake_host.sh
source "$GALLEY_SRC/tests/site/fake_host.sh"
need_galley
need_cmd timeout

now_ns() { date +%s%N; }
secs_since() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }
t_all=$(now_ns)

cd "$GL_TMP"
why=$(slurm_why_not)
[[ -z $why ]] || skip "private Slurm: $why"
nodes_start 2 2
slurm_nodes_start
slurm_nodes_check_mpi
n1=${GL_NODES[0]} n2=${GL_NODES[1]}

# ---- the site hooks under srun: Slingshot rules and GPU binding per node --------------------------
# Perlmutter under podman-hpc without --nccl: the fabric (device, host libcxi), no plugin; 4 GPUs.
fh_new pm-noplugin
fh_touch /run/.containerenv /dev/cxi0 /usr/lib64/libcxi.so.1 /opt/cray/libfabric/1.15.2.0/lib64/libfabric.so.1
fh_dir /opt/udiImage/modules/gpu
fh_gpus 4
entry=$FH_ROOT/opt/galley/site/galley-entrypoint
hookenv=ALL,GALLEY_HOOKS_ROOT=$FH_ROOT,GALLEY_SITE=perlmutter,GALLEY_HOOKS_STRICT=1,TMPDIR=$FH_ROOT/tmp
# shellcheck disable=SC2016 # expanded by each task's shell
show='echo "ran $(hostname) $SLURM_PROCID $SLURM_LOCALID ${CUDA_VISIBLE_DEVICES:--}"'

run slurm_nodes_srun -N 2 -n 4 --export="$hookenv" "$entry" bash -c "$show"
[[ $RC -ne 0 ]] || { show_run; fail "plugin missing, srun -N 2: the job ran (the site says fail)"; }
assert_not_contains "$OUT" "ran " "stdout (the command must not start)"
assert_contains "$ERR" "galley-entrypoint: error: site perlmutter: missing the NCCL OFI plugin" "stderr"
assert_contains "$ERR" "This job spans 2 nodes" "stderr"
info "plugin missing, srun -N 2 -n 4: exit $RC before the command, 'This job spans 2 nodes'"

run slurm_nodes_srun -N 1 -n 2 --export="$hookenv" "$entry" bash -c "$show"
assert_rc 0
# Slurm picks the node (either one; the first may still be freeing the last step).
[[ $(grep -c "^ran " <<<"$OUT") == 2 && $(awk '{ print $2 }' <<<"$OUT" | sort -u | wc -l) == 1 ]] ||
    { show_run; fail "plugin missing, srun -N 1: expected 2 tasks on one node"; }
# Only srun may speak ("job N queued and waiting for resources" while the last step ends).
assert_not_contains "$ERR" "galley-entrypoint" "stderr"
info "plugin missing, srun -N 1 -n 2: runs, nothing said (a single node needs no plugin)"

run slurm_nodes_srun -N 2 -n 4 --export="$hookenv,GALLEY_NCCL_PLUGIN_REQUIRED=0" "$entry" bash -c "$show"
assert_rc 0
n=$(grep -c "warning: site perlmutter: missing the NCCL OFI plugin" <<<"$ERR" || true)
[[ $n == 1 ]] || { show_run; fail "GALLEY_NCCL_PLUGIN_REQUIRED=0 across 2 nodes: $n warnings, expected 1 (rank 0's)"; }
got=$(sort -k3n <<<"$OUT" | awk '{ printf "%s%s %s %s %s", sep, $2, $3, $4, $5; sep = "; " }')
want="$n1 0 0 3; $n1 1 1 2; $n2 2 0 3; $n2 3 1 2"
[[ $got == "$want" ]] || fail "GPU binding under srun -N 2: got '$got', expected '$want' (host rank localid GPU)"
info "GALLEY_NCCL_PLUGIN_REQUIRED=0, srun -N 2 -n 4: one warning, then host rank localid GPU: $got"

if [[ $GALLEY_SANITIZE == 1 ]]; then
    info "ASan build: galley under srun is left to the release tree (Open MPI and Slurm's PMIx plugin are noise here)"
    info "ok (Slurm and hooks) in $(secs_since "$t_all") s"
    exit 0
fi
need_cmd h5diff

# ---- srun -N 2 -n 4 == srun -N 1 -n 4, bitwise ---------------------------------------------------
CNN=$GALLEY_SRC/tests/recipes/dist/conv_bn_dropout.yaml
det=(distributed.deterministic=true distributed.parts=4)
t0=$(now_ns)
run slurm_nodes_srun -N 2 -n 4 --mpi="$GL_SLURM_MPI" "$GALLEY" train "$CNN" "${det[@]}" checkpoint.dir=ck-r-2x2 --run-dir r-2x2
assert_rc 0
t_2x2=$(secs_since "$t0")
assert_contains "$OUT" "ranks: 4 (launched by srun, 2 on this node)" "srun -N 2 banner"
t0=$(now_ns)
run slurm_nodes_srun -N 1 -n 4 --overcommit --mpi="$GL_SLURM_MPI" "$GALLEY" train "$CNN" "${det[@]}" \
    checkpoint.dir=ck-r-1x4 --run-dir r-1x4
assert_rc 0
t_1x4=$(secs_since "$t0")
assert_contains "$OUT" "ranks: 4 (launched by srun, 4 on this node)" "srun -N 1 banner"
nodes_same_training r-1x4 r-2x2 "srun -N 2 -n 4 against srun -N 1 -n 4"
info "srun -N 2 -n 4 = srun -N 1 -n 4: $GL_NODES_SAME; ${t_2x2} s across nodes, ${t_1x4} s on one"

info "ok in $(secs_since "$t_all") s (nodes up in ${GL_NODES_START_SECONDS} s, Slurm in ${GL_SLURM_NODES_START_SECONDS} s)"
