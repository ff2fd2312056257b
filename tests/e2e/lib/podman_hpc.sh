# shellcheck shell=bash
# shellcheck disable=SC2034  # a library: the test uses PHPC_RUN, PHPC_NODE, PHPC_TEST_MODULES
# podman_hpc.sh: NERSC's real podman-hpc (PyPI) with a private configuration, for
# tests/e2e/test_image_podman_hpc.sh. Source it after common.sh and image.sh, then:
#
#   image_need; phpc_need     # skip (77) only where fuse cannot mount or PyPI is out of reach
#   phpc_install              # podman-hpc $PHPC_VERSION into the test venv ($GALLEY_PYENV)
#   phpc_setup                # private config, modules, hooks.d, squash dir; podman-hpc on PATH
#   podman-hpc migrate IMAGE
#   "${PHPC_NODE[@]}" podman-hpc run --rm "${PHPC_RUN[@]}" IMAGE ...   # as a compute node sees it
#
# Nothing of the machine's own podman-hpc set-up is read or written: PODMANHPC_CONFIG_FILE names
# a file under $PHPC_DIR (in GL_TMP) that sets every path: the image store is image.sh's private
# one (so the CPU image's layers are shared with the other image tests), the squash directory
# (SQUASH_DIR), the modules, the OCI hooks directory and the config home are under $PHPC_DIR.
# The modules are the package's own etc/podman_hpc files, unchanged in $PHPC_DIR/etc; a second
# copy, $PHPC_DIR/etc-test (PODMANHPC_MODULES_DIR=$PHPC_DIR/etc-test/modules.d), differs only in
# that the host paths nccl.yaml copies from are prefixed with the fake host tree $PHPC_HOST (this
# machine has no /opt/cray or /global) and, as root, openmpi-pmix.yaml has no --userns=keep-id.
#
# `podman-hpc migrate` runs a statically linked mksquashfs inside the image (mksquashfs_bin, NERSC
# installs mksquashfs.static). Debian has no static build, so $PHPC_DIR/mksquashfs.static is a
# stand-in: a shell script carrying the host's mksquashfs, its libraries and loader, unpacked in
# /sqout (the squash directory's overlay/l, mounted there and excluded from the squash; the
# container's /dev and /dev/shm are noexec), run with the same arguments, then removed.
#
# phpc_cleanup (call it from the EXIT trap; a watchdog calls it if the test is killed outright):
# removes the containers this test labelled, unmounts the fuse mounts under $PHPC_DIR, ends the
# fuse-overlayfs-wrap waiters that name $PHPC_DIR, removes $PHPC_DIR.

PHPC_VERSION=1.2.2
PHPC_DIR=""
PHPC_HOST=""
PHPC_LABEL=galley-test-podman-hpc=$$
PHPC_RUN=(--label "$PHPC_LABEL")

# phpc_need: skip unless fuse works here (squashfuse mounts a squash file) and the fuse tools
# podman-hpc calls are installed.
phpc_need() {
    local c
    for c in fuse-overlayfs squashfuse mksquashfs inotifywait fusermount; do
        command -v "$c" >/dev/null 2>&1 ||
            skip "needs '$c' (Debian: apt-get install fuse-overlayfs squashfuse squashfs-tools inotify-tools; ./build.sh test does)"
    done
    [[ -c /dev/fuse ]] || skip "no /dev/fuse: fuse is unavailable here (podman-hpc mounts squashed images with squashfuse)"
    local t=$GL_TMP/fuse-probe
    mkdir -p "$t/src" "$t/mnt"
    echo probe >"$t/src/f"
    mksquashfs "$t/src" "$t/probe.squash" -quiet -no-progress >/dev/null 2>&1 ||
        fail "mksquashfs cannot make a squash file in $t"
    if ! squashfuse "$t/probe.squash" "$t/mnt" 2>"$t/err"; then
        skip "fuse is unavailable here: squashfuse cannot mount ($(head -n 1 "$t/err"))"
    fi
    local got
    got=$(cat "$t/mnt/f" 2>/dev/null || true)
    umount "$t/mnt" 2>/dev/null || fusermount -u "$t/mnt"
    [[ $got == probe ]] || fail "squashfuse mounted $t/probe.squash but its file reads '$got'"
    rm -rf "$t"
}

