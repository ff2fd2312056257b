#!/usr/bin/env bash
# test_nodes_mpi.sh: galley across 2 "nodes" (network, UTS and mount namespaces on one machine,
# tests/e2e/lib/nodes.sh), launched by mpirun from the first node through lib/ns_agent.sh:
#   - the site hooks see each node's own local ranks: Perlmutter's GPU order (3,2,1,0) gives
#     local ranks 0 and 1 of each node GPUs 3 and 2 (one node of 4 ranks: 3,2,1,0), on a fake
#     tree of 4 GPUs per node; without the NCCL OFI plugin Perlmutter's hooks stop the 2-node
#     job before the command (GALLEY_NCCL_PLUGIN_REQUIRED=0: one warning, then it runs);
#   - 2 nodes x 2 ranks train bitwise as 1 node x 4 ranks in deterministic mode (parts=4): the
#     same losses as text and the same checkpoint tensors (h5diff); rank 0 says "2 on this node"
#     and the MLPerf log number_of_nodes 2 (1 node: 4 and 1);
#   - node-local staging: galley-stage (images/examples/staging) copies the data once per node
#     (2 copies of each file for 2 nodes, not 4), each node's local rank 0 copying to its own
#     node-local folder; data.loader.stage copies per rank, each rank to its own node's folder
#     (so 4 copies today), read there and removed at the end on both nodes.
# Under ASan only the harness and the hooks run (galley under Open MPI there is noise).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/nodes.sh"
# shellcheck source=tests/site/fake_host.sh
source "$GALLEY_SRC/tests/site/fake_host.sh"
need_galley
need_cmd mpirun timeout

now_ns() { date +%s%N; }
secs_since() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }
t_all=$(now_ns)

cd "$GL_TMP"
nodes_start 2 2
nodes_check_mpi
n1=${GL_NODES[0]} n2=${GL_NODES[1]}

# ---- the GPU hook sees each node's local ranks ---------------------------------------------------
fh_new gpus4
fh_gpus 4
# Each rank prints "host rank local_rank local_size CUDA_VISIBLE_DEVICES"; the variables reach the
# second node only because -x passes them (its orted starts with a clean environment).
# shellcheck disable=SC2016 # expanded by each rank's shell
show='echo "$(hostname) $OMPI_COMM_WORLD_RANK $OMPI_COMM_WORLD_LOCAL_RANK $OMPI_COMM_WORLD_LOCAL_SIZE ${CUDA_VISIBLE_DEVICES:--}"'
hookenv=(-x GALLEY_HOOKS_ROOT="$FH_ROOT" -x GALLEY_SITE=perlmutter -x GALLEY_HOOKS=gpu -x GALLEY_HOOKS_STRICT=1
    -x TMPDIR="$FH_ROOT/tmp")
run nodes_mpirun -np 4 "${hookenv[@]}" "$FH_ROOT/opt/galley/site/galley-entrypoint" bash -c "$show"
assert_rc 0
got=$(sort -k2n <<<"$OUT" | tr '\n' ';')
want="$n1 0 0 2 3;$n1 1 1 2 2;$n2 2 0 2 3;$n2 3 1 2 2;"
[[ $got == "$want" ]] || fail "GPU hook across 2 nodes: got '$got', expected '$want'"
info "GPU hook, 2 nodes x 2 ranks (Perlmutter order; host rank local_rank local_size GPU): ${got%;}"
run nodes_exec "$n1" timeout 60 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 "${hookenv[@]}" \
    "$FH_ROOT/opt/galley/site/galley-entrypoint" bash -c "$show"
assert_rc 0
got=$(sort -k2n <<<"$OUT" | awk '{ printf "%s%s", sep, $5; sep = "," }')
[[ $got == 3,2,1,0 ]] || fail "GPU hook, 1 node x 4 ranks: GPUs $got, expected 3,2,1,0"
info "GPU hook, 1 node x 4 ranks: GPUs $got"

