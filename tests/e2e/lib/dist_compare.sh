# shellcheck shell=bash
# dist_compare.sh: run galley on N ranks and compare runs, for the distributed tests. Source it
# after common.sh and py.sh, then call need_pyenv (same_weights reads checkpoints with h5py):
#
#   train NP NAME RECIPE ARGS...        # NP ranks under mpirun (1: a plain process), run dir NAME
#   same_losses A B TOL                 # every logged loss of B within TOL relative of A's (0: bitwise)
#   same_weights A B exact|tol [TOL]    # the final checkpoints' tensors (ck-A/, ck-B/)
#
# DIST_MPI is the mpirun command line (root, oversubscribed, unbound).

DIST_MPI=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# losses DIR: "kind step loss" per train/eval record of DIR/metrics.jsonl, the loss as written.
losses() {
    sed -nE 's/^\{"kind":"(train|eval)".*"step":([0-9]+),.*"loss":([^,}]+).*$/\1 \2 \3/p' "$1/metrics.jsonl"
}

# train NP NAME RECIPE ARGS...: runs galley on NP ranks (1: no launcher) into run dir NAME and
# checkpoint dir ck-NAME; asserts exit 0 and a single banner that says NP ranks.
train() {
    local np=$1 name=$2 recipe=$3
    shift 3
    local cmd=("$GALLEY" train "$recipe" "$@" "checkpoint.dir=ck-$name" --run-dir "$name")
    if [[ $np -gt 1 ]]; then
        cmd=("${DIST_MPI[@]}" -np "$np" "${cmd[@]}")
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
        info "$1 vs $2: $(grep -c . <<<"$a") losses, bitwise equal"
        return 0
    fi
    paste <(echo "$a") <(echo "$b") | awk -v tol="$3" -v A="$1" -v B="$2" -v T="$GL_TEST_NAME" '
        { n++; if ($1 != $4 || $2 != $5) { print "record " n ": " $0; bad = 1; next }
          d = $3 - $6; if (d < 0) d = -d; m = $3 < 0 ? -$3 : $3; if (m < 1e-30) m = 1e-30
          if (d / m > worst) worst = d / m }
        END { if (bad || n == 0) exit 1
              printf "[%s] %s vs %s: %d losses, worst relative difference %.3g\n", T, A, B, n, worst
              exit worst > tol }' || fail "$2: losses differ from $1 by more than $3 relative"
}

# same_weights A B MODE [TOL]: the final checkpoints' tensors (exact or tol).
same_weights() {
    local fa fb all
    all=(ck-"$1"/*.h5)
    fa=${all[-1]}  # the glob sorts: the newest step is last
    all=(ck-"$2"/*.h5)
    fb=${all[-1]}
    same_checkpoints "$fa" "$fb" "$3" "${4:-0}" || fail "$2: final weights differ from $1 ($3)"
}

# same_checkpoints FILE_A FILE_B exact|tol TOL: every tensor of two checkpoints (not the recipe).
same_checkpoints() {
    "$PY" - "$@" "$GL_TEST_NAME" <<'PYEOF'
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
print(f"[{sys.argv[5]}] {sys.argv[1]} vs {sys.argv[2]}: {len(names)} tensors, {sys.argv[3]}, worst {worst:.3g}")
if sys.argv[3] != "exact" and worst > float(sys.argv[4]):
    sys.exit(f"worst relative difference {worst:.3g} > {sys.argv[4]}")
PYEOF
}