# phpc_install: podman-hpc $PHPC_VERSION into the test venv (py.sh's, shared by the tests; under its
# lock); sets PHPC_VENV.
phpc_install() {
    # shellcheck source=tests/e2e/lib/py.sh
    source "$GALLEY_SRC/tests/e2e/lib/py.sh"
    need_pyenv
    PHPC_VENV=$GALLEY_PYENV
    local ready=$PHPC_VENV/.galley-podman-hpc log=$GL_TMP/pip-podman-hpc.log rc=0
    [[ -f $ready && $(cat "$ready") == "$PHPC_VERSION" && -x $PHPC_VENV/bin/podman-hpc ]] && return 0
    (
        flock 9
        [[ -f $ready && $(cat "$ready") == "$PHPC_VERSION" ]] && exit 0
        echo "[podman_hpc.sh] pip install podman-hpc==$PHPC_VERSION into $PHPC_VENV (once per build directory)"
        "$PHPC_VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q --timeout 30 \
            --retries 2 "podman-hpc==$PHPC_VERSION" >"$log" 2>&1 || exit 4
        echo "$PHPC_VERSION" >"$ready"
    ) 9>"$GALLEY_PYENV.lock" || rc=$?
    if ((rc)); then
        if pip_offline "$log"; then
            tail -n 5 "$log" | sed 's/^/  | /'
            skip "pip cannot reach PyPI to install podman-hpc==$PHPC_VERSION (the log's last lines are above)"
        fi
        cat "$log" >&2
        fail "pip install podman-hpc==$PHPC_VERSION into $PHPC_VENV failed (log above)"
    fi
    [[ -x $PHPC_VENV/bin/podman-hpc && -x $PHPC_VENV/bin/hook_tool && -x $PHPC_VENV/bin/fuse-overlayfs-wrap ]] ||
        fail "podman-hpc $PHPC_VERSION installed, but $PHPC_VENV/bin lacks podman-hpc, hook_tool or fuse-overlayfs-wrap"
    [[ -d $PHPC_VENV/etc/podman_hpc/modules.d ]] ||
        fail "podman-hpc $PHPC_VERSION installed, but $PHPC_VENV/etc/podman_hpc/modules.d is missing"
}

# phpc_mksquashfs FILE: the mksquashfs.static stand-in (see the top of this file).
phpc_mksquashfs() {
    local out=$1 pack=$GL_TMP/mksq-pack lib
    rm -rf "$pack"
    mkdir -p "$pack"
    cp -L "$(command -v mksquashfs)" "$pack/mksquashfs"
    while read -r lib; do
        cp -L "$lib" "$pack/"
    done < <(ldd "$(command -v mksquashfs)" | sed -nE 's/.*=> (\/[^ ]+) .*/\1/p')
    lib=$(ldd "$(command -v mksquashfs)" | sed -nE 's/^[[:space:]]*(\/[^ ]*ld-linux[^ ]*) .*/\1/p' | head -n 1)
    [[ -n $lib ]] || fail "cannot find mksquashfs's dynamic loader in 'ldd $(command -v mksquashfs)'"
    cp -L "$lib" "$pack/ld.so"
    # podman-hpc 1.2.2 passes '-xattrs-exclude security.capability', which mksquashfs has from 4.6
    # on (Debian 12 has 4.5.1: "invalid option"); an older one gets the arguments without it.
    local drop=0
    mksquashfs -help 2>&1 | grep -q -- -xattrs-exclude || drop=1
    # shellcheck disable=SC2016 # expanded when the stand-in runs
    printf '%s\n' '#!/bin/sh' \
        '# mksquashfs.static stand-in written by tests/e2e/lib/podman_hpc.sh: the host mksquashfs with its libraries.' \
        "drop=$drop" \
        'n=$#; skip=0' \
        'for a do if [ $skip = 1 ]; then skip=0; elif [ $drop = 1 ] && [ "$a" = -xattrs-exclude ]; then skip=1; else set -- "$@" "$a"; fi; done' \
        'shift $n; d=/sqout/.galley-mksquashfs.$$' \
        'mkdir -p "$d" && tail -n +10 "$0" | tar -xzf - -C "$d" || { rm -rf "$d"; exit 1; }' \
        '"$d/ld.so" --library-path "$d" "$d/mksquashfs" "$@"; rc=$?' \
        'rm -rf "$d"; exit $rc' >"$out"
    # shellcheck disable=SC2016 # the stand-in's own text
    [[ $(sed -n 9p "$out") == 'rm -rf "$d"; exit $rc' ]] || fail "phpc_mksquashfs: the stand-in's header is not 9 lines"
    tar -C "$pack" -czf - . >>"$out"
    chmod +x "$out"
    rm -rf "$pack"
}

