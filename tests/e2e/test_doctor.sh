#!/usr/bin/env bash
# test_doctor.sh: `galley doctor --quick`, alone and under mpirun -np 2:
#   - one rank: exit 0, "healthy: no finding", its row in the table, the JSON (read back with
#     python3's json) saying healthy and exit 0;
#   - two ranks: a row per rank under the host name (gethostname), Open MPI's pml (ob1) and the
#     BTL between them (vader or sm, read from Open MPI's own lines), the bus bandwidth table from
#     1 KiB to 16 MiB, the read probe of a data file; the JSON's ranks, hosts, bandwidth and exit.
#     This machine is shared: exit 1 is accepted only when every finding is a rank below the
#     median (another process took its core), nothing else;
#   - a rank made slow for real, flagged by host and rank: both ranks on one core, with a busy
#     loop at nice 0 beside them and rank 1 at nice 5, so the scheduler gives rank 1 about a
#     quarter of the core against rank 0's half (CFS weights 335 : 1024 : 1024) whatever else
#     the machine runs (it slows both alike). Also found: the two ranks bound to one core.
#     (Release tree only: under the sanitizers it adds time and nothing else.)
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd mpirun python3 taskset nice
cd "$GL_TMP"
# What the tests assert must not depend on how the machine running them is wired.
unset GALLEY_WIRING_FILE GALLEY_SITE_PATH HDF5_USE_FILE_LOCKING
host=$(uname -n)
mpi=(mpirun --oversubscribe)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# json_check FILE PYTHON: runs PYTHON with d = the parsed document; fails unless it exits 0.
json_check() {
    python3 -c "import json, sys; d = json.load(open('$1')); $2" || fail "JSON check failed on $1: $2"
}

info "one rank: healthy, exit 0, table and JSON"
t0=$(now)
run "$GALLEY" doctor --quick --json one.json
assert_rc 0
assert_no_crash
assert_contains "$OUT" "galley doctor: 1 rank on 1 host, --quick"
assert_contains "$OUT" "healthy: no finding (exit 0)"
assert_contains "$OUT" "read probe: skipped (no --data PATH given)"
grep -qE "^ +0  $host +0/1 " <<<"$OUT" || fail "no row for rank 0 on $host: $OUT"
json_check one.json "assert d['galley_doctor'] == 1 and d['world'] == 1 and d['exit'] == 0 and d['healthy']
r = d['ranks'][0]; assert r['host'] == '$host' and r['answered'] and r['gemm_gflops'] > 0 and r['conv_gflops'] > 0, r
assert d['findings'] == [] and d['sizes'][0] == 1024 and d['sizes'][-1] == 16 << 20"
info "one rank: $(since "$t0") s"

info "two ranks: a row each, Open MPI's transport, bandwidth 1 KiB..16 MiB, read probe, JSON"
head -c $((24 << 20)) /dev/urandom >data.bin
t0=$(now)
run "${mpi[@]}" -np 2 "$GALLEY" doctor --quick --data data.bin --json two.json
assert_no_crash
[[ $RC == 0 || $RC == 1 ]] || { show_run; fail "two ranks: exit $RC"; }
assert_contains "$OUT" "galley doctor: 2 ranks on 1 host, --quick"
for r in 0 1; do
    grep -qE "^ +$r  $host +$r/2 .* ob1/- +(vader|sm)/- " <<<"$OUT" || { show_run; fail "no row for rank $r on $host with pml ob1 and btl vader/sm"; }
done
assert_contains "$OUT" "MPI:     Open MPI"
assert_contains "$OUT" "$host (2)"
for size in "1 KiB" "64 KiB" "16 MiB"; do grep -qE "^ +$size +[0-9]+\.[0-9]{3}$" <<<"$OUT" || fail "no bandwidth for $size: $OUT"; done
grep -qE "^    rank 1 on $host: [0-9]+ MB/s \([0-9]+ MB of data.bin in " <<<"$OUT" || fail "no read probe for rank 1: $OUT"
json_check two.json "assert d['world'] == 2 and [r['host'] for r in d['ranks']] == ['$host'] * 2
assert all(r['mpi']['pml'] == 'ob1' and r['mpi']['btl_node'] in ('vader', 'sm') and r['mpi']['peers'] == 2 for r in d['ranks'])
n = d['bandwidth']['node']; assert len(n) == 1 and n[0]['host'] == '$host' and n[0]['ranks'] == 2
assert len(n[0]['busbw']) == 8 and all(b > 0 for b in n[0]['busbw']), n
assert d['bandwidth']['net'] is None and d['bandwidth']['all'] is None
assert all(r['data'][0]['ok'] and r['data'][0]['read_mbs'] > 0 and r['data'][0]['read_seconds'] >= 0.25 for r in d['ranks'])
assert d['exit'] == $RC and d['healthy'] == ($RC == 0)
assert all('below the median' in f['text'] for f in d['findings']), d['findings']"
busbw=$(python3 -c "import json; print(' '.join('%.2f' % b for b in json.load(open('two.json'))['bandwidth']['node'][0]['busbw']))")
info "two ranks: exit $RC in $(since "$t0") s; bus bandwidth GB/s 1 KiB..16 MiB: $busbw"

if [[ $GALLEY_SANITIZE == 1 ]]; then
    info "SKIP (sanitizer build): the slowed rank, which takes 6 s and more; the release tree runs it"
    exit 0
fi
info "a rank given a quarter of a core: flagged by host and rank"
taskset -c 0 nice -n 0 bash -c 'while :; do :; done' &
hog=$!
trap 'kill $hog 2>/dev/null || true; gl_cleanup' EXIT
t0=$(now)
run timeout 120 "${mpi[@]}" --bind-to none -np 1 taskset -c 0 "$GALLEY" doctor --quick --json slow.json \
    : -np 1 taskset -c 0 nice -n 5 "$GALLEY" doctor --quick
kill $hog 2>/dev/null || true
assert_rc 1
assert_no_crash
grep -qE "^  - rank 1 on $host: (GEMM|3x3 convolution) [0-9.]+ GFLOP/s, [0-9]+% below the median" <<<"$OUT" ||
    { show_run; fail "the slowed rank 1 is not flagged with its host"; }
assert_not_contains "$OUT" "  - rank 0 on $host: GEMM"
assert_contains "$OUT" "ranks 0-1 on $host: two ranks are bound to the same cores (0 and 0)"
json_check slow.json "f = [f for f in d['findings'] if 'below the median' in f['text']]
assert f and all(x['ranks'] == [1] and x['hosts'] == ['$host'] for x in f), d['findings']"
info "slowed rank: flagged in $(since "$t0") s: $(grep -E "^  - rank 1 on" <<<"$OUT" | head -2 | tr '\n' ' ')"
