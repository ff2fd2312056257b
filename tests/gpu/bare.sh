#!/usr/bin/env bash
# tests/gpu/bare.sh: runs tests/gpu/run.sh on a GPU machine that lacks galley's build
# dependencies, from what tests/gpu/pack.sh put in build/gpu-carry/ (run from a checkout of the
# same commit with that folder copied in):
#   - unpacks the stripped build into build/;
#   - Open MPI: the machine's own when it has mpirun and libmpi.so.40, else the packed one
#     (unpacked into /, files that exist are kept); without ssh, Open MPI's isolated launcher;
#   - cuDNN 9, cuBLAS 13, NCCL 2 and NVRTC found where they are (the system's, or PyTorch's
#     wheels under /opt or /usr/local) and put on LD_LIBRARY_PATH; the driver's libcuda is left
#     to the system (the CUDA toolkit's compat libcuda does not match every driver: on
#     2026-12-04 it gave "unsupported display driver / cuda driver combination");
#   - the tests' Python environment (tests/e2e/lib/py.sh) is the machine's python3, which must
#     have h5py and numpy (nothing can be installed without a network).
#   bash tests/gpu/bare.sh [OUT_DIR]      (environment as for tests/gpu/run.sh)
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CARRY=$ROOT/build/gpu-carry
cd "$ROOT" || exit 1
[[ -f $CARRY/bins.tar.xz ]] || { echo "bare.sh: no $CARRY/bins.tar.xz (run tests/gpu/pack.sh where galley builds)" >&2; exit 1; }
tar -xJf "$CARRY/bins.tar.xz"
echo "== $(uname -r); $(. /etc/os-release && echo "$PRETTY_NAME"); mpirun: $(command -v mpirun || echo none)"
if ! command -v mpirun >/dev/null || ! ldconfig -p | grep -q libmpi.so.40; then
    echo "== unpacking the packed Open MPI"
    tar -xJf "$CARRY/ompi.tar.xz" -C / --skip-old-files && ldconfig
    mkdir -p /tmp/galley-ompi && ln -sf /usr/bin/mpirun.openmpi /tmp/galley-ompi/mpirun
    export PATH=/tmp/galley-ompi:$PATH
fi
command -v ssh >/dev/null || export OMPI_MCA_plm=isolated
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
dirs=$CARRY/lib
for n in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libnccl.so.2 libnvrtc.so.13; do
    ldconfig -p | grep -q " $n " && { echo "== $n: the system's"; continue; }
    f=$(find /opt /usr/local -name "$n" 2>/dev/null | head -1)
    echo "== $n: ${f:-not found}"
    [[ -n $f && :$dirs: != *":$(dirname "$f"):"* ]] && dirs=$dirs:$(dirname "$f")
done
export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ldd build/galley | grep 'not found' && { echo "bare.sh: build/galley cannot start" >&2; exit 1; }
py=/tmp/galley-pyenv
mkdir -p "$py/bin"
printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" >"$py/bin/python" # a wrapper: a link loses a venv
chmod +x "$py/bin/python"
# py.sh's marker: its package list, as if it had installed them
sed -nE 's/^GL_PY_PACKAGES=\((.*)\)$/\1/p' tests/e2e/lib/py.sh | tr -d '"' >"$py/.galley-ready"
export GALLEY_PYENV=$py
exec bash tests/gpu/run.sh "$@"
