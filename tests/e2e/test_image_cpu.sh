#!/usr/bin/env bash
# test_image_cpu.sh: the CPU image (the Containerfile's stages on a debootstrap Debian base, built
# by ./build.sh image --cpu) trains the quickstart with podman; its runtime stage has galley, the
# recipes, the entrypoint, labels, the mount points and the recorded library path, and none of
# libyaml, HDF5, OpenBLAS, a compiler or -dev packages.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/e2e/lib/image.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/image.sh"
image_need
image_build_cpu

# ---- 1. the quickstart trains; its run directory lands in the /runs mount ------------------
mkdir -p "$GL_TMP/runs"
t0=$SECONDS
image_run -v "$GL_TMP/runs:/runs" "$IMAGE_CPU" galley train recipes/quickstart.yaml
assert_rc 0
assert_no_crash
assert_contains "$OUT$ERR" "target reached" "quickstart output in the image"
info "quickstart in the image: exit 0, 'target reached' ($((SECONDS - t0)) s with container start)"
metrics=$(find "$GL_TMP/runs" -name metrics.jsonl | head -n 1)
[[ -n $metrics ]] || fail "no metrics.jsonl under the /runs mount (working directory /opt/galley, runs -> /runs)"
info "run directory in the /runs mount: ${metrics#"$GL_TMP/runs/"}"

# ---- 2. default command, entrypoint, environment -------------------------------------------
image_run "$IMAGE_CPU"
assert_rc 0
assert_contains "$OUT" "MPI:" "the default command (galley info)"
run podman image inspect --format '{{json .Config.Entrypoint}} {{.Config.WorkingDir}}' "$IMAGE_CPU"
assert_rc 0
assert_contains "$OUT" '["/opt/galley/site/galley-entrypoint"] /opt/galley' "entrypoint and working directory"

# ---- 3. the files and the recorded library path ------------------------------------------------
# shellcheck disable=SC2016 # expanded inside the container
image_run --entrypoint sh "$IMAGE_CPU" -c '
    for d in /data /runs /ckpt; do [ -d "$d" ] || echo "missing mount point $d"; done
    for f in /opt/galley/bin/galley /usr/local/bin/galley /opt/galley/site/galley-entrypoint; do
        [ -x "$f" ] || echo "missing executable $f"
    done
    [ -f /opt/galley/recipes/quickstart.yaml ] || echo "missing /opt/galley/recipes/quickstart.yaml"
    [ "$(cat /opt/galley/etc/ld_library_path)" = "${GALLEY_IMAGE_LD_LIBRARY_PATH-unset}" ] ||
        echo "ld_library_path file and GALLEY_IMAGE_LD_LIBRARY_PATH differ"
    cat /opt/galley/etc/image-versions /opt/galley/etc/image-labels'
assert_rc 0
assert_not_contains "$OUT" "missing" "image layout check"
assert_not_contains "$OUT" "differ" "image layout check"
assert_contains "$OUT" "cuda=none" "/opt/galley/etc/image-versions"
files=$OUT
info "mount points, binary, entrypoint, recipes, ld_library_path: present"

# ---- 4. labels ----------------------------------------------------------------------------------
run podman image inspect --format '{{json .Config.Labels}}' "$IMAGE_CPU"
assert_rc 0
labels=$OUT
for key in org.opencontainers.image.version org.opencontainers.image.revision \
    org.opencontainers.image.source org.opencontainers.image.created galley.cuda.version \
    galley.cudnn.version galley.nccl.version galley.openmpi.version; do
    assert_contains "$labels" "\"$key\":" "image labels"
done
assert_contains "$labels" '"galley.cuda.version":"none"' "image labels"
assert_contains "$labels" '"org.opencontainers.image.title":"galley"' "image labels"
assert_not_contains "$labels" '"galley.openmpi.version":"unknown"' "image labels"
# This build's values, not ones the layer cache kept from an earlier build.
run podman image inspect --format '{{index .Config.Labels "org.opencontainers.image.created"}}' "$IMAGE_CPU"
assert_contains "$files" "created=$OUT" "/opt/galley/etc/image-labels"
age=$(($(date +%s) - $(date -d "$OUT" +%s)))
[[ $age -lt 600 ]] || fail "the created label ($OUT) is $age s old: a label came from the layer cache"
info "labels: $(printf '%s' "$labels" | grep -o '"galley\.openmpi\.version":"[^"]*"')"

# ---- 5. nothing the static binary carries, no toolchain ------------------------------------
# shellcheck disable=SC2016 # expanded inside the container
image_run --entrypoint sh "$IMAGE_CPU" -c '
    dpkg-query -W -f="\${db:Status-Abbrev} \${Package}\n" | sed -n "s/^ii  *//p" |
        grep -E "^(libyaml|libhdf5|libsz|libaec|libopenblas|libblas|liblapack|libgomp)|-dev(:|$)" || true
    for c in cc gcc c99 nvcc cmake; do command -v "$c" >/dev/null 2>&1 && echo "compiler: $c"; done
    ldd /opt/galley/bin/galley | grep -E "not found|libyaml|libhdf5|libopenblas" || true'
assert_rc 0
[[ -z $OUT ]] || {
    show_run
    fail "the runtime image has packages, tools or links it must not (listed above)"
}
info "runtime stage: no libyaml, HDF5, OpenBLAS, compiler or -dev package; galley's libraries resolve"
info "PASS"