# Perlmutter's hooks, all of them, on nodes without the NCCL OFI plugin or the fabric: mpirun across
# 2 nodes stops before the command on every rank; GALLEY_NCCL_PLUGIN_REQUIRED=0 runs it after one
# warning (rank 0's).
hookenv=(-x GALLEY_HOOKS_ROOT="$FH_ROOT" -x GALLEY_SITE=perlmutter -x GALLEY_HOOKS_STRICT=1 -x TMPDIR="$FH_ROOT/tmp")
run nodes_mpirun -np 4 "${hookenv[@]}" "$FH_ROOT/opt/galley/site/galley-entrypoint" bash -c "$show"
[[ $RC -ne 0 && -z $OUT ]] || { show_run; fail "plugin missing, mpirun across 2 nodes: the command ran"; }
assert_contains "$ERR" "galley-entrypoint: error: site perlmutter: missing the NCCL OFI plugin" "stderr"
rc_missing=$RC
run nodes_mpirun -np 4 "${hookenv[@]}" -x GALLEY_NCCL_PLUGIN_REQUIRED=0 "$FH_ROOT/opt/galley/site/galley-entrypoint" \
    bash -c "$show"
assert_rc 0
n=$(grep -c "warning: site perlmutter: missing the NCCL OFI plugin" <<<"$ERR" || true)
[[ $n == 1 && $(grep -c . <<<"$OUT") == 4 ]] || { show_run; fail "GALLEY_NCCL_PLUGIN_REQUIRED=0: $n warnings (want 1), 4 ranks to run"; }
info "plugin missing, mpirun across 2 nodes: exit $rc_missing before the command; GALLEY_NCCL_PLUGIN_REQUIRED=0: one warning, 4 ranks ran"

if [[ $GALLEY_SANITIZE == 1 ]]; then
    info "ASan build: galley across the nodes is left to the release tree (Open MPI's own leaks and reads are noise here)"
    info "ok (harness and hooks) in $(secs_since "$t_all") s"
    exit 0
fi
need_cmd h5diff

# ---- 2 nodes x 2 ranks == 1 node x 4 ranks, bitwise -----------------------------------------------
CNN=$GALLEY_SRC/tests/recipes/dist/conv_bn_dropout.yaml
det=(distributed.deterministic=true distributed.parts=4 log.mlperf=true)

# mlperf_nodes DIR: the number_of_nodes the MLPerf log gives.
mlperf_nodes() { sed -nE 's/.*"key": "number_of_nodes", "value": ([0-9]+).*/\1/p' "$1/mlperf.log"; }

t0=$(now_ns)
run nodes_mpirun -np 4 "$GALLEY" train "$CNN" "${det[@]}" checkpoint.dir=ck-r-2x2 --run-dir r-2x2
assert_rc 0
t_2x2=$(secs_since "$t0")
assert_contains "$OUT" "ranks: 4 (launched by mpirun, 2 on this node)" "2x2 banner"
t0=$(now_ns)
run timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
    "$GALLEY" train "$CNN" "${det[@]}" checkpoint.dir=ck-r-1x4 --run-dir r-1x4
assert_rc 0
t_1x4=$(secs_since "$t0")
assert_contains "$OUT" "ranks: 4 (launched by mpirun, 4 on this node)" "1x4 banner"
[[ $(mlperf_nodes r-2x2) == 2 && $(mlperf_nodes r-1x4) == 1 ]] ||
    fail "MLPerf number_of_nodes: 2x2 says '$(mlperf_nodes r-2x2)', 1x4 '$(mlperf_nodes r-1x4)' (expected 2 and 1)"
nodes_same_training r-1x4 r-2x2 "2 nodes x 2 ranks against 1 node x 4 ranks"
info "2 nodes x 2 ranks = 1 node x 4 ranks: $GL_NODES_SAME; ${t_2x2} s across nodes, ${t_1x4} s on one"

# ---- node-local staging ---------------------------------------------------------------------------
# The staging example's own recipe (images/examples/staging), on a small copy of its data.
mkdir data
"$GALLEY" data synth spirals data/spirals-train.h5 n=256 classes=5 >/dev/null
"$GALLEY" data synth spirals data/spirals-val.h5 n=64 classes=5 split=val >/dev/null
spirals=("$GALLEY_SRC/images/examples/staging/recipes/spirals-h5.yaml" train.steps=4 train.target=null
    train.threads=1 log.files=false checkpoint.at_end=false)
local_of() { echo "$GL_NODES_DIR/$1/local"; }