# phpc_setup: the private configuration (see the top of this file); exports PODMANHPC_CONFIG_FILE,
# SQUASH_DIR and USER, puts podman-hpc on PATH. Call after image_need and phpc_install.
phpc_setup() {
    PHPC_DIR=$GL_TMP/podman-hpc
    PHPC_HOST=$GL_TMP/fakehost
    local etc=$PHPC_DIR/etc
    mkdir -p "$PHPC_DIR/bin" "$PHPC_DIR/config" "$PHPC_HOST"
    cp -R "$PHPC_VENV/etc/podman_hpc" "$etc"
    rm -f "$etc/podman_hpc.yaml" # the package's sample, with /usr/bin and /etc paths; ours is below
    cp -R "$etc" "$PHPC_DIR/etc-test"
    # The host side of nccl.yaml's copy rules, under the fake host tree (only these lines change).
    sed -i -E "/^copy:/,/^[^ ]/ s#^(  - )(/[^:]*):#\1$PHPC_HOST\2:#" "$PHPC_DIR/etc-test/modules.d/nccl.yaml"
    grep -qF -- "- $PHPC_HOST/opt/cray/libfabric/" "$PHPC_DIR/etc-test/modules.d/nccl.yaml" ||
        fail "could not point nccl.yaml's copy rules at the fake host tree ($PHPC_DIR/etc-test/modules.d/nccl.yaml)"
    # openmpi-pmix.yaml asks for --userns=keep-id, which rootful podman refuses ("keep-id is only
    # supported in rootless mode"); NERSC's users run rootless, this test runs as root.
    if [[ $(id -u) -eq 0 ]]; then
        sed -i '/^  - --userns=keep-id$/d' "$PHPC_DIR/etc-test/modules.d/openmpi-pmix.yaml"
    fi
    "$PHPC_VENV/bin/python" -m podman_hpc.configure_hooks --hooksd "$PHPC_DIR/hooks.d" >/dev/null ||
        fail "podman-hpc's configure_hooks could not write $PHPC_DIR/hooks.d"
    phpc_mksquashfs "$PHPC_DIR/mksquashfs.static"
    cat >"$PHPC_DIR/podman_hpc.yaml" <<EOF
# written by tests/e2e/lib/podman_hpc.sh for one test run
podman_bin: "$IMAGE_CACHE/bin/podman"
mount_program: "$PHPC_VENV/bin/fuse-overlayfs-wrap"
modules_dir: "$etc/modules.d"
hooks_dir: "$PHPC_DIR/hooks.d"
graph_root: "$IMAGE_CACHE/storage"
run_root: "$IMAGE_CACHE/run"
config_home: "$PHPC_DIR/config"
mksquashfs_bin: "$PHPC_DIR/mksquashfs.static"
EOF
    # podman-hpc looks for podman and fuse-overlayfs-wrap on PATH before it reads its config file
    # ("No fuse-overlayfs-wrap binary found in PATH... Exiting"): the venv's bin goes on PATH, last,
    # so that its python does not shadow the system's.
    ln -sf "$PHPC_VENV/bin/podman-hpc" "$PHPC_DIR/bin/podman-hpc"
    PATH=$PHPC_DIR/bin:$PATH:$PHPC_VENV/bin
    export PATH PODMANHPC_CONFIG_FILE=$PHPC_DIR/podman_hpc.yaml SQUASH_DIR=$PHPC_DIR/squash
    export USER=${USER:-$(id -un)}
    unset PODMANHPC_MODULES_DIR PODMANHPC_GRAPH_ROOT PODMANHPC_RUN_ROOT PODMANHPC_ADDITIONAL_STORES
    phpc_node_setup
    # If the test is killed without its EXIT trap (ctest's timeout sends SIGKILL), the watchdog
    # still removes the containers and the fuse mounts once this shell is gone.
    (
        trap '' INT TERM
        while kill -0 "$$" 2>/dev/null; do sleep 1; done
        phpc_cleanup
    ) </dev/null >/dev/null 2>&1 &
    disown $! 2>/dev/null || true
}

