#!/usr/bin/env bash
# build.sh: build, test and run Galley. `./build.sh help` for the commands.
#
# One function per command: cmd_<name>. To add a command, write cmd_<name> and a line in
# usage(); the dispatcher at the bottom finds it.
#
# Environment:
#   GALLEY_CMAKE_ARGS   extra arguments for every cmake configure (e.g. "-DGALLEY_CUDA=OFF")
#   GALLEY_JOBS         parallel build jobs (default: nproc)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$ROOT"

BUILD_DIR=build
ASAN_DIR=build-asan
JOBS=${GALLEY_JOBS:-$(nproc 2>/dev/null || echo 2)}

# Debian/Ubuntu packages. BUILD_PACKAGES build galley (all the image's build stage needs); gfortran
# brings libgfortran.a, which the static OpenBLAS (its LAPACK part) needs. TEST_PACKAGES are what
# the test suite adds: a Python venv for TensorBoard/h5py readers, Chromium to render reports,
# Slurm and munge for the srun tests, h5diff to compare checkpoints, shellcheck for the shell files, podman, buildah and
# debootstrap for the image tests, and Debian's PyTorch with h5py for the transformer parity test.
BUILD_PACKAGES=(
    build-essential cmake pkg-config
    libyaml-dev libhdf5-dev libaec-dev zlib1g-dev
    libopenblas-openmp-dev gfortran
    libopenmpi-dev openmpi-bin
    libcmocka-dev python3 file
)
TEST_PACKAGES=(
    python3-venv chromium
    slurm-wlm munge hdf5-tools
    runc  # podman's default crun fails on hybrid cgroups; the image tests use runc there
    shellcheck procps  # procps: pgrep, for the failing-rank test
    podman buildah debootstrap
    fuse-overlayfs squashfuse squashfs-tools inotify-tools  # podman-hpc's squashed images (test_image_podman_hpc)
    python3-torch python3-h5py python3-numpy  # tests/e2e/test_transformer_parity.sh (/usr/bin/python3)
    iproute2  # ip netns, veth, bridge: the multi-node tests' namespaces (tests/e2e/lib/nodes.sh)
)
PACKAGES=("${BUILD_PACKAGES[@]}")

say() { echo "build.sh: $*"; }
die() {
    echo "build.sh: error: $*" >&2
    exit 1
}

usage() {
    cat <<'EOF'
usage: ./build.sh [COMMAND] [ARGS...]

commands:
  build                       install missing packages (root on Debian/Ubuntu), then build
                              the Release binary into build/ (the default command)
  train [RECIPE] [key=value]  build, then run `build/galley train RECIPE key=value...`
                              (RECIPE defaults to recipes/quickstart.yaml)
  test                        build build/ (Release) and build-asan/ (ASan+UBSan), run all
                              tests of both; the last line is `N passed, N failed, N skipped`
  asan                        build only the sanitizer build into build-asan/
  docs                        rewrite README.md's recipe reference from `galley help recipe`
  clean                       remove the build directories
  image [--cpu] [--dev] [--base IMAGE] [--tag TAG]
                              build the container image with podman-hpc, podman or buildah:
                              the Containerfile on NGC CUDA bases (default tag localhost/galley:latest),
                              --cpu on Debian (images/cpu/build-args; tag localhost/galley:cpu), --dev
                              the development image (images/dev/); --base pins the build base
  push REGISTRY/NAME:TAG [--image LOCAL] [--OPTION=VALUE...]
                              push LOCAL (default localhost/galley:latest) for shifterimg/podman-hpc
                              pull; --OPTION=VALUE go to the tool's push (--tls-verify=false, --creds=...)
  help                        this text

environment: GALLEY_CMAKE_ARGS (extra cmake arguments), GALLEY_JOBS (build jobs),
             GALLEY_CONTAINER_TOOL (podman-hpc, podman or buildah for image/push)
EOF
}

# ---- helpers -------------------------------------------------------------------------------

# missing_packages NAME...: sets MISSING to those of NAME... that dpkg does not list as installed.
missing_packages() {
    MISSING=()
    local p
    for p in "$@"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            MISSING+=("$p")
        fi
    done
}

# debian_like: 0 on Debian/Ubuntu (dpkg and apt), where build.sh installs what is missing.
debian_like() { [[ -f /etc/debian_version ]] && command -v dpkg-query >/dev/null 2>&1; }

