#!/usr/bin/env bash
# tests/gpu/pack.sh: packs what tests/gpu/run.sh needs for a GPU machine that has a driver and
# NVIDIA's libraries but none of galley's build dependencies (a lent cloud VM with PyTorch, say),
# into build/gpu-carry/ (about 20 MB; copy it there beside a checkout of the same commit):
#   bins.tar.xz   build/galley, its build info and the three GPU unit tests, stripped (unpacked
#                 into the checkout's build/ there);
#   ompi.tar.xz   Open MPI's runtime files from this machine's Debian packages (galley links
#                 libmpi dynamically), unpacked into / there only when it has no Open MPI;
#   lib/          libcmocka.so.0 (the unit tests link it dynamically).
# Then, there: bash tests/gpu/bare.sh [OUT_DIR]. Run here from the repository root after
# `./build.sh build` made a CUDA build:
#   bash tests/gpu/pack.sh [BUILD_DIR]        (default build)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=$ROOT/${1:-build}
DEST=$ROOT/build/gpu-carry
grep -q '^cuda=1$' "$B/galley-build-info.txt" 2>/dev/null || {
    echo "pack.sh: $B has no CUDA build (galley-build-info.txt: cuda=1 missing)" >&2
    exit 1
}
mkdir -p "$DEST/lib"
st=$(mktemp -d)
trap 'rm -rf "$st"' EXIT
mkdir -p "$st/build/tests/unit"
strip -o "$st/build/galley" "$B/galley"
cp "$B/galley-build-info.txt" "$st/build/"
for t in test_cuda_ops test_cuda_transformer test_cuda_optim; do
    strip -o "$st/build/tests/unit/$t" "$B/tests/unit/$t"
done
tar -C "$st" -cf - build | xz -T0 -6 >"$DEST/bins.tar.xz"
cp -L "$(ldconfig -p | awk '/libcmocka\.so\.0 / { print $NF; exit }')" "$DEST/lib/libcmocka.so.0"
# Open MPI and what its libraries and plugins load (from ldd on the Debian 12 packages), less
# what every Linux has (libc, libgcc, zlib, libudev, libuuid)
pk="openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
    libfabric1 libibverbs1 ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 libucx0 libnuma1
    libnl-3-200 libnl-route-3-200 libmunge2"
# shellcheck disable=SC2086 # word splitting of the package list is meant
for p in $pk; do dpkg -L "$p"; done | grep -vE '^/usr/share/(doc|man|lintian|bug)' |
    while read -r f; do [[ -f $f && ! -d $f ]] && echo "$f"; done >"$st/files"
tar -cJf "$DEST/ompi.tar.xz" -T "$st/files" 2>/dev/null
ls -la "$DEST"