# PHPC_NODE: a command prefix for what a compute node sees: an empty local store (its /tmp), the
# squash directory as podman-hpc's additional image store. Images reach it only through
# `podman-hpc migrate`. PHPC_TEST_MODULES: the prefix that selects $PHPC_DIR/etc-test's modules.
phpc_node_setup() {
    mkdir -p "$PHPC_DIR/node/storage" "$PHPC_DIR/node/run"
    PHPC_NODE=(env PODMANHPC_GRAPH_ROOT="$PHPC_DIR/node/storage" PODMANHPC_RUN_ROOT="$PHPC_DIR/node/run")
    PHPC_TEST_MODULES=(env PODMANHPC_MODULES_DIR="$PHPC_DIR/etc-test/modules.d")
}

# phpc_fuse_mounts: mount points under $PHPC_DIR, deepest first.
phpc_fuse_mounts() {
    [[ -n $PHPC_DIR ]] || return 0
    awk -v d="$PHPC_DIR/" 'index($2, d) == 1 { print $2 }' /proc/mounts | awk '{ print length, $0 }' |
        sort -rn | cut -d' ' -f2-
}

# phpc_cleanup: see the top of this file. Idempotent; never fails.
phpc_cleanup() {
    [[ -n $PHPC_DIR && -d $PHPC_DIR ]] || return 0
    local root m pid i
    local -a ids
    for root in "$PHPC_DIR/node" ""; do
        local args=()
        [[ -n $root ]] && args=(--root "$root/storage" --runroot "$root/run")
        [[ -z $root || -d $root ]] || continue
        read -r -d '' -a ids < <(timeout 30 podman "${args[@]}" ps -aq --filter "label=$PHPC_LABEL" 2>/dev/null) || true
        ((${#ids[@]} == 0)) || timeout 60 podman "${args[@]}" rm -f "${ids[@]}" >/dev/null 2>&1 || true
    done
    for ((i = 0; i < 3; i++)); do
        while read -r m; do
            [[ -n $m ]] || continue
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done < <(phpc_fuse_mounts)
        [[ -z $(phpc_fuse_mounts) ]] && break
        sleep 1
    done
    for pid in $(pgrep -f "fuse-overlayfs-wrap wait" 2>/dev/null || true); do
        tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$PHPC_DIR/" && kill "$pid" 2>/dev/null
    done
    if [[ -n $(phpc_fuse_mounts) ]]; then
        echo "[$GL_TEST_NAME] warning: still mounted under $PHPC_DIR: $(phpc_fuse_mounts | tr '\n' ' ')" >&2
        return 0
    fi
    rm -rf "$PHPC_DIR"
}