# galley-stage: each node's local rank 0 copies data/*.h5 to the node-local folder, once.
stage_tool=$GALLEY_SRC/images/examples/staging/galley-stage
t0=$(now_ns)
run nodes_mpirun -np 4 "$stage_tool" "$GL_TMP/data" "$GL_NODES_LOCAL/stage" \
    "$GALLEY" train "${spirals[@]}" data.train.files="$GL_NODES_LOCAL/stage/spirals-train.h5" \
    data.val.files="$GL_NODES_LOCAL/stage/spirals-val.h5"
assert_rc 0
t_stage=$(secs_since "$t0")
n=$(grep -c "galley-stage: copied 2 files" <<<"$ERR" || true)
[[ $n == 2 ]] || { show_run; fail "galley-stage: $n nodes copied, expected 2 (one local rank 0 per node)"; }
for node in "$n1" "$n2"; do
    for f in spirals-train.h5 spirals-val.h5; do
        cmp -s "data/$f" "$(local_of "$node")/stage/$f" || fail "galley-stage: $node's local folder lacks a copy of $f"
    done
done
copies=$(find "$(local_of "$n1")" "$(local_of "$n2")" -name spirals-train.h5 | wc -l)
[[ $copies == 2 ]] || fail "galley-stage: $copies copies of spirals-train.h5 on the nodes, expected 2"
[[ ! -e $GL_NODES_LOCAL/stage ]] || fail "galley-stage wrote to the shared path, not the nodes' own folders"
info "galley-stage: 2 copies of each file for 2 nodes x 2 ranks (one per node), trained on them in ${t_stage} s"

# data.loader.stage: each rank copies the files it reads into its own folder on its own node. A
# long run is stopped (SIGTERM) once it trains, so the copies can be counted while they exist.
mkdir -p "$(local_of "$n1")/ls" "$(local_of "$n2")/ls"
nodes_mpirun -np 4 "$GALLEY" train "${spirals[@]}" data.train.files=data/spirals-train.h5 \
    data.val.files=data/spirals-val.h5 data.loader.stage="$GL_NODES_LOCAL/ls" train.steps=10000000 \
    >ls.out 2>ls.err &
job=$!
for _ in $(seq 600); do # up to 30 s: mpirun, staging and the first step, on a loaded machine
    grep -q "^step" ls.out 2>/dev/null && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.05
done
grep -q "^step" ls.out || fail "data.loader.stage run did not start: $(cat ls.out ls.err)"
per_node=()
for node in "$n1" "$n2"; do
    per_node+=("$(find "$(local_of "$node")/ls" -path '*-train/*spirals-train.h5' | wc -l)")
done
# SIGTERM to the ranks themselves, as Slurm's time limit sends it (mpirun, sent SIGTERM, kills
# its ranks before they can clean up): each stops at a step and exits 4, removing its copies.
ranks=$(nodes_pids "$n1" "^$GALLEY train"; nodes_pids "$n2" "^$GALLEY train")
[[ $(grep -c . <<<"$ranks") == 4 ]] || fail "data.loader.stage: expected 4 galley ranks on the nodes, found: $ranks"
# shellcheck disable=SC2086 # one word per pid
kill -TERM $ranks
rc=0
wait "$job" || rc=$?
[[ ${per_node[*]} == "2 2" ]] || fail "data.loader.stage: copies of spirals-train.h5 per node: ${per_node[*]}, expected 2 2 (one per rank, on its node)"
[[ ! -e $GL_NODES_LOCAL/ls ]] || fail "data.loader.stage wrote to the shared path, not the nodes' own folders"
[[ $rc == 4 ]] || fail "data.loader.stage: SIGTERM to every rank: exit $rc, expected 4 (stopped, to be continued): $(tail -n 5 ls.err)"
left=$(find "$(local_of "$n1")/ls" "$(local_of "$n2")/ls" -mindepth 1 | head -n 3)
[[ -z $left ]] || fail "data.loader.stage: copies left after the run: $left"
info "data.loader.stage: spirals-train.h5 copied once per rank (${per_node[*]} on the 2 nodes), removed on both at the end (exit 4 after SIGTERM)"

info "ok in $(secs_since "$t_all") s (nodes up in ${GL_NODES_START_SECONDS} s)"
