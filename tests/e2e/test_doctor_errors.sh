#!/usr/bin/env bash
# test_doctor_errors.sh: what `galley doctor` does with bad input, and what it finds:
#   - exit 2 (cannot run): unknown arguments, a missing value, a bad --timeout, too many --data,
#     a --json path that cannot be written (under mpirun too: every rank stops);
#   - exit 1 (a finding), never a crash or a hang: a site profile that does not exist (by name
#     or by path); data paths that cannot be read (missing, an empty folder, a FIFO);
#   - the site's expectations: --site slingshot names the unset fabric variables; a site folder
#     (GALLEY_SITE_PATH) with DOCTOR_BUSBW_NODE above what this machine does and the data's
#     filesystem in FS_NO_LOCKING: both found, by host; HDF5_USE_FILE_LOCKING=FALSE clears the
#     second; --site generic: healthy;
#   - the hooks' report (GALLEY_WIRING_FILE): its site is the default, its warning a finding; an
#     unreadable report a finding;
#   - a rank that stops answering (SIGSTOP) ends the job with exit 1 within --timeout (+ the
#     watchdog's 10 s if it stopped inside MPI_Init), naming what did not answer (release tree
#     only: under the sanitizers it adds time and nothing else).
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley
need_cmd mpirun python3 findmnt mkfifo pgrep timeout
cd "$GL_TMP"
# What the tests assert must not depend on how the machine running them is wired.
unset GALLEY_WIRING_FILE GALLEY_SITE_PATH HDF5_USE_FILE_LOCKING
host=$(uname -n)
mpi=(mpirun --oversubscribe -np 2)
D=("$GALLEY" doctor --quick)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
json_check() {
    python3 -c "import json, sys; d = json.load(open('$1')); $2" || fail "JSON check failed on $1: $2"
}

info "exit 2: bad arguments, --json that cannot be written"
for args in "--bogus" "--data" "--timeout 0" "--timeout x" "--json" "--data a --data b --data c --data d --data e"; do
    # shellcheck disable=SC2086  # the words are the arguments
    run "${D[@]}" $args
    assert_rc 2
    assert_contains "$ERR" "galley doctor: error: "
done
run "${D[@]}" --json "$GL_TMP/no/such/dir/d.json"
assert_rc 2
assert_contains "$ERR" "cannot write --json $GL_TMP/no/such/dir/d.json"
run timeout 60 "${mpi[@]}" "${D[@]}" --json "$GL_TMP/no/such/dir/d.json"
assert_rc 2
run "$GALLEY" help doctor
assert_rc 0
assert_contains "$OUT" "usage: galley doctor [--site NAME|PATH]"

info "a site profile that does not exist: a finding, exit 1"
run "${D[@]}" --site no-such-site --json nosite.json
assert_rc 1
assert_no_crash
assert_contains "$OUT" "  - the job: site profile 'no-such-site' not found: no "
json_check nosite.json "f = d['findings']; assert len(f) == 1 and 'no-such-site' in f[0]['text'] and f[0]['ranks'] == []"
# A GALLEY_SITE_PATH entry too long for a path: named as not looked at, the others still searched.
long_dir=/$(printf 'd%.0s' {1..300})
GALLEY_SITE_PATH="$long_dir:$GL_TMP/nope" run "${D[@]}" --site no-such-site
assert_rc 1
assert_no_crash
assert_contains "$OUT" "not found: no /ddddd"
assert_contains "$OUT" "... (too long a path: not looked at), $GL_TMP/nope/no-such-site/site.env"
run "${D[@]}" --site "$GL_TMP/nope/site.env"
assert_rc 1
assert_contains "$OUT" "site profile '$GL_TMP/nope/site.env' does not exist"
run "${D[@]}" --site generic
assert_rc 0
assert_contains "$OUT" "site:    generic, from --site generic"

info "data paths that cannot be read: findings by host and rank, no hang on a FIFO"
mkdir empty
mkfifo fifo
run timeout 60 "${mpi[@]}" "${D[@]}" --data "$GL_TMP/missing.h5" --data empty --data fifo
assert_rc 1
assert_no_crash
assert_contains "$OUT" "ranks 0-1 on $host: data path $GL_TMP/missing.h5 cannot be read: cannot read $GL_TMP/missing.h5: No such file or directory"
assert_contains "$OUT" "ranks 0-1 on $host: data path empty cannot be read: no file to read in the folder empty"
assert_contains "$OUT" "ranks 0-1 on $host: data path fifo cannot be read: fifo is not a regular file"

info "--site slingshot: the fabric's variables it wants, unset here"
run "${D[@]}" --site slingshot
assert_rc 1
assert_contains "$OUT" "site:    slingshot, from --site slingshot (the network profiles slingshot-*.env); network slingshot, MPI pml cm"
assert_contains "$OUT" "variables differ from site slingshot's profiles: slingshot-fabric.env: unset FI_PROVIDER, FI_MR_CACHE_MONITOR"
FI_PROVIDER=tcp run "${D[@]}" --site slingshot
assert_contains "$OUT" "FI_PROVIDER=tcp (wants cxi)"

