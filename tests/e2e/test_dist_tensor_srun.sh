#!/usr/bin/env bash
# test_dist_tensor_srun.sh: tensor parallelism under `srun --mpi=pmix -n 4` on the private
# one-node Slurm: a 2 data x 2 tensor grid in deterministic mode gives bitwise the losses and
# final weights of one plain process (the reduced vit.yaml of test_dist_tensor.sh), and the
# banner shows the grid.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm.sh"
# shellcheck source=tests/e2e/lib/py.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/py.sh"
need_galley
# As test_dist_srun.sh: ASan + Open MPI + Slurm's PMIx plugin is their noise, not galley's.
[[ $GALLEY_SANITIZE == 1 ]] && skip "release tree only (ASan/UBSan + Open MPI + Slurm PMIx)"
need_pyenv
# shellcheck source=tests/e2e/lib/dist_compare.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/dist_compare.sh"

slurm_start
cd "$GL_TMP"
VIT=$GALLEY_SRC/recipes/vit.yaml
args=(data.synthetic.size=64 data.synthetic.channels=4 model.layers.4.channels=4 model.layers.2.repeat=2
    model.layers.0.dim=64 model.blocks.block.4.units=128 model.blocks.block.6.units=64
    data.synthetic.train_size=32 data.synthetic.val_size=8 train.batch_size=8 train.threads=1
    train.steps=12 train.eval_every=6 log.every=1
    distributed.deterministic=true distributed.parts=2 distributed.tensor_parts=4)

train 1 one "$VIT" "${args[@]}"
run timeout 180 srun --label -n 4 --overcommit --mpi="$GL_SLURM_MPI" --kill-on-bad-exit=1 \
    "$GALLEY" train "$VIT" "${args[@]}" distributed.tensor_parallel=2 checkpoint.dir=ck-srun --run-dir srun
assert_rc 0
assert_no_crash
assert_contains "$OUT" "launched by srun"
assert_contains "$OUT" "grid: 2 data-parallel x 2 tensor-parallel ranks"
same_losses one srun 0
same_weights one srun exact
info "ok"
