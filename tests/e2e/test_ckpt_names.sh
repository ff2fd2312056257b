#!/usr/bin/env bash
# test_ckpt_names.sh: checkpoint file names (issue #27):
#   - a run name cannot lead a checkpoint out of checkpoint.dir: `name: ../../etc/x` writes
#     ck/_._.._etc_x-HASH-step*.h5 (the run directory's safe name and a hash of the name as
#     written) and --resume auto finds it; names that differ only in unsafe characters ("exp a",
#     "exp_a") keep apart: neither prunes nor resumes the other's checkpoints;
#   - a checkpoint that cannot be created says its reason once, and the right one;
#   - temporary files left by killed writers are removed at start, said in one line: same host
#     and pid gone at once; from another host or without a host (older galley) after an hour;
#     a live writer's file stays.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
need_galley

MLP=$GALLEY_SRC/recipes/quickstart.yaml
args=(train.steps=20 train.target=null log.every=10 train.threads=1 log.files=false)
mkdir -p "$GL_TMP/a/b/ck" "$GL_TMP/a/etc"
cd "$GL_TMP/a/b"

info "name: ../../etc/x stays in checkpoint.dir, under the run directory's safe name"
assert_exit 0 "$GALLEY" train "$MLP" "${args[@]}" checkpoint.dir=ck name=../../etc/x
[[ -z $(ls -A ../etc) ]] || fail "written outside checkpoint.dir: $(ls -A ../etc)"
x=(ck/_._.._etc_x-????????-step00000020.h5)
[[ -f ${x[0]} ]] || fail "no ck/_._.._etc_x-HASH-step00000020.h5: $(ls -A ck)"
assert_contains "$OUT" "checkpoint: ${x[0]}"
assert_exit 0 "$GALLEY" train "$MLP" "${args[@]}" train.steps=30 checkpoint.dir=ck name=../../etc/x --resume auto
assert_contains "$OUT" "resumed from ${x[0]} at step 20"

info "names that differ only in unsafe characters keep their checkpoints apart"
mkdir -p ../ck2
assert_exit 0 "$GALLEY" train "$MLP" "${args[@]}" checkpoint.dir=../ck2 name=exp_a checkpoint.keep=1
assert_exit 0 "$GALLEY" train "$MLP" "${args[@]}" train.steps=10 checkpoint.dir=../ck2 "name=exp a" \
    checkpoint.keep=1 --resume auto
assert_not_contains "$OUT" "resumed from" "'exp a' resuming 'exp_a'"
[[ -f ../ck2/exp_a-step00000020.h5 ]] || fail "'exp a' pruned exp_a's checkpoint: $(ls -A ../ck2)"
[[ $(find ../ck2 -name 'exp_a-*-step00000010.h5' | wc -l) == 1 ]] || fail "no checkpoint of 'exp a': $(ls -A ../ck2)"

info "a checkpoint that cannot be created: its reason, once"
long=$(printf 'n%.0s' {1..250})
run "$GALLEY" train "$MLP" "${args[@]}" checkpoint.dir=ck "name=$long"
assert_rc 1
assert_contains "$ERR" "checkpoint at step 20 not written: cannot create ck/.$long-step00000020.h5.tmp."
assert_contains "$ERR" ": File name too long"
assert_not_contains "$ERR" "no space left"
[[ $(grep -o 'File name too long' <<<"$ERR" | wc -l) == 1 ]] || fail "the reason repeats: $ERR"

info "stale temporary files: removed at start, a live writer's kept"
host=$(hostname)-pidns$(stat -L -c %i /proc/self/ns/pid)  # this pid namespace's writers
sleep 0 &
dead=$!
wait "$dead"
t=q-step00000010.h5.tmp
touch "ck/.$t.$host.$dead" "ck/.$t.$host.$$" "ck/.$t.other-node.$dead" "ck/.$t.$dead"
touch -d '2 hours ago' "ck/.r-step00000010.h5.tmp.other-node.$dead" "ck/.r-step00000010.h5.tmp.$dead"
assert_exit 0 "$GALLEY" train "$MLP" "${args[@]}" checkpoint.dir=ck name=q
assert_contains "$OUT" "galley: removed 3 temporary checkpoint files left in ck/ by writers that are gone"
left=$(cd ck && printf '%s\n' .*.tmp.* | sort | tr '\n' ' ')
want=$(printf '%s\n' ".$t.$host.$$" ".$t.other-node.$dead" ".$t.$dead" | sort | tr '\n' ' ')
[[ $left == "$want" ]] || fail "left: $left; expected: $want"
[[ $(grep -c 'temporary checkpoint file' <<<"$OUT") == 1 ]] || fail "said more than once: $OUT"
info "ok"
