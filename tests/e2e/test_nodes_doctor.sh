#!/usr/bin/env bash
# test_nodes_doctor.sh: `galley doctor` across 2 "nodes" (tests/e2e/lib/nodes.sh: network, UTS and
# mount namespaces, mpirun from the first through lib/ns_agent.sh), one rank on each:
#   - the report groups ranks by host: the table shows each node's host name, and the allreduce
#     probe runs across the nodes (its JSON has a cross-node sweep);
#   - the second node's rank, slowed for real (it shares core 1 with two busy loops at nice 0 and
#     runs at nice 5: about a seventh of a core, so that the load of a shared machine on core 0
#     cannot make the first node's the slower), is flagged by its host name and rank; the first
#     node's is not (with two ranks, only the slower can be below their median); exit 1.
# Release tree only: under ASan the probes' times mean nothing.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/nodes.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/nodes.sh"
need_galley
need_cmd mpirun timeout taskset nice python3
[[ $GALLEY_SANITIZE == 1 ]] && skip "release tree only (the probes' speeds under ASan mean nothing)"

cd "$GL_TMP"
nodes_start 2 1
n1=${GL_NODES[0]} n2=${GL_NODES[1]}

# The busy loops start beside the rank, from the command its node's orted runs: in the rank's own
# session, so that nice weighs them against it (with autogroup scheduling, a loop started in this
# test's session would get its own share of the core whatever the nice values).
cat >slow.sh <<'SH'
#!/usr/bin/env bash
hogs=()
for _ in 1 2; do
    taskset -c 1 bash -c 'while :; do :; done' &
    hogs+=($!)
done
trap 'kill "${hogs[@]}" 2>/dev/null' EXIT
taskset -c 1 nice -n 5 "$@"
SH
chmod +x slow.sh
t0=$(date +%s%N)
run nodes_mpirun -np 1 taskset -c 0 "$GALLEY" doctor --quick --timeout 30 --json "$GL_TMP/nodes.json" \
    : -np 1 "$GL_TMP/slow.sh" "$GALLEY" doctor --quick --timeout 30
secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
assert_rc 1
assert_no_crash
assert_contains "$OUT" "2 ranks on 2 hosts"
grep -qE "^ +0 +$n1 " <<<"$OUT" || { show_run; fail "the table has no row for rank 0 on $n1"; }
grep -qE "^ +1 +$n2 " <<<"$OUT" || { show_run; fail "the table has no row for rank 1 on $n2"; }
grep -qE "^  - rank 1 on $n2: (GEMM|3x3 convolution) [0-9.]+ GFLOP/s, [0-9]+% below the median" <<<"$OUT" ||
    { show_run; fail "the slowed node's rank is not flagged with its host"; }
assert_not_contains "$OUT" "  - rank 0 on $n1: GEMM"
python3 - "$GL_TMP/nodes.json" "$n2" <<'PYEOF' || fail "doctor's JSON: the finding or the cross-node sweep is missing"
import json, sys
d = json.load(open(sys.argv[1]))
f = [f for f in d["findings"] if "below the median" in f["text"]]
assert f and all(x["ranks"] == [1] and x["hosts"] == [sys.argv[2]] for x in f), d["findings"]
assert d["bandwidth"].get("net"), "no allreduce sweep across the nodes"
PYEOF
info "2 nodes, the second slowed: flagged in $secs s: $(grep -E "^  - rank 1 on" <<<"$OUT" | head -2 | tr '\n' ' ')"
info "doctor's report:"
while IFS= read -r line; do echo "    | $line"; done <<<"$OUT"
info "ok"
