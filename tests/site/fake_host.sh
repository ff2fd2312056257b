# shellcheck shell=bash
# shellcheck disable=SC2034  # a library: the tests read FH_PODMAN_NCCL_ENV, REPORT, NLINES
# fake_host.sh: fake host trees for the site-hook tests (tests/e2e/test_site_*.sh). Source it
# after tests/e2e/lib/common.sh.
#
#   fh_new perlmutter-podman          # a fresh tree; site/ installed at ROOT/opt/galley/site
#   fh_touch /dev/cxi0 /usr/lib64/libcxi.so.1
#   fh_gpus 4                         # /dev/nvidia0..3 and /dev/nvidiactl
#   fh_mounts "lus /pscratch lustre rw 0 0"
#   fh_run SLURM_LOCALID=1 NERSC_HOST=perlmutter   # entrypoint runs `env`; sets RC OUT ERR, FH_ENV
#   fh_expect NCCL_NET "AWS Libfabric"; fh_expect_unset CUDA_VISIBLE_DEVICES
#
# The entrypoint runs under `env -i`: only PATH, the GALLEY_HOOKS_* test settings and the
# variables given reach it, whatever the machine running the tests has set.

FH_ROOT=""
declare -A FH_ENV=()

# fh_new NAME: a fresh fake root under GL_TMP, with site/ copied where the image puts it.
fh_new() {
    FH_ROOT=$GL_TMP/$1
    rm -rf "$FH_ROOT"
    mkdir -p "$FH_ROOT/opt/galley" "$FH_ROOT/tmp" "$FH_ROOT/proc" "$FH_ROOT/dev"
    cp -R "$GALLEY_SRC/site" "$FH_ROOT/opt/galley/site"
    : >"$FH_ROOT/proc/mounts"
}

# fh_touch PATH...: empty files (stub .so files, device entries) in the fake root.
fh_touch() {
    local p
    for p in "$@"; do
        mkdir -p "$FH_ROOT${p%/*}"
        : >"$FH_ROOT$p"
    done
}

# fh_dir PATH...: directories in the fake root.
fh_dir() {
    local p
    for p in "$@"; do mkdir -p "$FH_ROOT$p"; done
}

# fh_write PATH TEXT: a file with TEXT (a line) in the fake root.
fh_write() {
    mkdir -p "$FH_ROOT${1%/*}"
    printf '%s\n' "$2" >"$FH_ROOT$1"
}

# fh_gpus N: N GPU device entries.
fh_gpus() {
    local i
    fh_touch /dev/nvidiactl /dev/nvidia-uvm
    for ((i = 0; i < $1; i++)); do fh_touch "/dev/nvidia$i"; done
}

# fh_mounts LINE...: the fake /proc/mounts.
fh_mounts() { printf '%s\n' "$@" >"$FH_ROOT/proc/mounts"; }

# fh_podman_hpc_nccl: what `podman-hpc run --gpu --nccl` leaves in a container on Perlmutter:
# the plugin and its deps, host libfabric and libcxi, /dev/cxi*, /run/.containerenv.
fh_podman_hpc_nccl() {
    fh_touch /run/.containerenv \
        /opt/udiImage/modules/nccl-plugin/lib/libnccl-net.so \
        /opt/udiImage/modules/nccl-plugin/deps/lib/libssl.so.1.1 \
        /opt/cray/libfabric/1.15.2.0/lib64/libfabric.so.1 \
        /usr/lib64/libcxi.so.1 /dev/cxi0 /dev/cxi1
    fh_dir /opt/udiImage/modules/gpu
}

# The variables podman-hpc's --nccl module sets (it replaces LD_LIBRARY_PATH).
FH_PODMAN_NCCL_ENV=(
    LD_LIBRARY_PATH=/opt/udiImage/modules/nccl-plugin/lib:/opt/udiImage/modules/nccl-plugin/deps/lib
    FI_CXI_DISABLE_HOST_REGISTER=1 FI_MR_CACHE_MONITOR=userfaultfd NCCL_CROSS_NIC=1
    NCCL_SOCKET_IFNAME=hsn NCCL_NET_GDR_LEVEL=PHB
)