info "a site folder's bandwidth and file-locking expectations"
head -c $((4 << 20)) /dev/urandom >data.bin
fstype=$(findmnt -n -o FSTYPE --target "$GL_TMP")
mkdir -p sites/lab
cat >sites/lab/site.env <<EOF
DESCRIPTION=a test site that expects more than any machine does
NETWORK=tcp
FS_NO_LOCKING=$fstype  # the test's own filesystem
DOCTOR_BUSBW_NODE=100000   # GB/s
EOF
GALLEY_SITE_PATH=$GL_TMP/sites run timeout 60 "${mpi[@]}" -x GALLEY_SITE_PATH "${D[@]}" --site lab --data data.bin --json lab.json
assert_rc 1
assert_contains "$OUT" "site:    lab, from --site lab ($GL_TMP/sites/lab); network tcp"
assert_contains "$OUT" "rank 0 on $host: allreduce within host $host: "
assert_contains "$OUT" "below the site's 100000.00 (DOCTOR_BUSBW_NODE)"
assert_contains "$OUT" "ranks 0-1 on $host: HDF5 file locking is on (HDF5_USE_FILE_LOCKING (unset)) and data.bin is on $fstype"
json_check lab.json "assert d['site']['busbw_node'] == 100000 and d['ranks'][1]['data'][0]['fstype'] == '$fstype'
assert any('DOCTOR_BUSBW_NODE' in f['text'] and f['hosts'] == ['$host'] for f in d['findings'])"
GALLEY_SITE_PATH=$GL_TMP/sites HDF5_USE_FILE_LOCKING=FALSE run timeout 60 "${mpi[@]}" -x GALLEY_SITE_PATH \
    -x HDF5_USE_FILE_LOCKING "${D[@]}" --site lab --data data.bin
assert_rc 1
assert_not_contains "$OUT" "HDF5 file locking is on"
grep -qE "^ +1  $host .* FALSE " <<<"$OUT" || fail "rank 1's row does not show HDF5_USE_FILE_LOCKING=FALSE: $OUT"

info "the hooks' report: its site by default, its warning a finding"
cat >wiring.txt <<EOF
galley wiring report: $GALLEY_SRC/site/galley-entrypoint, pid 1, 2025-01-01 00:00:00, hooks took 9 ms
runtime: podman (/run/.containerenv exists)
site:    lab (GALLEY_SITE is set) from $GL_TMP/sites/lab: a test site
warning: no site matched: NCCL and MPI use TCP sockets
  set  HDF5_USE_FILE_LOCKING=FALSE  (a test)
EOF
GALLEY_WIRING_FILE=$GL_TMP/wiring.txt run "${D[@]}"
assert_rc 1
assert_contains "$OUT" "site:    lab, from the site the hooks chose ($GL_TMP/sites/lab)"
assert_contains "$OUT" "hooks:   rank 0: report, runtime podman, site lab"
assert_contains "$OUT" "rank 0 on $host: the site hooks said: no site matched: NCCL and MPI use TCP sockets"
GALLEY_WIRING_FILE=$GL_TMP/none.txt run "${D[@]}"
assert_rc 1
assert_contains "$OUT" "the site hooks said: GALLEY_WIRING_FILE=$GL_TMP/none.txt cannot be read (No such file or directory)"

if [[ $GALLEY_SANITIZE == 1 ]]; then
    info "SKIP (sanitizer build): the stopped rank, which takes 4-14 s; the release tree runs it"
    exit 0
fi
info "a rank that stops answering: exit 1 within the timeout, saying what did not answer"
t0=$(now)
timeout 120 "${mpi[@]}" "$GALLEY" doctor --timeout 3 --data data.bin >hung.out 2>hung.err &  # not --quick: longer probes
job=$!
victim=""
for _ in $(seq 100); do  # both ranks started: stop the second
    victim=$(pgrep -f "^$GALLEY doctor --timeout 3" | sort -n | tail -n +2 | head -1 || true)
    [[ -n $victim ]] && break
    sleep 0.05
done
[[ -n $victim ]] || fail "the ranks did not start"
sleep 0.6
kill -STOP "$victim"
rc=0
wait "$job" || rc=$?
secs=$(since "$t0")
kill -9 "$victim" 2>/dev/null || true
[[ $rc == 1 ]] || fail "stopped rank: exit $rc after $secs s (want 1): $(cat hung.err)"
awk -v s="$secs" 'BEGIN { exit !(s < 30) }' || fail "stopped rank: the job took $secs s to end"
grep -qE "galley doctor: finding: .*(did not|no answer)" hung.err hung.out || fail "stopped rank: no finding said: $(cat hung.err)"
info "stopped rank: exit 1 after $secs s: $(grep -h "galley doctor: finding" hung.err hung.out | head -1)"
