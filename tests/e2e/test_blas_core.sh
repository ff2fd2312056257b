#!/usr/bin/env bash
# OpenBLAS's kernels match the CPU (src/backend/cpu/cpu_blas_core.c):
#   - with OPENBLAS_CORETYPE unset, the core `galley info` shows uses the CPU's widest vectors
#     (Debian 12's OpenBLAS 0.3.21 takes CPUs newer than itself for Prescott: galley then
#     re-executes itself with a core chosen from the CPU's features, and says so);
#   - a user's OPENBLAS_CORETYPE is kept as it is;
#   - a run on the core galley chose trains bit for bit as a run told that core by the user.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

core_of() { sed -nE 's/.*\(core ([A-Za-z0-9]+)[,)].*/\1/p' <<<"$1" | head -1; }

run env -u OPENBLAS_CORETYPE "$GALLEY" info
[[ $RC == 0 ]] || { show_run; fail "galley info: exit $RC"; }
line=$(grep -E '^  libraries:' <<<"$OUT")
cpu=$(grep -E '^  CPU:' <<<"$OUT")
core=$(core_of "$line")
[[ -n $core ]] || { show_run; fail "no OpenBLAS core in: $line"; }
info "$cpu"
info "OpenBLAS ${line#*OpenBLAS OpenBLAS }"
case " ${cpu#*features:} " in
    *" avx512f "*) ok="SkylakeX Cooperlake SapphireRapids" ;;
    *" avx2 "*" fma "*) ok="Haswell Zen SkylakeX Cooperlake SapphireRapids" ;;
    *) ok="" ;;
esac
if [[ -n $ok ]]; then
    [[ " $ok " == *" $core "* ]] || fail "OpenBLAS core $core on a CPU with${cpu#*features:}: expected one of $ok"
else
    info "no AVX2 on this CPU: any core will do"
fi
if [[ $line == *"chosen by galley"* ]]; then
    grep -q "OpenBLAS took this CPU for" <<<"$line" || fail "the chosen core does not say what OpenBLAS chose"
    chosen=1
else
    chosen=0
fi

# the user's choice stands, whatever it is
run env OPENBLAS_CORETYPE=Prescott "$GALLEY" info
[[ $(core_of "$(grep -E '^  libraries:' <<<"$OUT")") == Prescott ]] || { show_run; fail "OPENBLAS_CORETYPE=Prescott not kept"; }
! grep -q "chosen by galley" <<<"$OUT" || fail "OPENBLAS_CORETYPE=Prescott: galley still says it chose"

# the re-executed run is the run the user would get by naming the core
cd "$GL_TMP"
Q=$GALLEY_SRC/recipes/quickstart.yaml
args=(train.steps=6 train.target.metric=none train.target.above=null log.every=2 log.files=false train.threads=1)
run env -u OPENBLAS_CORETYPE "$GALLEY" train "$Q" "${args[@]}"
[[ $RC == 0 ]] || { show_run; fail "train with the chosen core: exit $RC"; }
a=$(grep -E '^step' <<<"$OUT" | sed -E 's/ *[|] *lr .*//')
run env OPENBLAS_CORETYPE="$core" "$GALLEY" train "$Q" "${args[@]}"
[[ $RC == 0 ]] || { show_run; fail "train with OPENBLAS_CORETYPE=$core: exit $RC"; }
b=$(grep -E '^step' <<<"$OUT" | sed -E 's/ *[|] *lr .*//')
[[ -n $a && $a == "$b" ]] || fail "losses differ between the chosen core and OPENBLAS_CORETYPE=$core:
$a
---
$b"
info "core $core (chosen by galley: $chosen); the quickstart's losses match OPENBLAS_CORETYPE=$core"
echo "PASS"
