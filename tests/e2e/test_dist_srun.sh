#!/usr/bin/env bash
# test_dist_srun.sh: `srun -n 2 --mpi=pmix galley train` on a private one-node Slurm gives the
# run that one process gives: one banner saying 2 ranks, printed by rank 0 only; the losses at
# every logged step within 1e-5 relative; and with distributed.deterministic (parts=2) the very
# same losses (as text) and the very same final weights. A set-up failure on rank 0 alone (its
# run directory already used) ends both tasks at once with exit 2, without --kill-on-bad-exit.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm.sh"
need_galley

# Under ASan, Open MPI's and Slurm's PMIx plugins report leaks and wild reads of their own on
# every launch; the release tree runs the same code without that noise.
if [[ $GALLEY_SANITIZE == 1 ]]; then
    skip "release tree only (ASan/UBSan + Open MPI + Slurm PMIx is noise, not galley's bugs)"
fi

slurm_start
slurm_check_mpi

recipe=$GALLEY_SRC/recipes/quickstart.yaml
[[ -r $recipe ]] || fail "missing $recipe"
# One compute thread per rank: the two ranks share the node's 2 cores (task/none binds nothing).
common=(train.steps=40 train.target=null log.every=10 train.threads=1)
steps_want="10 20 30 40"

# Problems are collected, so one run reports every broken promise at once.
problems=()
problem() {
    echo "[$GL_TEST_NAME] problem: $*" >&2
    problems+=("$*")
}

