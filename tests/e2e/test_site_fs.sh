#!/usr/bin/env bash
# test_site_fs.sh: site/hooks/fs.sh: HDF5_USE_FILE_LOCKING=FALSE when a data or checkpoint path
# is on Lustre or GPFS (site data FS_NO_LOCKING; Perlmutter adds DVS), read from a fake
# /proc/mounts: longest mount point wins, no false prefix match, escaped blanks, user value kept.
# Needs no galley binary.
set -euo pipefail
# shellcheck source=tests/e2e/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/common.sh"
# shellcheck source=tests/site/fake_host.sh
source "$GALLEY_SRC/tests/site/fake_host.sh"

fh_new fs
fh_mounts "overlay / overlay rw 0 0" \
    "10.0.0.1@o2ib:/scratch /pscratch lustre rw,flock 0 0" \
    "/dev/sda1 /pscratch/local ext4 rw 0 0" \
    "gpfs0 /global/cfs gpfs rw 0 0" \
    "dvs /global/common dvs ro 0 0" \
    "/dev/sdb1 /home ext4 rw 0 0" \
    "lus:/x /mnt/my\\040data lustre rw 0 0"

# locking_of SITE VAR=VALUE...: HDF5_USE_FILE_LOCKING as the command sees it ("-": unset), in GOT.
locking_of() {
    local site=$1
    shift
    fh_run GALLEY_SITE="$site" GALLEY_HOOKS=fs "$@"
    fh_ok
    GOT=${FH_ENV[HDF5_USE_FILE_LOCKING]--}
}

check() {
    local want=$1
    shift
    locking_of "$@"
    [[ $GOT == "$want" ]] || {
        show_run
        fail "$*: expected HDF5_USE_FILE_LOCKING=$want, got $GOT"
    }
    info "$*: HDF5_USE_FILE_LOCKING=$GOT"
}

check FALSE generic GALLEY_FS_PATHS=/pscratch/sd/u/user/data
check - generic GALLEY_FS_PATHS=/home/user/data
check - generic GALLEY_FS_PATHS=/pscratch/local/data      # a node-local disk mounted inside Lustre
check - generic GALLEY_FS_PATHS=/pscratchy/data           # not under /pscratch
check FALSE generic GALLEY_FS_PATHS=/home/u:/global/cfs/cdirs/m1234/data
check FALSE generic "GALLEY_FS_PATHS=/mnt/my data/train.h5"
check - generic GALLEY_FS_PATHS=/global/common/software
check FALSE perlmutter GALLEY_FS_PATHS=/global/common/software   # Perlmutter lists dvs
check TRUE generic GALLEY_FS_PATHS=/pscratch/data HDF5_USE_FILE_LOCKING=TRUE

fh_report
assert_contains "$REPORT" "kept HDF5_USE_FILE_LOCKING=TRUE" "wiring report"
locking_of generic GALLEY_FS_PATHS=/pscratch/data
fh_report
assert_contains "$REPORT" "/pscratch/data is on lustre (mounted at /pscratch)" "wiring report"

# The image's mount points are checked without being named: /data bound from Lustre.
fh_mounts "overlay / overlay rw 0 0" "lus:/scratch/u/data /data lustre ro 0 0"
check FALSE generic
# ... a site can name more paths (site.env FS_PATHS).
fh_mounts "overlay / overlay rw 0 0" "lus:/scratch /pscratch lustre rw 0 0"
check - generic
printf '%s\n' 'FS_PATHS=/pscratch' >>"$FH_ROOT/opt/galley/site/sites/generic/site.env"
check FALSE generic

info "PASS"
