#!/usr/bin/env bash
# test_static_link.sh: the release binary's static-link policy.
#   dynamic only: glibc (libc, libm, libpthread, libdl, librt, ld-linux), libgcc_s, Open MPI;
#   loaded at run time, never linked: the CUDA driver, cuBLAS, cuDNN, NCCL (the binary starts on
#                 CPU-only nodes);
#   never dynamic: libyaml, HDF5 (+ libsz, libaec), OpenBLAS (+ libgfortran, libquadmath), libgomp (OpenMP), cudart.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"

if [[ $GALLEY_SANITIZE == 1 ]]; then
    skip "sanitizer build (the ASan runtime is dynamic)"
fi
need_galley
need_cmd readelf ldd

# CUDA build? From the build's info file, else from the binary itself.
cuda=$GALLEY_HAVE_CUDA
info_file=$GALLEY_BUILD/galley-build-info.txt
if [[ -r $info_file ]] && grep -q '^cuda=1$' "$info_file"; then
    cuda=1
fi
if [[ $cuda != 1 ]] && readelf -Ws "$GALLEY" 2>/dev/null | grep -q '__cudaRegisterFatBinary'; then
    cuda=1
fi

run readelf -d "$GALLEY"
assert_rc 0
needed=()
re_needed='\(NEEDED\).*\[([^]]+)\]'
while IFS= read -r line; do
    [[ $line =~ $re_needed ]] && needed+=("${BASH_REMATCH[1]}")
done <<<"$OUT"

size=$(stat -c %s "$GALLEY")
info "binary: $GALLEY ($size bytes, $(( size / 1024 / 1024 )) MiB), cuda=$cuda"
info "NEEDED: ${needed[*]:-(none)}"

bad=()
for lib in "${needed[@]}"; do
    case $lib in
        libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1) ;;
        ld-linux-x86-64.so.2 | libgcc_s.so.1) ;;
        libmpi.so.*) ;;
        libcuda.so.1 | libcublas*.so.* | libcudnn*.so.* | libnccl.so.*)
            # loaded at run time (dlopen), so CPU-only nodes can start the same binary
            bad+=("$lib (a CUDA library must be loaded at run time, not linked)") ;;
        *) bad+=("$lib") ;;
    esac
done

run ldd "$GALLEY"
assert_rc 0
forbidden='libyaml|libhdf5|libsz|libaec|libopenblas|libgfortran|libquadmath|libgomp|libcudart'
while IFS= read -r line; do
    [[ $line =~ $forbidden ]] && bad+=("ldd: ${line#"${line%%[![:space:]]*}"}")
done <<<"$OUT"

if [[ ${#bad[@]} -gt 0 ]]; then
    printf '  not allowed: %s\n' "${bad[@]}" >&2
    echo "  ldd $GALLEY:" >&2
    printf '%s\n' "$OUT" | sed 's/^/    | /' >&2
    fail "the binary links libraries dynamically that must be static (or unknown ones)"
fi
info "PASS: only allowed dynamic libraries"
