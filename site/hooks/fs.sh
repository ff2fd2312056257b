# shellcheck shell=bash
# shellcheck disable=SC2154  # gh_* globals come from lib/hooks.sh (sourced by galley-entrypoint)
# fs.sh: HDF5_USE_FILE_LOCKING=FALSE when a data or checkpoint path is on a parallel filesystem.
# HDF5 takes fcntl locks on every file it opens; on Lustre and GPFS those fail or stall, and
# readers of a shared data set need none. Paths checked: the image's mount points /data /runs
# /ckpt, the working directory, GALLEY_FS_PATHS (colon-separated) and site.env FS_PATHS. Types:
# site.env FS_NO_LOCKING (default: lustre gpfs). The mount table is /proc/mounts (under
# GALLEY_HOOKS_ROOT): the longest mount point that contains the path gives its type.

gh_hook_fs() {
    local -a mnt=() typ=() paths=()
    local line mp t p best bt i hit="" types=${gh_cfg[FS_NO_LOCKING]:-lustre gpfs}
    local -A bad=()
    gh_words "$types"
    for t in "${gh_items[@]}"; do bad[$t]=1; done

    if [[ ! -r $gh_root/proc/mounts ]]; then
        gh_note "[fs] cannot read /proc/mounts: nothing set"
        return 0
    fi
    while IFS=' ' read -r _ mp t _; do
        mnt+=("${mp//\\040/ }")
        typ+=("$t")
    done <"$gh_root/proc/mounts"

    paths=(/data /runs /ckpt "${PWD:-/}")
    gh_split "${GALLEY_FS_PATHS:-}" ":"
    paths+=("${gh_items[@]}")
    gh_words "${gh_cfg[FS_PATHS]:-}"
    paths+=("${gh_items[@]}")

    line=""
    for p in "${paths[@]}"; do
        best="" bt=""
        for i in "${!mnt[@]}"; do
            mp=${mnt[i]}
            if [[ $p == "$mp" || $mp == / || $p == "$mp"/* ]] && ((${#mp} >= ${#best})); then
                best=$mp bt=${typ[i]}
            fi
        done
        line+="${line:+, }$p: ${bt:-?}"
        [[ -n $bt && -n ${bad[$bt]:-} && -z $hit ]] && hit="$p is on $bt (mounted at $best)"
    done
    gh_note "[fs] ${line}"
    if [[ -n $hit ]]; then
        gh_set HDF5_USE_FILE_LOCKING FALSE "$hit: HDF5's file locks fail or stall there"
    else
        gh_note "  no path on ${types}: nothing set"
    fi
}
gh_hook_fs