# fh_podman_hpc_122_nccl: what podman-hpc 1.2.2's own modules.d/nccl.yaml leaves in a container (as
# tests/e2e/test_image_podman_hpc.sh sees with the real tool): the plugin copied into
# nccl-plugin/lib, the host's libfabric and libcxi copied into nccl-plugin/deps/lib (not bound
# at their host paths), no /dev/cxi* (only the MPI modules bind those), no modules/gpu folder.
fh_podman_hpc_122_nccl() {
    local d=/opt/udiImage/modules/nccl-plugin
    fh_touch /run/.containerenv "$d/lib/libnccl-net.so" "$d/deps/lib/libfabric.so.1" \
        "$d/deps/lib/libcxi.so.1" /etc/ld.so.conf.d/02-nccl.conf
}

# The variables `podman-hpc run` (1.2.2) passes: PODMANHPC_MODULES_DIR always, ENABLE_<MODULE>=1 per
# module flag, and nccl.yaml's additional_args (its LD_LIBRARY_PATH ends in /usr/lib64).
FH_PODMAN_HPC_122=(PODMANHPC_MODULES_DIR=/etc/podman_hpc/modules.d)
FH_PODMAN_HPC_122_NCCL_ENV=(
    "${FH_PODMAN_HPC_122[@]}" ENABLE_NCCL=1
    LD_LIBRARY_PATH=/opt/udiImage/modules/nccl-plugin/lib:/opt/udiImage/modules/nccl-plugin/deps/lib:/usr/lib64
    FI_CXI_DISABLE_HOST_REGISTER=1 FI_MR_CACHE_MONITOR=userfaultfd NCCL_CROSS_NIC=1
    NCCL_SOCKET_IFNAME=hsn NCCL_NET_GDR_LEVEL=PHB
)

# fh_run [VAR=VALUE ...] [-- CMD ...]: run the installed entrypoint in the fake root with only
# those variables; CMD defaults to `env`, whose output is parsed into FH_ENV.
fh_run() {
    local -a vars=() cmd=(env)
    while (($#)) && [[ $1 != -- ]]; do
        vars+=("$1")
        shift
    done
    if (($#)); then
        shift
        cmd=("$@")
    fi
    run env -i PATH="${FH_PATH:-/usr/bin:/bin}" GALLEY_HOOKS_ROOT="$FH_ROOT" GALLEY_HOOKS_STRICT=1 \
        TMPDIR="$FH_ROOT/tmp" "${vars[@]}" "$FH_ROOT/opt/galley/site/galley-entrypoint" "${cmd[@]}"
    FH_ENV=()
    local line
    while IFS= read -r line; do
        if [[ $line == [A-Za-z_]*=* ]]; then FH_ENV[${line%%=*}]=${line#*=}; fi
    done <<<"$OUT"
}

# fh_ok: the last fh_run exited 0 and printed no warning or error.
fh_ok() {
    assert_rc 0
    if [[ -n $ERR ]]; then
        show_run
        fail "expected no message on stderr"
    fi
}

# fh_expect NAME VALUE: the command saw NAME=VALUE.
fh_expect() {
    if [[ ! -v FH_ENV[$1] ]]; then
        show_run
        fail "expected $1=$2 in the command's environment; it is not set"
    fi
    if [[ ${FH_ENV[$1]} != "$2" ]]; then
        show_run
        fail "expected $1=$2 in the command's environment, found $1=${FH_ENV[$1]}"
    fi
}

# fh_expect_unset NAME...: the command did not see NAME.
fh_expect_unset() {
    local n
    for n in "$@"; do
        if [[ -v FH_ENV[$n] ]]; then
            show_run
            fail "expected $n unset in the command's environment, found $n=${FH_ENV[$n]}"
        fi
    done
}

# fh_expect_prefix_unset PREFIX...: no variable starting with PREFIX reached the command.
fh_expect_prefix_unset() {
    local p n
    for p in "$@"; do
        for n in "${!FH_ENV[@]}"; do
            if [[ $n == "$p"* ]]; then
                show_run
                fail "expected no $p* variable, found $n=${FH_ENV[$n]}"
            fi
        done
    done
}

# fh_report: the wiring report the last run wrote (GALLEY_WIRING_FILE), in REPORT.
fh_report() {
    local f=${FH_ENV[GALLEY_WIRING_FILE]:-}
    [[ -n $f && -r $f ]] || fail "no wiring report: GALLEY_WIRING_FILE='$f'"
    REPORT=$(<"$f")
}

# fh_stderr_lines: the number of lines the last run printed on stderr, in NLINES.
fh_stderr_lines() {
    NLINES=0
    [[ -z $ERR ]] || NLINES=$(printf '%s\n' "$ERR" | wc -l)
}
