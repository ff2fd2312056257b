#!/usr/bin/env bash
# test_dist_mpi.sh: `mpirun -np N galley train` against one process, same seed and global batch.
#   - tolerance mode: np=2 and np=4 give the losses (every logged step) and the final weights of
#     np=1 within 1e-5 relative (quickstart MLP; a CNN with dropout and sync_batchnorm);
#   - distributed.deterministic with parts=4: np=1, 2 and 4 give bitwise the same losses (as
#     text) and bitwise the same checkpoint tensors (CNN with batch norm and dropout);
#   - only rank 0 prints: one banner, saying N ranks;
#   - a batch that does not divide over the ranks is refused (exit 2) by rank 0 alone.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
need_galley
need_cmd mpirun
need_pyenv  # PY: a Python with h5py

cd "$GL_TMP"
MLP=$GALLEY_SRC/recipes/quickstart.yaml
CNN=$GALLEY_SRC/tests/recipes/dist/conv_bn_dropout.yaml
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# losses DIR: "kind step loss" per train/eval record of DIR/metrics.jsonl, the loss as written.
losses() {
    sed -nE 's/^\{"kind":"(train|eval)".*"step":([0-9]+),.*"loss":([^,}]+).*$/\1 \2 \3/p' "$1/metrics.jsonl"
}

# train NP NAME RECIPE ARGS...: runs galley on NP ranks (1: no launcher) into run dir NAME and
# checkpoint dir ck-NAME; asserts exit 0 and a single banner.
train() {
    local np=$1 name=$2 recipe=$3
    shift 3
    local cmd=("$GALLEY" train "$recipe" "$@" "checkpoint.dir=ck-$name" --run-dir "$name")
    if [[ $np -gt 1 ]]; then
        cmd=("${mpi[@]}" -np "$np" "${cmd[@]}")
    fi
    run "${cmd[@]}"
    assert_rc 0
    assert_no_crash
    local banners
    banners=$(grep -c "^galley: training" <<<"$OUT" || true)
    [[ $banners == 1 ]] || { show_run; fail "$name: $banners banners (only rank 0 may print)"; }
    local word="ranks"
    [[ $np == 1 ]] && word="rank"
    assert_contains "$OUT" "device cpu, $np $word," "$name banner"
}

# same_losses A B TOL: every logged loss of run B within TOL relative of run A's (0: bitwise text).
same_losses() {
    local a b
    a=$(losses "$1")
    b=$(losses "$2")
    [[ -n $a ]] || fail "$1/metrics.jsonl has no losses"
    if [[ $3 == 0 ]]; then
        [[ $a == "$b" ]] || fail "$2: losses differ from $1 (deterministic mode wants them bitwise equal):
$(diff <(echo "$a") <(echo "$b") | head -20)"
        return 0
    fi
    paste <(echo "$a") <(echo "$b") | awk -v tol="$3" -v A="$1" -v B="$2" '
        { n++; if ($1 != $4 || $2 != $5) { print "record " n ": " $0; bad = 1; next }
          d = $3 - $6; if (d < 0) d = -d; m = $3 < 0 ? -$3 : $3; if (m < 1e-30) m = 1e-30
          if (d / m > worst) worst = d / m }
        END { if (bad || n == 0) exit 1
              printf "[test_dist_mpi] %s vs %s: %d losses, worst relative difference %.3g\n", A, B, n, worst
              exit worst > tol }' || fail "$2: losses differ from $1 by more than $3 relative"
}

# same_weights A B MODE [TOL]: the final checkpoints' tensors (exact or tol).
same_weights() {
    local fa fb all
    all=(ck-"$1"/*.h5)
    fa=${all[-1]}  # the glob sorts: the newest step is last
    all=(ck-"$2"/*.h5)
    fb=${all[-1]}
    "$PY" - "$fa" "$fb" "$3" "${4:-0}" <<'EOF' || fail "$2: final weights differ from $1 ($3)"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) and n != "recipe" else None)
assert names, "no tensors"
worst = 0.0
for n in names:
    x, y = a[n][()], b[n][()]
    if x.shape != y.shape:
        sys.exit(f"{n}: shapes {x.shape} and {y.shape}")
    if sys.argv[3] == "exact":
        if x.tobytes() != y.tobytes():
            sys.exit(f"{n}: not bitwise equal (max abs difference {np.abs(x - y).max():.3g})")
    else:
        scale = max(float(np.abs(x).max()), 1e-30)
        worst = max(worst, float(np.abs(x.astype(np.float64) - y).max()) / scale)
print(f"[test_dist_mpi] {sys.argv[1]} vs {sys.argv[2]}: {len(names)} tensors, {sys.argv[3]}, worst {worst:.3g}")
if sys.argv[3] != "exact" and worst > float(sys.argv[4]):
    sys.exit(f"worst relative difference {worst:.3g} > {sys.argv[4]}")
EOF
}

info "tolerance mode, quickstart MLP: np=1, 2, 4"
mlp=(train.steps=40 train.target=null log.every=10 train.threads=1)
train 1 mlp1 "$MLP" "${mlp[@]}"
train 2 mlp2 "$MLP" "${mlp[@]}"
assert_contains "$OUT" "ranks: 2 (launched by mpirun"
train 4 mlp4 "$MLP" "${mlp[@]}"
for np in 2 4; do
    same_losses mlp1 "mlp$np" 1e-5
    same_weights mlp1 "mlp$np" tol 1e-5
done

info "tolerance mode, CNN with dropout and sync_batchnorm: np=1, 2"
train 1 cnn1 "$CNN" distributed.sync_batchnorm=true
train 2 cnn2 "$CNN" distributed.sync_batchnorm=true
same_losses cnn1 cnn2 1e-5
same_weights cnn1 cnn2 tol 1e-5

info "deterministic mode (parts=4), CNN with batch norm and dropout: np=1, 2, 4 bitwise"
det=(distributed.deterministic=true distributed.parts=4)
train 1 det1 "$CNN" "${det[@]}"
assert_contains "$OUT" "computed as 4 parts (4 per rank)"
train 2 det2 "$CNN" "${det[@]}"
train 4 det4 "$CNN" "${det[@]}"
for np in 2 4; do
    same_losses det1 "det$np" 0
    same_weights det1 "det$np" exact
done

info "a global batch that does not divide over the ranks is refused by rank 0 alone"
run "${mpi[@]}" -np 4 "$GALLEY" train "$MLP" train.batch_size=30 train.steps=2 log.files=false
[[ $RC -ne 0 ]] || fail "batch 30 on 4 ranks was accepted"
assert_contains "$ERR" "train.batch_size 30 (the global batch) does not divide over 4 ranks"
n=$(grep -c "does not divide" <<<"$ERR" || true)
[[ $n == 1 ]] || fail "the error was printed $n times (rank 0 only, once)"
run "${mpi[@]}" -np 2 "$GALLEY" train "$MLP" distributed.deterministic=true distributed.parts=3 log.files=false
[[ $RC -ne 0 ]] || fail "parts=3 on 2 ranks was accepted"
assert_contains "$ERR" "distributed.parts 3 is not a multiple of the 2 ranks"

info "ok"