# need_root_for NAME...: exit 2 with the apt-get line to run, unless root.
need_root_for() {
    [[ $(id -u) -eq 0 ]] && return 0
    echo "build.sh: missing packages: $*" >&2
    echo "build.sh: install them with:" >&2
    echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $*" >&2
    exit 2
}

# apt_install NAME...: apt-get install (after one apt-get update per run of build.sh).
APT_UPDATED=0
apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    local lock=(-o DPkg::Lock::Timeout=300)
    if [[ $APT_UPDATED == 0 ]]; then
        apt-get "${lock[@]}" update -q
        APT_UPDATED=1
    fi
    apt-get "${lock[@]}" install -y -q --no-install-recommends "$@"
}

# packages_to_install WHAT NAME...: MISSING = those of NAME... not installed, root checked for
# them; status 1, having said why, when there is nothing to install or this is not Debian/Ubuntu.
# WHAT ("the build", "the tests") names who needs them.
packages_to_install() {
    local what=$1
    shift
    if ! debian_like; then
        say "not Debian/Ubuntu: not installing packages; $what needs the equivalents of: $*"
        return 1
    fi
    missing_packages "$@"
    if [[ ${#MISSING[@]} -eq 0 ]]; then
        say "packages for $what: all $# present"
        return 1
    fi
    need_root_for "${MISSING[@]}"
}

# ensure_packages: install what is missing from PACKAGES (root on Debian/Ubuntu), or say how.
PACKAGES_OK=0
ensure_packages() {
    [[ $PACKAGES_OK == 1 ]] && return 0
    PACKAGES_OK=1
    packages_to_install "the build" "${PACKAGES[@]}" || return 0
    say "installing missing packages: ${MISSING[*]}"
    apt_install "${MISSING[@]}"
}

# test_packages_start: install what is missing from TEST_PACKAGES in the background, while galley
# builds (apt is mostly download and unpacking; on a fresh CI machine it took about 4 of CI's 28
# minutes before the build started). Its output goes to TEST_APT_LOG; test_packages_wait joins it.
TEST_APT_PID=
TEST_APT_LOG=
test_packages_start() {
    packages_to_install "the tests" "${TEST_PACKAGES[@]}" || return 0
    mkdir -p "$ROOT/$BUILD_DIR"
    TEST_APT_LOG=$ROOT/$BUILD_DIR/apt-test-packages.log
    say "installing the tests' missing packages in the background while building (log: $TEST_APT_LOG): ${MISSING[*]}"
    apt_install "${MISSING[@]}" >"$TEST_APT_LOG" 2>&1 </dev/null &
    TEST_APT_PID=$!
    # build.sh never exits (a failed build, say) while that apt-get is still running.
    trap 'test_packages_wait quiet' EXIT
}

# test_packages_wait check|quiet: wait for test_packages_start's apt-get; check: exit 1 with its
# log's end when it failed; quiet: only wait (on build.sh's way out).
test_packages_wait() {
    [[ -n $TEST_APT_PID ]] || return 0
    local pid=$TEST_APT_PID rc=0
    TEST_APT_PID=
    wait "$pid" || rc=$?
    [[ $1 == quiet ]] && return 0
    if [[ $rc -ne 0 ]]; then
        tail -n 30 "$TEST_APT_LOG" >&2
        die "installing the tests' packages failed (exit $rc; last lines above, full log $TEST_APT_LOG)"
    fi
    say "test packages installed (log: $TEST_APT_LOG)"
}

# find_nvcc: put /usr/local/cuda/bin on PATH when nvcc is only there.
find_nvcc() {
    if ! command -v nvcc >/dev/null 2>&1 && [[ -x /usr/local/cuda/bin/nvcc ]]; then
        export PATH="/usr/local/cuda/bin:$PATH"
        say "nvcc: using /usr/local/cuda/bin/nvcc"
    fi
}

# configure_and_build DIR [cmake args...]
configure_and_build() {
    local dir=$1
    shift
    local extra=()
    if [[ -n ${GALLEY_CMAKE_ARGS:-} ]]; then
        read -r -a extra <<<"$GALLEY_CMAKE_ARGS"
    fi
    local log="$ROOT/$dir/configure.log"
    mkdir -p "$ROOT/$dir"
    say "configuring $dir ($*${extra[*]:+ ${extra[*]}})"
    cmake -S "$ROOT" -B "$ROOT/$dir" "$@" "${extra[@]}" >"$log" 2>&1 || {
        cat "$log" >&2
        die "cmake configure of $dir failed (log above, also in $dir/configure.log)"
    }
    # Show galley's status lines and any CMake warning (the rest stays in the log).
    awk '/^-- galley/ { sub(/^-- /, "build.sh: "); print; next }
         /^CMake .*Warning/ { w = 1; body = 0; print; next }
         w && /^$/ { if (body) w = 0; next }
         w { print; body = 1 }' "$log"
    say "building $dir (-j$JOBS)"
    cmake --build "$ROOT/$dir" -j"$JOBS"
}

# build_info DIR KEY: a value from DIR/galley-build-info.txt.
build_info() {
    sed -n "s/^$2=//p" "$ROOT/$1/galley-build-info.txt" 2>/dev/null | head -n 1
}

build_release() {
    ensure_packages
    find_nvcc
    configure_and_build "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DGALLEY_SANITIZE=OFF
    if [[ -x $BUILD_DIR/galley ]]; then
        say "binary: $ROOT/$BUILD_DIR/galley"
    else
        say "no binary yet (src/main.c missing?)"
    fi
    if [[ $(build_info "$BUILD_DIR" cuda) == 1 ]]; then
        say "CUDA backend: built ($(build_info "$BUILD_DIR" cuda_reason))"
    else
        say "CUDA backend: not built ($(build_info "$BUILD_DIR" cuda_reason))"
    fi
}

build_asan() {
    ensure_packages
    configure_and_build "$ASAN_DIR" -DCMAKE_BUILD_TYPE=Debug -DGALLEY_SANITIZE=ON
    say "sanitizer binary: $ROOT/$ASAN_DIR/galley"
}

# ---- commands ------------------------------------------------------------------------------

cmd_build() {
    [[ $# -eq 0 ]] || die "build takes no arguments (got: $*)"
    build_release
}

cmd_train() {
    local recipe=recipes/quickstart.yaml
    if [[ $# -gt 0 && $1 != *=* ]]; then
        recipe=$1
        shift
    fi
    build_release
    [[ -x $BUILD_DIR/galley ]] || die "$BUILD_DIR/galley was not built"
    say "running: $BUILD_DIR/galley train $recipe${*:+ $*}"
    exec "$ROOT/$BUILD_DIR/galley" train "$recipe" "$@"
}

cmd_test() {
    [[ $# -eq 0 ]] || die "test takes no arguments (got: $*)"
    ensure_packages
    test_packages_start
    build_release
    build_asan
    test_packages_wait check
    say "running tests: tests/run.sh $BUILD_DIR $ASAN_DIR"
    local rc=0
    bash "$ROOT/tests/run.sh" "$BUILD_DIR" "$ASAN_DIR" || rc=$?
    exit "$rc"
}

cmd_asan() {
    [[ $# -eq 0 ]] || die "asan takes no arguments (got: $*)"
    build_asan
}

cmd_docs() {
    [[ $# -eq 0 ]] || die "docs takes no arguments (got: $*)"
    build_release
    local begin='<!-- recipe-reference:begin -->' end='<!-- recipe-reference:end -->' ref
    ref=$(mktemp)
    "$BUILD_DIR/galley" help recipe >"$ref"
    # Keep everything outside the markers; replace what is between them.
    awk -v b="$begin" -v e="$end" -v f="$ref" '
        $0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
        $0 == e { skip = 0 }
        !skip { print }' README.md >README.md.new
    rm -f "$ref"
    if ! grep -qxF "$begin" README.md.new || ! grep -qxF "$end" README.md.new; then
        rm -f README.md.new
        die "README.md lacks the recipe-reference markers"
    fi
    mv README.md.new README.md
    say "README.md recipe reference updated"
}

cmd_clean() {
    [[ $# -eq 0 ]] || die "clean takes no arguments (got: $*)"
    local dirs=()
    shopt -s nullglob
    dirs=("$BUILD_DIR" build-*/)
    shopt -u nullglob
    say "removing ${dirs[*]}"
    rm -rf -- "${dirs[@]}"
}

# ---- images: cmd_image, cmd_push -------------------------------------------------------------

CTR_TOOL=""
CTR_CONF=""     # a temporary containers.conf, when this machine needs one
IMAGE_IID=""    # a temporary --iidfile

# ctr_pick: the container tool. podman-hpc first (NERSC's podman: what it builds can be migrated to
# compute nodes), then podman, then buildah; GALLEY_CONTAINER_TOOL names one.
ctr_pick() {
    local t
    for t in ${GALLEY_CONTAINER_TOOL:-podman-hpc podman buildah}; do
        if command -v "$t" >/dev/null 2>&1; then
            CTR_TOOL=$t
            return 0
        fi
    done
    die "no ${GALLEY_CONTAINER_TOOL:-podman-hpc, podman or buildah} found; install podman (apt-get install podman runc) or buildah"
}

# ctr_build ARGS...: build an image (buildah calls it bud). Docker-format images: every registry,
# shifter's image gateway and podman-hpc read them. podman-hpc build adds
# --env PODMANHPC_MODULES_DIR=<its modules.d>, which would stay in the image's ENV (podman-hpc 1.2.2)
# and tell the entrypoint "podman-hpc" wherever the image runs: it is unset in the final image.
ctr_build() {
    if [[ $CTR_TOOL == buildah ]]; then
        buildah bud --layers --format docker "$@"
    elif [[ $CTR_TOOL == podman-hpc ]]; then
        podman-hpc build --layers --format docker --unsetenv PODMANHPC_MODULES_DIR "$@"
    else
        "$CTR_TOOL" build --layers --format docker "$@"
    fi
}

# ctr_exec IMAGE CMD...: run CMD in a throw-away container of IMAGE (its entrypoint bypassed).
ctr_exec() {
    local image=$1 c rc=0
    shift
    if [[ $CTR_TOOL == buildah ]]; then
        c=$(buildah from --pull-never -q "$image") || return 1
        buildah run "$c" -- "$@" || rc=$?
        buildah rm "$c" >/dev/null
        return "$rc"
    fi
    "$CTR_TOOL" run --rm --pull never --entrypoint "$1" "$image" "${@:2}"
}

# ctr_pull IMAGE: pull IMAGE unless it is already local.
ctr_pull() {
    if [[ $CTR_TOOL == buildah ]]; then
        buildah inspect --type image "$1" >/dev/null 2>&1 && return 0
    else
        "$CTR_TOOL" image exists "$1" 2>/dev/null && return 0
    fi
    say "pulling $1"
    "$CTR_TOOL" pull "$1" >/dev/null || die "cannot pull $1 (a site pins its own base with --base IMAGE)"
}

# ctr_setup IMAGE: make sure containers of IMAGE start (the build's RUN steps need that). Where the
# default runtime fails (crun on hybrid cgroups; ulimits above the hard limits), use runc and capped
# ulimits through a temporary containers.conf, for this command only.
ctr_setup() {
    local image=$1 log n u
    ctr_pull "$image"
    log=$(mktemp)
    if ctr_exec "$image" true 2>"$log"; then
        rm -f "$log"
        return 0
    fi
    if [[ -n ${CONTAINERS_CONF:-} ]]; then
        cat "$log" >&2
        die "$CTR_TOOL cannot start a container of $image with CONTAINERS_CONF=$CONTAINERS_CONF (error above)"
    fi
    command -v runc >/dev/null 2>&1 || {
        cat "$log" >&2
        die "$CTR_TOOL cannot start a container of $image (error above); installing runc (apt-get install runc) may help"
    }
    n=$(ulimit -Hn)
    u=$(ulimit -Hu)
    [[ $n == unlimited || $n -gt 1048576 ]] && n=1048576
    [[ $u == unlimited || $u -gt 32768 ]] && u=32768
    CTR_CONF=$(mktemp --suffix=.conf)
    printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nruntime = "runc"\n' \
        "$n" "$n" "$u" "$u" >"$CTR_CONF"
    export CONTAINERS_CONF=$CTR_CONF
    if ! ctr_exec "$image" true 2>>"$log"; then
        cat "$log" >&2
        die "$CTR_TOOL cannot start a container of $image, with the default runtime or with runc (errors above)"
    fi
    say "$CTR_TOOL's default runtime fails here ($(grep -m1 -i error "$log" || head -n1 "$log"))"
    say "using runc and ulimits nofile=$n nproc=$u for this build; to run containers here, point"
    say "CONTAINERS_CONF at a file with the same settings:"
    sed 's/^/    /' "$CTR_CONF"
    rm -f "$log"
}

# image_version KEY: KEY's value in the build stage's image-versions (IMAGE_VERSIONS).
IMAGE_VERSIONS=""
image_version() {
    sed -n "s/^$1=//p" <<<"$IMAGE_VERSIONS" | head -n 1
}

# image_tag_size TAG: the image's size as the tool prints it.
image_tag_size() {
    "$CTR_TOOL" images --format '{{.Size}}' "$1" 2>/dev/null | head -n 1
}

# read_build_args FILE: KEY=VALUE lines (comments and blank lines skipped) into IMAGE_ARGS.
declare -A IMAGE_ARGS=()
read_build_args() {
    local line
    while IFS= read -r line || [[ -n $line ]]; do
        [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
        [[ $line == *=* ]] || die "$1: '$line' is not KEY=VALUE"
        IMAGE_ARGS[${line%%=*}]=${line#*=}
    done <"$1"
}

cmd_image() {
    local cpu=0 dev=0 base="" tag="" t0
    while [[ $# -gt 0 ]]; do
        case $1 in
            --cpu) cpu=1 ;;
            --dev) dev=1 ;;
            --base | --tag)
                [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"
                if [[ $1 == --base ]]; then base=$2; else tag=$2; fi
                shift ;;
            --base=*) base=${1#*=} ;;
            --tag=*) tag=${1#*=} ;;
            *) die "image: unknown argument '$1' (usage: ./build.sh image [--cpu] [--dev] [--base IMAGE] [--tag TAG])" ;;
        esac
        shift
    done
    ctr_pick
    trap 'rm -f "${CTR_CONF:-}" "${IMAGE_IID:-}"' EXIT

    # Bases: the Containerfile's defaults (NGC CUDA), images/cpu/build-args for --cpu; --base sets the
    # build base and, unless it has a -devel- name with a -runtime- twin, the runtime base too.
    local default_base
    default_base=$(sed -n 's/^ARG BUILD_BASE=//p' Containerfile)
    [[ $cpu == 1 ]] && read_build_args images/cpu/build-args
    if [[ -n $base ]]; then
        IMAGE_ARGS[BUILD_BASE]=$base
        IMAGE_ARGS[RUNTIME_BASE]=${base/-devel-/-runtime-}
    fi
    local build_base=${IMAGE_ARGS[BUILD_BASE]:-$default_base}
    local file=Containerfile target=(--target runtime)
    if [[ $dev == 1 ]]; then
        file=images/dev/Containerfile
        target=()
        IMAGE_ARGS=([BASE]=$build_base)
        tag=${tag:-localhost/galley-dev:$([[ $cpu == 1 ]] && echo cpu || echo latest)}
    else
        tag=${tag:-localhost/galley:$([[ $cpu == 1 ]] && echo cpu || echo latest)}
        IMAGE_ARGS[GALLEY_JOBS]=$JOBS
    fi
    if [[ $dev == 0 ]] && git rev-parse --git-dir >/dev/null 2>&1; then
        IMAGE_ARGS[GALLEY_GIT_HASH]=$(git rev-parse --short HEAD)
    fi
    local args=() k
    for k in "${!IMAGE_ARGS[@]}"; do
        args+=(--build-arg "$k=${IMAGE_ARGS[$k]}")
    done
    say "image $tag from $file with $CTR_TOOL (${args[*]})"
    t0=$SECONDS
    ctr_setup "$build_base"

    IMAGE_IID=$(mktemp)
    if [[ $dev == 0 ]]; then
        # The build stage first: what it was built with (CUDA, cuDNN, NCCL, Open MPI) becomes labels.
        ctr_build -f "$file" --target build --iidfile "$IMAGE_IID" "${args[@]}" . ||
            die "building the build stage of $file failed (output above)"
        IMAGE_VERSIONS=$(ctr_exec "$(cat "$IMAGE_IID")" cat /src/galley/build/image-versions) ||
            die "cannot read image-versions from the build stage"
        local revision=unknown version source=unknown
        version=$(sed -n 's/^project(galley VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
        if git rev-parse --git-dir >/dev/null 2>&1; then
            revision=$(git rev-parse HEAD)
            version+="-$(git rev-parse --short HEAD)"
            [[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || version+="-dirty"
            source=$(git remote get-url origin 2>/dev/null || echo unknown)
        fi
        args+=(--build-arg "GALLEY_VERSION=$version" --build-arg "GALLEY_REVISION=$revision"
            --build-arg "GALLEY_SOURCE=${GALLEY_IMAGE_SOURCE:-$source}"
            --build-arg "GALLEY_CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
            --build-arg "GALLEY_CUDA_VERSION=$(image_version cuda)"
            --build-arg "GALLEY_CUDNN_VERSION=$(image_version cudnn)"
            --build-arg "GALLEY_NCCL_VERSION=$(image_version nccl)"
            --build-arg "GALLEY_OPENMPI_VERSION=$(image_version openmpi)")
    fi
    ctr_build -f "$file" "${target[@]}" --iidfile "$IMAGE_IID" -t "$tag" "${args[@]}" . ||
        die "building $file failed (output above)"

    say "built $tag ($(image_tag_size "$tag")) in $((SECONDS - t0)) s with $CTR_TOOL"
    [[ $dev == 1 ]] && {
        say "use it: podman run -it --rm -v \"\$PWD:/src\" $tag, then ./build.sh build && ctest --test-dir build"
        return 0
    }
    local runner=$CTR_TOOL
    [[ $runner == buildah ]] && runner=podman
    say "try it: $runner run --rm $tag galley train recipes/quickstart.yaml"
    if [[ $CTR_TOOL == podman-hpc ]]; then
        say "compute nodes see it after: podman-hpc migrate $tag"
    else
        say "on an HPC system, build it there with podman-hpc and run: podman-hpc migrate $tag"
    fi
    say "or push it (./build.sh push REGISTRY/NAME:TAG --image $tag) and pull it on the system:"
    say "  shifterimg pull docker:REGISTRY/NAME:TAG    or    podman-hpc pull REGISTRY/NAME:TAG"
}

cmd_push() {
    local dest="" image=localhost/galley:latest extra=()
    while [[ $# -gt 0 ]]; do
        case $1 in
            --image)
                [[ $# -ge 2 && -n $2 ]] || die "--image needs a value"
                image=$2
                shift ;;
            --image=*) image=${1#*=} ;;
            --*=*) extra+=("$1") ;;   # the tool's own push options: --tls-verify=false, --creds=U:P
            -*) die "push: unknown option '$1' (usage: ./build.sh push REGISTRY/NAME:TAG [--image LOCAL] [--OPTION=VALUE for the tool's push])" ;;
            *)
                [[ -z $dest ]] || die "push takes one destination (got '$dest' and '$1')"
                dest=$1 ;;
        esac
        shift
    done
    [[ $dest == */*:* || $dest == */*@* ]] ||
        die "push needs REGISTRY/NAME:TAG (e.g. registry.example.org/lab/galley:0.1), got '${dest:-nothing}'"
    ctr_pick
    say "pushing $image to $dest with $CTR_TOOL (log in first, '$CTR_TOOL login ${dest%%/*}', if the registry asks)"
    "$CTR_TOOL" push --format v2s2 "${extra[@]}" "$image" "docker://$dest" || die "push of $image to $dest failed (output above)"
    say "pushed; on the HPC system (a private registry: shifterimg login / podman-hpc login first):"
    say "  shifterimg pull docker:$dest    then  shifter --image=docker:$dest --entrypoint galley info"
    say "  podman-hpc pull $dest           then  podman-hpc run --rm $dest galley info"
}

cmd_help() {
    usage
}

# ---- dispatch ------------------------------------------------------------------------------

cmd=${1:-build}
if [[ $# -gt 0 ]]; then
    shift
fi
if [[ $cmd == -h || $cmd == --help ]]; then
    cmd=help
fi
if [[ ! $cmd =~ ^[a-z][a-z0-9_-]*$ ]] || ! declare -F "cmd_${cmd//-/_}" >/dev/null; then
    echo "build.sh: unknown command '$cmd'" >&2
    usage >&2
    exit 2
fi
"cmd_${cmd//-/_}" "$@"
