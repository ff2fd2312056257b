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

# Debian/Ubuntu packages the build and the tests need. gfortran brings libgfortran.a, which
# the static OpenBLAS (its LAPACK part) needs; libopenblas-dev does not pull it in.
PACKAGES=(
    build-essential cmake pkg-config
    libyaml-dev libhdf5-dev libaec-dev zlib1g-dev
    libopenblas-openmp-dev gfortran
    libopenmpi-dev openmpi-bin
    libcmocka-dev python3 file
    python3-venv chromium  # tests/e2e/test_log_*: a venv for TensorBoard's loader; rendering the report
)

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
  help                        this text

environment: GALLEY_CMAKE_ARGS (extra cmake arguments), GALLEY_JOBS (build jobs)
EOF
}

# ---- helpers -------------------------------------------------------------------------------

# ensure_packages: install what is missing from PACKAGES (root on Debian/Ubuntu), or say how.
PACKAGES_OK=0
ensure_packages() {
    [[ $PACKAGES_OK == 1 ]] && return 0
    PACKAGES_OK=1
    if [[ ! -f /etc/debian_version ]] || ! command -v dpkg-query >/dev/null 2>&1; then
        say "not Debian/Ubuntu: not installing packages; the build needs the equivalents of: ${PACKAGES[*]}"
        return 0
    fi
    local missing=() p
    for p in "${PACKAGES[@]}"; do
        if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
            missing+=("$p")
        fi
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        say "packages: all ${#PACKAGES[@]} present"
        return 0
    fi
    if [[ $(id -u) -ne 0 ]]; then
        echo "build.sh: missing packages: ${missing[*]}" >&2
        echo "build.sh: install them with:" >&2
        echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 2
    fi
    say "installing missing packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    local lock=(-o DPkg::Lock::Timeout=300)
    apt-get "${lock[@]}" update -q
    apt-get "${lock[@]}" install -y -q --no-install-recommends "${missing[@]}"
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
    build_release
    build_asan
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
    cmd_build
    local begin='<!-- recipe-reference:begin -->' end='<!-- recipe-reference:end -->' ref
    ref=$(mktemp)
    "$BUILD_DIR/galley" help recipe >"$ref"
    # Keep everything outside the markers; replace what is between them.
    awk -v b="$begin" -v e="$end" -v f="$ref" '
        $0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
        $0 == e { skip = 0 }
        !skip { print }' README.md >README.md.new
    rm -f "$ref"
    grep -qxF "$begin" README.md.new && grep -qxF "$end" README.md.new || {
        rm -f README.md.new
        die "README.md lacks the recipe-reference markers"
    }
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
