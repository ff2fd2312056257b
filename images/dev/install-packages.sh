#!/usr/bin/env bash
# install-packages.sh BUILD_SH: install build.sh's BUILD_PACKAGES (the one list the host build, the
# image's build stage and this image share) and the tools for working on galley in a container.
# Run by images/dev/Containerfile, as root, on Debian or Ubuntu.
set -euo pipefail
build_sh=${1:?usage: install-packages.sh PATH/TO/build.sh}

# The list as build.sh defines it (a bash array assignment, copied out of the file).
# shellcheck disable=SC1090
source <(sed -n '/^BUILD_PACKAGES=(/,/^)/p' "$build_sh")
[[ ${#BUILD_PACKAGES[@]} -gt 0 ]] || {
    echo "install-packages.sh: no BUILD_PACKAGES=( ... ) list found in $build_sh" >&2
    exit 1
}
# Tests that need Chromium, Slurm or podman skip in this image; these are the tools for the rest.
tools=(python3-venv shellcheck gdb git ca-certificates less)

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${BUILD_PACKAGES[@]}" "${tools[@]}"
apt-get clean
rm -rf /var/lib/apt/lists/*
