# shellcheck shell=bash
# image.sh: shared set-up for tests/e2e/test_image_*.sh. Source it after common.sh:
#
#   image_need          skip unless this is the release tree, root, podman and debootstrap
#   image_build_cpu     the CPU image, built from a snapshot of the source with
#                       `./build.sh image --cpu --base localhost/galley-base:bookworm`
#                       (sets IMAGE_CPU; the base comes from debootstrap, made once)
#
# Everything lives under $GALLEY_BUILD/image-cache/ so the image tests of one run share it: a
# private image store (not the machine's), the debootstrap tarball and a containers.conf. podman
# is a wrapper on PATH that points at that store; where the default OCI runtime cannot start
# containers (crun on hybrid cgroups, ulimits above the hard limits), CONTAINERS_CONF selects runc
# with capped ulimits, for the tests only. Builds hold a lock, so tests running side by side build
# once; a second build is served from the layer cache.

IMAGE_CACHE=$GALLEY_BUILD/image-cache
IMAGE_BASE=localhost/galley-base:bookworm
IMAGE_CPU=localhost/galley-test:cpu
IMAGE_MIRROR=${GALLEY_DEBIAN_MIRROR:-http://deb.debian.org/debian}

# image_need: skip unless the image tests can run here, then set up podman (see above).
image_need() {
    [[ $GALLEY_SANITIZE == 1 ]] && skip "sanitizer build (the image tests run once, in the release tree)"
    [[ $(id -u) -eq 0 ]] || skip "needs root (podman builds and debootstrap here run as root)"
    local c
    for c in podman debootstrap flock; do
        command -v "$c" >/dev/null 2>&1 ||
            skip "needs '$c' (./build.sh test installs podman, buildah and debootstrap on Debian/Ubuntu)"
    done
    mkdir -p "$IMAGE_CACHE/bin" "$IMAGE_CACHE/storage" "$IMAGE_CACHE/run"
    # The store path goes on the command line: with CONTAINERS_STORAGE_CONF instead, podman 4.3's
    # cleanup process misses the container's exit and every `podman run` waits 20 s. The lock's
    # descriptor is closed first: conmon would inherit it and hold the lock while a container runs.
    # shellcheck disable=SC2016 # the wrapper expands them
    printf '#!/bin/bash\n[[ -z ${IMAGE_LOCK_FD:-} ]] || exec {IMAGE_LOCK_FD}>&-\nexec %q --root %q --runroot %q "$@"\n' \
        "$(command -v podman)" "$IMAGE_CACHE/storage" "$IMAGE_CACHE/run" >"$IMAGE_CACHE/bin/podman"
    chmod +x "$IMAGE_CACHE/bin/podman"
    PATH=$IMAGE_CACHE/bin:$PATH
    export PATH GALLEY_CONTAINER_TOOL=podman
    unset CONTAINERS_STORAGE_CONF
}

# image_lock: hold $IMAGE_CACHE/lock until the test exits (or image_unlock).
image_lock() {
    exec {IMAGE_LOCK_FD}>"$IMAGE_CACHE/lock"
    export IMAGE_LOCK_FD
    flock -w 540 "$IMAGE_LOCK_FD" || fail "waited 540 s for $IMAGE_CACHE/lock (another image test building?)"
}
image_unlock() {
    exec {IMAGE_LOCK_FD}>&-
    unset IMAGE_LOCK_FD
}

# image_runtime_ok: podman can start a container of the base; else use runc with capped ulimits.
image_runtime_ok() {
    podman run --rm "$IMAGE_BASE" true 2>"$GL_TMP/runtime.err" && return 0
    command -v runc >/dev/null 2>&1 ||
        skip "podman cannot start containers here and runc is missing (apt-get install runc): $(head -n 3 "$GL_TMP/runtime.err")"
    local n u
    n=$(ulimit -Hn)
    u=$(ulimit -Hu)
    [[ $n == unlimited || $n -gt 1048576 ]] && n=1048576
    [[ $u == unlimited || $u -gt 32768 ]] && u=32768
    printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nruntime = "runc"\n' \
        "$n" "$n" "$u" "$u" >"$IMAGE_CACHE/containers.conf"
    export CONTAINERS_CONF=$IMAGE_CACHE/containers.conf
    podman run --rm "$IMAGE_BASE" true 2>>"$GL_TMP/runtime.err" || {
        cat "$GL_TMP/runtime.err" >&2
        fail "podman cannot start a container of $IMAGE_BASE, with the default runtime or runc (errors above)"
    }
    info "podman: runc with ulimits nofile=$n nproc=$u (CONTAINERS_CONF=$CONTAINERS_CONF; the default runtime fails here)"
}

# image_base: $IMAGE_BASE in the store, from debootstrap (cached as a tarball). Call with the lock held.
image_base() {
    local tar=$IMAGE_CACHE/rootfs-bookworm.tar t0=$SECONDS
    if ! podman image exists "$IMAGE_BASE"; then
        if [[ ! -s $tar ]]; then
            local root=$IMAGE_CACHE/rootfs.tmp
            rm -rf "$root"
            info "debootstrap --variant=minbase bookworm ($IMAGE_MIRROR)"
            debootstrap --variant=minbase bookworm "$root" "$IMAGE_MIRROR" >"$IMAGE_CACHE/debootstrap.log" 2>&1 || {
                tail -n 20 "$IMAGE_CACHE/debootstrap.log" >&2
                fail "debootstrap failed (log above; full log $IMAGE_CACHE/debootstrap.log)"
            }
            # The builds run apt-get update themselves: leave out the package lists and caches.
            rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
            tar -C "$root" -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
            rm -rf "$root"
        fi
        podman import -q "$tar" "$IMAGE_BASE" >/dev/null || fail "podman import of $tar failed"
        info "base $IMAGE_BASE: $(podman images --format '{{.Size}}' "$IMAGE_BASE") in $((SECONDS - t0)) s"
    fi
    [[ -n ${CONTAINERS_CONF:-} ]] || image_runtime_ok
}

# image_context DIR: the build context: a snapshot of the files the Containerfile copies, so edits
# made while the test runs do not change what is built.
image_context() {
    local dir=$1 f
    mkdir -p "$dir"
    for f in Containerfile build.sh CMakeLists.txt LICENSE cmake include src recipes site images; do
        [[ -e $GALLEY_SRC/$f ]] || fail "missing $GALLEY_SRC/$f"
        cp -a "$GALLEY_SRC/$f" "$dir/"
    done
    if [[ ! -x $dir/site/galley-entrypoint ]]; then
        # Until the site hooks exist: a stand-in that only runs the command (this snapshot only).
        info "site/galley-entrypoint not there yet: the image gets a stand-in that execs its arguments"
        printf '#!/bin/sh\nexec "$@"\n' >"$dir/site/galley-entrypoint"
        chmod +x "$dir/site/galley-entrypoint"
    fi
}

# image_build_cpu: build $IMAGE_CPU with ./build.sh image --cpu (from the layer cache when nothing
# changed). Prints the build time and size.
image_build_cpu() {
    image_lock
    image_base
    local ctx=$GL_TMP/context log=$IMAGE_CACHE/build-cpu.$GL_TEST_NAME.log t0=$SECONDS
    image_context "$ctx"
    info "building $IMAGE_CPU: ./build.sh image --cpu --base $IMAGE_BASE (log: $log)"
    GALLEY_JOBS=${GALLEY_JOBS:-2} "$ctx/build.sh" image --cpu --base "$IMAGE_BASE" --tag "$IMAGE_CPU" \
        >"$log" 2>&1 </dev/null || {
        tail -n 40 "$log" >&2
        fail "./build.sh image --cpu failed (last lines above; full log $log)"
    }
    local cached
    cached=$(grep -c -- '--> Using cache' "$log" || true)
    info "built $IMAGE_CPU in $((SECONDS - t0)) s ($cached steps from the layer cache): $(podman images --format '{{.Size}}' "$IMAGE_CPU")"
    image_unlock
}

# image_run ARGS...: podman run --rm ARGS (the image and command among them); sets RC, OUT, ERR.
image_run() {
    run podman run --rm "$@"
}
