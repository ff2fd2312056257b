#!/usr/bin/env bash
# test_image_mpi.sh: two ranks in two containers of the CPU image, launched by the host's mpirun
# (`mpirun -np 2 podman run ...`, the hybrid model: the image's Open MPI talks to the host's
# mpirun through the OMPI_*/PMIX_* variables, the host network, pid and ipc namespaces and the
# shared session directory). An MPI program allreduces across the containers; galley trains the
# quickstart under the same launch: with distributed training its banner says "2 ranks", before
# that each container reports its rank and trains alone.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/image.sh"
image_need
need_cmd mpirun mpicc timeout
image_build_cpu

# Open MPI's session directory (PMIx rendezvous, shared-memory files) under TMPDIR, mounted at the
# same path in every container.
session=$GL_TMP/mpi
mkdir -p "$session"
launch=(env TMPDIR="$session" timeout 180 mpirun --oversubscribe -np 2
    podman run --rm --net=host --pid=host --ipc=host -v "$session:$session"
    -e 'OMPI_*' -e 'PMIX_*')

# ---- 1. an MPI program across the two containers ----------------------------------------------
# The host's Open MPI must be the image's (same Debian release); compile with the host's mpicc.
host_ompi=$(dpkg-query -W -f='${Version}' libopenmpi-dev 2>/dev/null || true)
run podman image inspect --format '{{index .Config.Labels "galley.openmpi.version"}}' "$IMAGE_CPU"
image_ompi=$OUT
[[ -n $host_ompi && ${host_ompi%%-*} == "${image_ompi%%-*}" ]] ||
    skip "the host's Open MPI ($host_ompi) is not the image's ($image_ompi): the hybrid launch needs the same version"
mkdir -p "$GL_TMP/hello"
cat >"$GL_TMP/hello/hello.c" <<'EOF'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, one, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("hello from rank %d of %d, allreduce sum %d\n", rank, size, sum);
    MPI_Finalize();
    return 0;
}
EOF
mpicc -O1 -o "$GL_TMP/hello/hello" "$GL_TMP/hello/hello.c" || fail "mpicc could not build the MPI test program"
t0=$SECONDS
run "${launch[@]}" -v "$GL_TMP/hello:/opt/hello:ro" "$IMAGE_CPU" /opt/hello/hello
assert_rc 0
assert_contains "$OUT" "hello from rank 0 of 2, allreduce sum 3" "mpirun -np 2 podman run (MPI program)"
assert_contains "$OUT" "hello from rank 1 of 2, allreduce sum 3" "mpirun -np 2 podman run (MPI program)"
info "MPI across 2 containers: both ranks allreduced (sum 3) in $((SECONDS - t0)) s"

# ---- 2. galley under the same launch ------------------------------------------------------------
t0=$SECONDS
# shellcheck disable=SC2016 # expanded inside the container
run "${launch[@]}" "$IMAGE_CPU" sh -c \
    'echo "container rank ${OMPI_COMM_WORLD_RANK:-unset} of ${OMPI_COMM_WORLD_SIZE:-unset}"
     exec galley train recipes/quickstart.yaml train.steps=20 train.target=null'
assert_rc 0
assert_no_crash
text="$OUT
$ERR"
assert_contains "$text" "container rank 0 of 2" "the containers' ranks"
assert_contains "$text" "container rank 1 of 2" "the containers' ranks"
if [[ $text == *" 2 ranks"* ]]; then
    assert_not_contains "$text" " 1 rank," "galley's banner under mpirun"
    info "galley trained with 2 ranks across 2 containers ($((SECONDS - t0)) s)"
else
    # galley without distributed training yet: each container trains alone.
    n=$(grep -c '^done: ' <<<"$text" || true)
    [[ $n -eq 2 ]] || { show_run; fail "expected 2 'done:' lines (one per container), found $n"; }
    info "galley ran in both containers (ranks 0 and 1 from the launch); its banner does not say '2 ranks' yet"
fi
info "PASS"