now_ns() { date +%s%N; }
secs_since() { awk -v a="$1" -v b="$(now_ns)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }

# losses DIR: "kind step loss" for each train and eval record of DIR/metrics.jsonl, the loss
# exactly as written (records look like {"kind":"train","step":10,...,"loss":1.63917618,...}).
losses() {
    sed -nE 's/^\{"kind":"(train|eval)".*"step":([0-9]+),.*"loss":([^,}]+).*$/\1 \2 \3/p' "$1/metrics.jsonl"
}

# train_steps DIR: the steps of the train records, space-separated.
train_steps() { losses "$1" | awk '$1 == "train" { printf "%s%s", sep, $2; sep = " " }'; }

# check_metrics DIR WHAT: DIR/metrics.jsonl has train records at steps $steps_want (0: yes).
check_metrics() {
    local dir=$1 what=$2 got
    if [[ ! -s $dir/metrics.jsonl ]]; then
        problem "$what: no $dir/metrics.jsonl"
        return 1
    fi
    got=$(train_steps "$dir")
    if [[ $got != "$steps_want" ]]; then
        sed 's/^/    | /' "$dir/metrics.jsonl" >&2
        problem "$what: train records at steps '$got' in metrics.jsonl, expected '$steps_want'"
        return 1
    fi
}

# compare_losses A B TOL WHAT: the same records in A and B, losses within TOL relative (TOL 0:
# the same text).
compare_losses() {
    local a=$1 b=$2 tol=$3 what=$4 bad
    bad=$(LC_ALL=C join -j1 -a1 -a2 -e MISSING -o 0,1.2,2.2 \
        <(losses "$a" | awk '{ print $1 "@" $2, $3 }' | LC_ALL=C sort) \
        <(losses "$b" | awk '{ print $1 "@" $2, $3 }' | LC_ALL=C sort) |
        awk -v tol="$tol" '
            function abs(x) { return x < 0 ? -x : x }
            $2 == "MISSING" || $3 == "MISSING" { print "  " $1 ": " $2 " vs " $3; next }
            tol == 0 { if (($2 "") != ($3 "")) print "  " $1 ": " $2 " vs " $3 " (not the same text)"; next }
            {
                m = abs($2) > abs($3) ? abs($2) : abs($3)
                if (abs($2 - $3) > tol * m + 1e-30) printf "  %s: %s vs %s (rel %.3g)\n", $1, $2, $3, abs($2 - $3) / m
            }')
    if [[ -n $bad ]]; then
        problem "$what: losses differ (record: np=1 vs np=2):
$bad"
        return 1
    fi
    info "$what: $(losses "$a" | grep -c .) losses agree ($([[ $tol == 0 ]] && echo "bitwise, as text" || echo "within $tol relative"))"
}

# check_srun_output WHAT: the last run (srun --label) printed one banner, from task 0, saying 2 ranks.
check_srun_output() {
    local what=$1 out banner n
    # --label prefixes each line with its task number ("0: ", " 1: " when there are more tasks).
    if grep -qE '^ *[1-9][0-9]*: ' <<<"$OUT"; then
        grep -E '^ *[1-9][0-9]*: ' <<<"$OUT" | head -n 5 | sed 's/^/    | /' >&2
        problem "$what: ranks other than 0 printed on stdout (first lines above); only rank 0 should"
    fi
    out=$(sed -E 's/^ *[0-9]+: //' <<<"$OUT")
    n=$(grep -c '^galley: training' <<<"$out" || true)
    [[ $n -eq 1 ]] || problem "$what: $n 'galley: training' banners, expected 1 (rank 0's)"
    banner=$(grep -A1 -m1 '^galley: training' <<<"$out" | tail -n 1 || true)
    if [[ ! $banner =~ (^|[ ,])2\ ranks([ ,]|$) ]]; then
        problem "$what: the banner says '$(sed -E 's/^ +//' <<<"$banner")', expected '2 ranks'"
    fi
}

# srun_galley DIR ARGS...: `srun -n 2 galley train` (bounded: a hang must not eat ctest's 600 s).
srun_galley() {
    local dir=$1
    shift
    run timeout 180 srun --label -n 2 --mpi="$GL_SLURM_MPI" --kill-on-bad-exit=1 \
        "$GALLEY" train "$recipe" "${common[@]}" "$@" --run-dir "$dir"
}

# ---- a) np=1 reference, a plain process ----------------------------------------------------
t0=$(now_ns)
run "$GALLEY" train "$recipe" "${common[@]}" --run-dir "$GL_TMP/np1"
assert_rc 0
assert_no_crash
t_np1=$(secs_since "$t0")
assert_contains "$OUT" "1 rank," "np=1 banner"
check_metrics "$GL_TMP/np1" "np=1" || fail "${problems[-1]}"
info "np=1: exit 0 in $t_np1 s, $(losses "$GL_TMP/np1" | grep -c .) losses in metrics.jsonl"

# ---- b) np=2 under srun: tolerance mode ------------------------------------------------------
t0=$(now_ns)
srun_galley "$GL_TMP/np2"
t_np2=$(secs_since "$t0")
info "srun -n 2 galley train: exit $RC in $t_np2 s (np=1 alone: $t_np1 s)"
if [[ $RC -ne 0 ]]; then
    show_run
    problem "np=2: srun -n 2 galley train exited $RC, expected 0"
fi
check_srun_output "np=2"
if check_metrics "$GL_TMP/np2" "np=2"; then
    compare_losses "$GL_TMP/np1" "$GL_TMP/np2" 1e-5 "np=1 vs np=2" || true
fi

# ---- c) bitwise mode: distributed.deterministic, the batch computed as 2 parts on both -------
det=(distributed.deterministic=true distributed.parts=2)
run "$GALLEY" train "$recipe" "${common[@]}" "${det[@]}" checkpoint.dir="$GL_TMP/ck1" \
    --run-dir "$GL_TMP/det1"
if [[ $RC -ne 0 ]]; then
    show_run
    problem "deterministic np=1: exited $RC, expected 0"
fi
srun_galley "$GL_TMP/det2" "${det[@]}" checkpoint.dir="$GL_TMP/ck2"
if [[ $RC -ne 0 ]]; then
    show_run
    problem "deterministic np=2: srun -n 2 galley train exited $RC, expected 0"
fi
check_srun_output "deterministic np=2"
if [[ -s $GL_TMP/det1/metrics.jsonl ]] && check_metrics "$GL_TMP/det2" "deterministic np=2"; then
    compare_losses "$GL_TMP/det1" "$GL_TMP/det2" 0 "deterministic np=1 vs np=2" || true
fi

# The final checkpoints' parameters and optimizer state, compared exactly by h5diff (the root
# attributes say world_size 1 vs 2, so only the /params and /optim groups are compared). Without
# h5diff (Debian: hdf5-tools) this part is left out: `galley ckpt inspect` shows shapes and
# checksum verdicts, not values.
newest_h5() { find "$1" -name '*.h5' 2>/dev/null | LC_ALL=C sort | tail -n 1 || true; }
ck1=$(newest_h5 "$GL_TMP/ck1")
ck2=$(newest_h5 "$GL_TMP/ck2")
if [[ -z $ck1 || -z $ck2 ]]; then
    problem "deterministic runs: no final checkpoint (*.h5) in $GL_TMP/ck1 and/or $GL_TMP/ck2"
elif [[ $(basename "$ck1") != "$(basename "$ck2")" ]]; then
    problem "deterministic runs: final checkpoints differ in name: $(basename "$ck1") vs $(basename "$ck2")"
elif ! command -v h5diff >/dev/null 2>&1; then
    info "no h5diff (Debian: hdf5-tools): final weights not compared"
else
    for group in /params /optim; do
        if [[ $group == /optim ]] && ! h5ls "$ck1/optim" >/dev/null 2>&1; then
            continue  # an optimizer without state (plain SGD)
        fi
        if ! h5diff -r "$ck1" "$ck2" "$group" "$group" >"$GL_TMP/h5diff.out" 2>&1; then
            head -n 20 "$GL_TMP/h5diff.out" | sed 's/^/    | /' >&2
            problem "deterministic np=1 vs np=2: final checkpoints differ in $group (h5diff above)"
        else
            info "deterministic np=1 vs np=2: $group bitwise equal in $(basename "$ck1")"
        fi
    done
fi

# ---- c) a set-up failure on rank 0 alone (its run directory is used) ----------------------------
# srun without --kill-on-bad-exit leaves the other task running: it must stop at the set-up
# agreement, not wait out distributed.timeout (60 s here) in its first collective.
t0=$(now_ns)
run timeout 180 srun --label -n 2 --mpi="$GL_SLURM_MPI" "$GALLEY" train "$recipe" "${common[@]}" \
    distributed.timeout=60 --run-dir "$GL_TMP/np1"
t_used=$(secs_since "$t0")
[[ $RC == 2 ]] || problem "used run directory under srun: exit $RC, expected 2"
grep -q "already holds a run" <<<"$ERR$OUT" || problem "used run directory under srun: no message saying so"
awk -v s="$t_used" 'BEGIN { exit !(s < 30) }' || problem "used run directory under srun: took $t_used s"
info "rank 0's used run directory under srun: exit $RC in $t_used s"

if ((${#problems[@]})); then
    fail "${#problems[@]} problem(s): $(printf '\n  - %s' "${problems[@]}")"
fi
info "np=2 under srun matches np=1 (tolerance and bitwise modes); a set-up failure ends both tasks at once"
