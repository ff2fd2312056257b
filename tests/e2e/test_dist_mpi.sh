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

# shellcheck source=tests/e2e/lib/dist_compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/dist_compare.sh"

cd "$GL_TMP"
MLP=$GALLEY_SRC/recipes/quickstart.yaml
CNN=$GALLEY_SRC/tests/recipes/dist/conv_bn_dropout.yaml
mpi=("${DIST_MPI[@]}")

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
