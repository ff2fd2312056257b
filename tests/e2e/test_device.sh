#!/usr/bin/env bash
# train.device on a machine without a usable GPU (every CI machine):
#   - auto trains on the CPU and says why once (once in all under mpirun -np 2);
#   - cuda is refused with exit 2, naming the key and the reason, before anything is written;
#   - cpu says nothing about GPUs;
#   - train.precision: auto with an explicit bf16 says in that one line that the CPU trains in
#     fp32, and the banner and summary.json say fp32; bf16 with cpu is a recipe error (exit 2,
#     FILE:LINE:COLUMN; tests/recipes/bad/precision_*.yaml check the message);
#   - train.profile's window is accepted (NVTX ranges only, no profiler to start).
# On a machine with a GPU this test skips; tests/e2e/test_cuda_train.sh covers it there.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

run "$GALLEY" info
[[ $RC == 0 ]] || { show_run; fail "galley info: exit $RC"; }
if grep -qE '^  GPUs: +[1-9]' <<<"$OUT"; then skip "this machine has a GPU (test_cuda_train covers it)"; fi
info "$(grep -E '^  GPUs:' <<<"$OUT")"

cd "$GL_TMP"
Q=$GALLEY_SRC/recipes/quickstart.yaml
common=(train.steps=4 train.target.metric=none train.target.above=null log.every=2 log.files=false)

# auto: the CPU, said once
run "$GALLEY" train "$Q" "${common[@]}" train.device=auto
[[ $RC == 0 ]] || { show_run; fail "train.device=auto: exit $RC"; }
n=$(grep -c 'no GPU to use' <<<"$OUT" || true)
[[ $n == 1 ]] || { show_run; fail "train.device=auto: expected one 'no GPU to use' line, got $n"; }
grep -q ': training on the CPU$' <<<"$OUT" || { show_run; fail "auto: the line does not say it trains on the CPU"; }
grep -qE 'device cpu' <<<"$OUT" || { show_run; fail "auto: the banner does not name the cpu device"; }
info "auto: $(grep 'no GPU to use' <<<"$OUT")"

# cpu: nothing about GPUs
run "$GALLEY" train "$Q" "${common[@]}" train.device=cpu
[[ $RC == 0 ]] || { show_run; fail "train.device=cpu: exit $RC"; }
! grep -q 'GPU' <<<"$OUT$ERR" || { show_run; fail "train.device=cpu mentions a GPU"; }

# cuda without a GPU: exit 2, the key and the reason, and no run directory written
mkdir cuda_runs
run "$GALLEY" train "$Q" "${common[@]}" train.device=cuda log.files=true log.dir=cuda_runs
[[ $RC == 2 ]] || { show_run; fail "train.device=cuda without a GPU: expected exit 2, got $RC"; }
grep -q 'error: train.device is cuda but no GPU can be used' <<<"$ERR" || { show_run; fail "cuda: wrong message"; }
grep -q 'hint: set train.device: auto' <<<"$ERR" || { show_run; fail "cuda: no hint"; }
[[ -z $(ls -A cuda_runs) ]] || fail "cuda: a refused run wrote $(ls cuda_runs)"
info "cuda: $(head -1 <<<"$ERR")"

# auto + an explicit bf16 without a GPU: said once, in the same line, and trained in fp32
mkdir prec_runs
run "$GALLEY" train "$Q" "${common[@]}" train.device=auto train.precision=bf16 log.files=true --run-dir prec_runs/r
[[ $RC == 0 ]] || { show_run; fail "train.device=auto train.precision=bf16: exit $RC"; }
n=$(grep -c 'no GPU to use' <<<"$OUT" || true)
[[ $n == 1 ]] || { show_run; fail "auto + bf16: expected one 'no GPU to use' line, got $n"; }
grep -q ': training on the CPU; train.precision bf16 applies on GPUs, the CPU trains in fp32$' <<<"$OUT" ||
    { show_run; fail "auto + bf16: the line does not say that bf16 does not apply"; }
grep -qE 'device cpu, .* fp32 \|' <<<"$OUT" || { show_run; fail "auto + bf16: the banner does not say fp32"; }
grep -q '"precision": *"fp32"' prec_runs/r/summary.json || { cat prec_runs/r/summary.json; fail "summary.json: not fp32"; }
info "auto + bf16: $(grep 'no GPU to use' <<<"$OUT")"
# ... and with cpu it is refused at the key, before training
run "$GALLEY" train "$Q" "${common[@]}" train.device=cpu train.precision=bf16
[[ $RC == 2 ]] || { show_run; fail "train.device=cpu train.precision=bf16: expected exit 2, got $RC"; }
grep -q 'command line:.*error: train.precision: bf16 applies on GPUs only' <<<"$ERR" ||
    { show_run; fail "cpu + bf16: wrong message"; }
# fp32 and auto are fine on the CPU and say nothing about precision
run "$GALLEY" train "$Q" "${common[@]}" train.device=cpu train.precision=fp32
[[ $RC == 0 ]] || { show_run; fail "train.device=cpu train.precision=fp32: exit $RC"; }
! grep -q 'applies on GPUs' <<<"$OUT$ERR" || { show_run; fail "cpu + fp32 talks about GPUs"; }

# a profiler window is accepted on the CPU (ranges only)
run "$GALLEY" train "$Q" "${common[@]}" train.device=cpu train.profile.start_step=1 train.profile.stop_step=3
[[ $RC == 0 ]] || { show_run; fail "train.profile on the CPU: exit $RC"; }

# two ranks: said once
if command -v mpirun >/dev/null 2>&1 && [[ $GALLEY_SANITIZE == 0 ]]; then
    run mpirun --oversubscribe -np 2 "$GALLEY" train "$Q" "${common[@]}" train.device=auto train.batch_size=32
    [[ $RC == 0 ]] || { show_run; fail "mpirun -np 2 train.device=auto: exit $RC"; }
    n=$(grep -c 'no GPU to use' <<<"$OUT" || true)
    [[ $n == 1 ]] || { show_run; fail "np=2: expected one 'no GPU to use' line, got $n"; }
    run mpirun --oversubscribe -np 2 "$GALLEY" train "$Q" "${common[@]}" train.device=cuda train.batch_size=32
    [[ $RC == 2 ]] || { show_run; fail "np=2 train.device=cuda: expected exit 2, got $RC"; }
    info "np=2: auto said once; cuda refused on every rank with exit 2"
fi
info "ok"
