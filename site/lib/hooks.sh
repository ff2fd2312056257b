# shellcheck shell=bash
# shellcheck disable=SC2034,SC2154  # a library: the hooks read the gh_* it sets; galley-entrypoint sets gh_site_dir, gh_galley_home
# hooks.sh: what galley-entrypoint and the hooks in hooks/ share: probing paths under
# GALLEY_HOOKS_ROOT, reading site data files, setting a variable only where nobody has, building
# LD_LIBRARY_PATH, rank detection and the wiring report.
#
# Pure bash: no external program runs and nothing forks, so container start stays fast
# (a few milliseconds). Names: gh_* for functions and globals, so nothing leaks into the job
# (only exported variables reach the command the entrypoint runs).

shopt -s nullglob

# Every absolute path a hook probes is "$gh_root/path": tests point GALLEY_HOOKS_ROOT at a fake
# host tree (stub .so files, /dev/cxi0, /proc/mounts ...). Empty in a real container.
gh_root=${GALLEY_HOOKS_ROOT:-}
gh_debug=${GALLEY_HOOKS_DEBUG:-0}
gh_report=()          # the wiring report, one line per element
gh_ld_front=()        # directories the hooks want first on LD_LIBRARY_PATH
declare -A gh_cfg=()  # the chosen site's site.env
gh_site=""            # its name, and its folder
gh_site_folder=""
gh_rank="" gh_rank0=1 # until gh_detect_ranks

# ---- messages and the report -------------------------------------------------------------------

gh_note() { gh_report+=("$*"); }

# gh_warn MSG: one line on stderr, from global rank 0 only (a 1000-rank job says it once).
gh_warn() {
    gh_report+=("warning: $*")
    if [[ $gh_rank0 == 1 ]]; then printf 'galley-entrypoint: warning: %s\n' "$*" >&2; fi
    return 0
}

# gh_debug_print: the report on stderr, when GALLEY_HOOKS_DEBUG=1.
gh_debug_print() {
    [[ $gh_debug == 1 ]] || return 0
    local tag="galley-entrypoint" line
    [[ -n $gh_rank ]] && tag+="[rank $gh_rank]"
    for line in "${gh_report[@]}"; do printf '%s: %s\n' "$tag" "$line" >&2; done
}

# gh_die MSG [CODE]: stop the container start (default exit 1), after the debug report.
gh_die() {
    gh_debug_print
    printf 'galley-entrypoint: error: %s\n' "$1" >&2
    exit "${2:-1}"
}

# ---- variables ---------------------------------------------------------------------------------

# gh_set NAME VALUE [WHY]: export NAME=VALUE unless it is already set (by the user, the runtime
# or a module; even to an empty value): a value someone chose is never overridden.
gh_set() {
    local name=$1 value=$2 why=${3:-}
    if [[ -v $name ]]; then
        if [[ ${!name} == "$value" ]]; then
            gh_note "  kept $name=${!name} (already set, to the value the site wants)"
        else
            gh_note "  kept $name=${!name} (already set; the site would set '$value')"
        fi
        return 0
    fi
    export "$name=$value"
    gh_note "  set  $name=$value${why:+  ($why)}"
}

# ---- data files --------------------------------------------------------------------------------

# gh_read_data FILE FUNC: call FUNC KEY VALUE WHY for each `KEY=VALUE  # why` line of FILE.
# Data, not shell: nothing is expanded or run. Blank lines and lines starting with # are
# skipped; VALUE runs to the end of the line or to " #"; one pair of surrounding quotes goes.
gh_read_data() {
    local file=$1 fn=$2 line key value why n=0
    while IFS= read -r line || [[ -n $line ]]; do
        n=$((n + 1))
        line=${line#"${line%%[![:space:]]*}"}
        [[ -z $line || $line == '#'* ]] && continue
        why=""
        if [[ $line == *[[:space:]]'#'* ]]; then
            why=${line#*[[:space:]]#}
            why=${why#"${why%%[![:space:]]*}"}
            line=${line%%[[:space:]]#*}
        fi
        line=${line%"${line##*[![:space:]]}"}
        key=${line%%=*}
        if [[ $line != *=* || ! $key =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
            gh_warn "$file:$n: expected KEY=VALUE, found '$line' (line ignored)"
            continue
        fi
        value=${line#*=}
        if [[ ${#value} -ge 2 && $value == \"*\" ]]; then value=${value:1:${#value}-2}; fi
        "$fn" "$key" "$value" "$why"
    done <"$file"
}

gh_cfg_put() { gh_cfg[$1]=$2; }

# gh_load_site FOLDER: read FOLDER/site.env into gh_cfg.
gh_load_site() {
    gh_cfg=()
    gh_read_data "$1/site.env" gh_cfg_put
}

# gh_profile_file NAME: sets gh_file to the site's own NAME.env, else site/profiles/NAME.env.
gh_profile_file() {
    gh_file=""
    local f
    for f in "$gh_site_folder/$1.env" "$gh_site_dir/profiles/$1.env"; do
        if [[ -f $f ]]; then
            gh_file=$f
            return 0
        fi
    done
    return 1
}

gh_profile_set() { gh_set "$1" "$2" "$3"; }

# gh_apply_profile NAME: gh_set every variable of the profile NAME.
gh_apply_profile() {
    if ! gh_profile_file "$1"; then
        gh_note "  (no profile $1.env in $gh_site_folder or $gh_site_dir/profiles: nothing to set)"
        return 1
    fi
    gh_note "  profile $gh_file:"
    gh_read_data "$gh_file" gh_profile_set
}

# ---- lists and paths ---------------------------------------------------------------------------

# gh_split STR SEP: sets the array gh_items to STR's non-empty fields (no subshell, no here-string).
gh_split() {
    local rest=$1 sep=$2 item
    gh_items=()
    while [[ -n $rest ]]; do
        item=${rest%%"$sep"*}
        if [[ $rest == *"$sep"* ]]; then rest=${rest#*"$sep"}; else rest=""; fi
        [[ -n $item ]] && gh_items+=("$item")
    done
    return 0
}

# gh_join SEP ITEM...: sets gh_joined to the ITEMs joined by SEP (one character).
gh_join() {
    local IFS=$1
    shift
    gh_joined="$*"
}

# gh_words STR: gh_split on blanks (tabs count as spaces).
gh_words() { gh_split "${1//$'\t'/ }" " "; }

# gh_glob PATTERN...: sets gh_paths to the existing container paths matching PATTERNs (globs)
# under gh_root, in order, without duplicates.
gh_glob() {
    local IFS="" pat p
    local -A seen=()
    local -a hits=()
    gh_paths=()
    for pat in "$@"; do
        # shellcheck disable=SC2206  # the pattern is globbed on purpose (IFS is empty: no splitting)
        hits=("$gh_root"$pat)
        for p in "${hits[@]}"; do
            [[ -e $p ]] || continue # a word without glob characters comes back as it is
            p=${p#"$gh_root"}
            [[ -n ${seen[$p]:-} ]] && continue
            seen[$p]=1
            gh_paths+=("$p")
        done
    done
}

# gh_is_system_dir DIR: the loader searches DIR anyway; putting it on LD_LIBRARY_PATH would only
# let it shadow the host libraries placed before it.
gh_is_system_dir() {
    case ${1%/} in
    /lib | /usr/lib | /lib/*-linux-gnu | /usr/lib/*-linux-gnu) return 0 ;;
    esac
    return 1
}

# gh_ld_prepend DIR...: ask for DIRs (container paths) at the front of LD_LIBRARY_PATH.
gh_ld_prepend() {
    local d
    for d in "$@"; do
        gh_is_system_dir "$d" || gh_ld_front+=("$d")
    done
}

# gh_image_ld_path: sets gh_image_ld to the image's own LD_LIBRARY_PATH, as baked at build time:
# GALLEY_IMAGE_LD_LIBRARY_PATH, else the file etc/ld_library_path next to site/ (one path list;
# several lines are joined). podman-hpc modules replace LD_LIBRARY_PATH and shifter strips LD_*,
# so the running container may have lost it.
gh_image_ld_path() {
    gh_image_ld=""
    gh_image_ld_from=""
    if [[ -v GALLEY_IMAGE_LD_LIBRARY_PATH ]]; then
        gh_image_ld=$GALLEY_IMAGE_LD_LIBRARY_PATH
        gh_image_ld_from="GALLEY_IMAGE_LD_LIBRARY_PATH"
        return 0
    fi
    local f=$gh_galley_home/etc/ld_library_path line
    [[ -r $f ]] || return 0
    gh_image_ld_from=$f
    while IFS= read -r line || [[ -n $line ]]; do
        [[ -z $line || $line == '#'* ]] && continue
        gh_image_ld+=${gh_image_ld:+:}$line
    done <"$f"
}

# gh_ld_finish: LD_LIBRARY_PATH = what hooks asked for, then what the runtime and modules set,
# then the image's own; duplicates and empty entries dropped, nothing else removed.
gh_ld_finish() {
    local cur=${LD_LIBRARY_PATH-} d new=""
    local -A seen=()
    local -a all=("${gh_ld_front[@]}")
    gh_split "$cur" ":"
    all+=("${gh_items[@]}")
    gh_image_ld_path
    gh_split "$gh_image_ld" ":"
    all+=("${gh_items[@]}")
    for d in "${all[@]}"; do
        [[ -n ${seen[$d]:-} ]] && continue
        seen[$d]=1
        new+=${new:+:}$d
    done
    if [[ -n $gh_image_ld_from ]]; then
        gh_note "[ld] image's own library path: ${gh_image_ld:-(empty)} (from $gh_image_ld_from)"
    else
        gh_note "[ld] image's own library path: unknown (no GALLEY_IMAGE_LD_LIBRARY_PATH, no $gh_galley_home/etc/ld_library_path)"
    fi
    if [[ $new == "$cur" ]]; then
        gh_note "  kept LD_LIBRARY_PATH=${cur:-(unset)} (nothing to add)"
        return 0
    fi
    export LD_LIBRARY_PATH="$new"
    gh_note "  set  LD_LIBRARY_PATH=$new  (hooks' directories first, then the runtime's (was: ${cur:-unset}), then the image's)"
}

# ---- ranks -------------------------------------------------------------------------------------

# gh_first_int VAR...: sets gh_val/gh_var to the first VAR holding a non-negative integer.
gh_first_int() {
    local v
    gh_val=""
    gh_var=""
    for v in "$@"; do
        if [[ ${!v:-} =~ ^[0-9]+$ ]]; then
            gh_val=${!v}
            gh_var=$v
            return 0
        fi
    done
    return 1
}

# gh_detect_ranks: local rank, global rank, job size and node count from the launcher's variables.
# The MPI launchers' own variables come before Slurm's: under mpirun inside a batch script,
# SLURM_LOCALID is the batch step's (0) for every rank.
gh_detect_ranks() {
    gh_first_int GALLEY_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_RANK MPI_LOCALRANKID PALS_LOCAL_RANKID \
        PMI_LOCAL_RANK SLURM_LOCALID
    gh_local_rank=$gh_val gh_local_rank_var=$gh_var
    gh_first_int OMPI_COMM_WORLD_RANK PMIX_RANK PMI_RANK PALS_RANKID SLURM_PROCID
    gh_rank=$gh_val gh_rank_var=$gh_var
    gh_first_int OMPI_COMM_WORLD_SIZE PMI_SIZE SLURM_NTASKS SLURM_NPROCS
    gh_size=$gh_val gh_size_var=$gh_var
    gh_first_int SLURM_STEP_NUM_NODES SLURM_NNODES SLURM_JOB_NUM_NODES
    gh_nodes=$gh_val gh_nodes_var=$gh_var
    gh_rank0=1
    [[ -n $gh_rank && $gh_rank != 0 ]] && gh_rank0=0
    # More than one node: known from Slurm, or from Open MPI when every rank is on this node
    # (OMPI_COMM_WORLD_LOCAL_SIZE = OMPI_COMM_WORLD_SIZE: mpirun -np 4 on one machine);
    # otherwise assume it of any job of several ranks.
    gh_multinode=0
    if [[ -n $gh_nodes ]]; then
        ((gh_nodes > 1)) && gh_multinode=1
    elif [[ -n $gh_size && ${OMPI_COMM_WORLD_LOCAL_SIZE:-} =~ ^[0-9]+$ && $gh_size_var == OMPI_COMM_WORLD_SIZE ]]; then
        ((OMPI_COMM_WORLD_LOCAL_SIZE < gh_size)) && gh_multinode=1
    elif [[ -n $gh_size ]]; then
        ((gh_size > 1)) && gh_multinode=1
    fi
    gh_multirank=0
    [[ -n $gh_size ]] && ((gh_size > 1)) && gh_multirank=1
    return 0
}

# ---- runtime and site --------------------------------------------------------------------------

# gh_phpc_modules: the podman-hpc modules this container was started with, from the variable each
# module's yaml (modules.d/*.yaml, `env:`) sets to 1: `podman-hpc run --gpu --nccl` gives
# "--gpu --nccl". Only --nccl and the MPI modules put anything in /opt/udiImage, and only when the host
# has the files they copy; --gpu and --openmpi-pmix* never do.
gh_phpc_modules() {
    local pair var
    gh_phpc_mods=""
    for pair in ENABLE_GPU:gpu ENABLE_NCCL:nccl ENABLE_MPICH_SS:mpi ENABLE_CUDA_MPICH_SS:cuda-mpi \
        ENABLE_OPENMPI_PMIX:openmpi-pmix ENABLE_OPENMPI_PMI2:openmpi-pmi2; do
        var=${pair%%:*}
        [[ ${!var:-} == 1 ]] && gh_phpc_mods+=${gh_phpc_mods:+ }--${pair#*:}
    done
    return 0
}

# gh_detect_runtime: podman-hpc, shifter, podman, docker, apptainer, or none (bare metal or an
# unknown runtime); gh_modules lists the podman-hpc/shifter modules mounted in /opt/udiImage,
# gh_phpc_mods the podman-hpc module flags given (gh_phpc_modules).
gh_detect_runtime() {
    local m
    gh_modules=""
    gh_glob "/opt/udiImage/modules/*/"
    for m in "${gh_paths[@]}"; do
        m=${m%/}
        gh_modules+=${gh_modules:+ }${m##*/}
    done
    gh_phpc_modules
    if [[ -n ${GALLEY_RUNTIME:-} ]]; then
        gh_runtime=$GALLEY_RUNTIME gh_runtime_why="GALLEY_RUNTIME is set"
    elif [[ -n ${SHIFTER_RUNTIME:-} ]]; then
        gh_runtime=shifter gh_runtime_why="SHIFTER_RUNTIME is set"
    elif [[ -n ${PODMANHPC_MODULES_DIR:-} ]]; then
        # `podman-hpc run` always passes it (podman-hpc 1.2); /opt/udiImage exists only with some modules.
        gh_runtime=podman-hpc gh_runtime_why="PODMANHPC_MODULES_DIR is set${gh_phpc_mods:+; modules $gh_phpc_mods}"
    elif [[ -e $gh_root/run/.containerenv && -d $gh_root/opt/udiImage ]]; then
        gh_runtime=podman-hpc gh_runtime_why="/run/.containerenv and /opt/udiImage exist"
    elif [[ -e $gh_root/run/.containerenv ]]; then
        gh_runtime=podman gh_runtime_why="/run/.containerenv exists"
    elif [[ -e $gh_root/.dockerenv ]]; then
        gh_runtime=docker gh_runtime_why="/.dockerenv exists"
    elif [[ -n ${APPTAINER_CONTAINER:-}${SINGULARITY_CONTAINER:-} ]]; then
        gh_runtime=apptainer gh_runtime_why="APPTAINER_CONTAINER or SINGULARITY_CONTAINER is set"
    elif [[ -d $gh_root/opt/udiImage ]]; then
        gh_runtime=shifter gh_runtime_why="/opt/udiImage exists, no /run/.containerenv"
    else
        gh_runtime=none gh_runtime_why="no container marker: bare metal or an unknown runtime"
    fi
}

# gh_rule_part KIND:ARG: one detection test.
#   env:VAR=GLOB  VAR is set and matches GLOB (env:VAR alone: VAR is set)
#   hostname:GLOB the host name matches GLOB
#   path:PATH     PATH (a glob) exists under GALLEY_HOOKS_ROOT
#   file:PATH=GLOB the file's text matches GLOB (e.g. file:/etc/cluster-name=*perlmutter*)
gh_rule_part() {
    local kind=${1%%:*} arg=${1#*:} var pat text=""
    case $kind in
    env)
        var=${arg%%=*}
        [[ $var =~ ^[A-Za-z_][A-Za-z0-9_]*$ && -v $var ]] || return 1
        [[ $arg == *=* ]] || return 0
        pat=${arg#*=}
        # shellcheck disable=SC2053  # a glob on purpose
        [[ ${!var} == $pat ]]
        ;;
    hostname)
        # shellcheck disable=SC2053
        [[ -n $gh_hostname && $gh_hostname == $arg ]]
        ;;
    path)
        gh_glob "$arg"
        ((${#gh_paths[@]} > 0))
        ;;
    file)
        [[ -r $gh_root${arg%%=*} ]] || return 1
        IFS= read -r -d '' text <"$gh_root${arg%%=*}"
        # shellcheck disable=SC2053
        [[ $text == ${arg#*=} ]]
        ;;
    *)
        gh_warn "site $gh_candidate: unknown detection rule '$1' (kinds: env:, hostname:, path:, file:)"
        return 1
        ;;
    esac
}

# gh_rule RULE: RULE is parts joined by '+', all of which must hold.
gh_rule() {
    local part
    gh_split "$1" "+"
    for part in "${gh_items[@]}"; do
        gh_rule_part "$part" || return 1
    done
}

# gh_site_folders: gh_folders = every site folder (a directory holding site.env), searched in
# GALLEY_SITE_PATH (colon-separated) first, then site/sites/; a name seen earlier shadows later ones.
gh_site_folders() {
    local dir f name
    local -A seen=()
    gh_folders=()
    gh_split "${GALLEY_SITE_PATH:-}" ":"
    gh_search=("${gh_items[@]}" "$gh_site_dir/sites")
    for dir in "${gh_search[@]}"; do
        for f in "$dir"/*/site.env; do
            f=${f%/site.env}
            name=${f##*/}
            [[ -n ${seen[$name]:-} ]] && continue
            seen[$name]=1
            gh_folders+=("$f")
        done
    done
}

# gh_detect_site: GALLEY_SITE if set, else the first folder (alphabetical, generic excluded)
# one of whose DETECT rules holds, else generic.
gh_detect_site() {
    local f rule names=""
    gh_hostname=""
    if [[ -z $gh_root ]]; then
        gh_hostname=${HOSTNAME:-}
    elif [[ -r $gh_root/proc/sys/kernel/hostname ]]; then
        IFS= read -r gh_hostname <"$gh_root/proc/sys/kernel/hostname" || true
    fi
    gh_site_folders
    for f in "${gh_folders[@]}"; do names+=${names:+, }${f##*/}; done
    if [[ -n ${GALLEY_SITE:-} ]]; then
        for f in "${gh_folders[@]}"; do
            if [[ ${f##*/} == "$GALLEY_SITE" ]]; then
                gh_site=$GALLEY_SITE gh_site_folder=$f gh_site_why="GALLEY_SITE=$GALLEY_SITE"
                gh_load_site "$f"
                return 0
            fi
        done
        gh_die "GALLEY_SITE=$GALLEY_SITE: no such site folder (known: ${names:-none}; searched ${gh_search[*]}). Unset GALLEY_SITE to detect the site, or add the folder (see $gh_site_dir/README.md)." 2
    fi
    for f in "${gh_folders[@]}"; do
        gh_candidate=${f##*/}
        [[ $gh_candidate == generic ]] && continue
        gh_load_site "$f"
        gh_words "${gh_cfg[DETECT]:-}"
        for rule in "${gh_items[@]}"; do
            if gh_rule "$rule"; then
                gh_site=$gh_candidate gh_site_folder=$f gh_site_why="matched $rule"
                return 0
            fi
        done
    done
    gh_site=generic gh_site_why="no other site's DETECT rule holds; known sites: ${names:-none}"
    gh_cfg=()
    for f in "${gh_folders[@]}"; do
        if [[ ${f##*/} == generic ]]; then
            gh_site_folder=$f
            gh_load_site "$f"
            return 0
        fi
    done
    gh_site_folder="(built in: no sites/generic folder)"
}

# ---- fabric and NCCL plugin --------------------------------------------------------------------

# gh_lib_dirs: gh_libdirs = where the loader (or a module) may put host libraries: the
# LD_LIBRARY_PATH entries, the site's FABRIC_LIB_DIRS (globs), then the usual system folders.
gh_lib_dirs() {
    gh_split "${LD_LIBRARY_PATH-}" ":"
    local -a pats=("${gh_items[@]}")
    gh_words "${gh_cfg[FABRIC_LIB_DIRS]:-}"
    pats+=("${gh_items[@]}" /usr/lib64 /usr/lib '/usr/lib/*-linux-gnu' '/opt/cray/libfabric/*/lib64')
    gh_glob "${pats[@]}"
    gh_libdirs=("${gh_paths[@]}")
}

# gh_find_lib NAME_GLOB DIR...: sets gh_found to the first file matching NAME_GLOB in the DIRs.
gh_find_lib() {
    local name=$1 d
    local -a hits=()
    shift
    gh_found=""
    for d in "$@"; do
        # shellcheck disable=SC2206  # NAME_GLOB is a glob on purpose
        hits=("$gh_root$d"/$name)
        if ((${#hits[@]})); then
            gh_found=${hits[0]#"$gh_root"}
            return 0
        fi
    done
    return 1
}

# gh_fabric_detect (once): is the Slingshot CXI provider usable? A /dev/cxi* device (bound by
# shifter, or podman-hpc's MPI modules), or the host libcxi a module copied in, says so.
gh_fabric_detect() {
    [[ -n ${gh_fabric-} ]] && return 0
    gh_glob "/dev/cxi[0-9]*"
    gh_cxi_devs=("${gh_paths[@]}")
    gh_lib_dirs
    gh_find_lib "libcxi.so*" "${gh_libdirs[@]}"
    gh_libcxi=$gh_found
    gh_find_lib "libfabric.so*" "${gh_libdirs[@]}"
    gh_libfabric=$gh_found
    gh_fabric=0
    ((${#gh_cxi_devs[@]})) && gh_fabric=1
    [[ -n $gh_libcxi ]] && gh_fabric=1
    gh_join " " "${gh_cxi_devs[@]}"
    gh_fabric_desc="devices: ${gh_joined:-none}; libcxi: ${gh_libcxi:-not found}; libfabric: ${gh_libfabric:-not found}"
    return 0
}

# gh_nccl_plugin_find (once): the aws-ofi-nccl plugin (libnccl-net*.so) that podman-hpc --nccl or
# shifter's nccl-plugin module mounts, or one in the image. Sets gh_plugin (file), gh_plugin_dir,
# gh_plugin_deps (its deps/lib folders, podman-hpc's layout), gh_plugin_name (for NCCL_NET_PLUGIN
# when the file is libnccl-net-NAME.so and no plain libnccl-net.so sits beside it) and gh_plugin_searched.
gh_nccl_plugin_find() {
    [[ -n ${gh_plugin_searched-} ]] && return 0
    local -a pats=() hits=()
    local d top base
    gh_plugin="" gh_plugin_dir="" gh_plugin_name="" gh_plugin_deps=()
    gh_words "${gh_cfg[NCCL_PLUGIN_DIRS]:-}"
    pats=("${gh_items[@]}" /opt/udiImage/modules/nccl-plugin/lib /opt/udiImage/modules/nccl-plugin/lib64)
    gh_split "${LD_LIBRARY_PATH-}" ":"
    pats+=("${gh_items[@]}" /opt/galley/nccl-plugin/lib /opt/aws-ofi-nccl/lib /opt/amazon/ofi-nccl/lib
        /usr/local/lib '/usr/lib/*-linux-gnu' /usr/lib64)
    gh_glob "${pats[@]}"
    gh_plugin_searched=""
    local -A seen=()
    for d in "${pats[@]}"; do
        [[ -n ${seen[$d]:-} ]] && continue
        seen[$d]=1
        gh_plugin_searched+=${gh_plugin_searched:+ }$d
    done
    for d in "${gh_paths[@]}"; do
        hits=("$gh_root$d"/libnccl-net*.so*)
        ((${#hits[@]})) || continue
        gh_plugin_dir=$d
        gh_plugin=${hits[0]#"$gh_root"}
        base=${gh_plugin##*/}
        if [[ -e $gh_root$d/libnccl-net.so ]]; then
            gh_plugin=$d/libnccl-net.so
        elif [[ $base == libnccl-net-* ]]; then
            gh_plugin_name=${base#libnccl-net-}
            gh_plugin_name=${gh_plugin_name%%.so*}
        fi
        top=${d%/*}
        gh_glob "$top/deps/lib" "$top/deps/lib64"
        gh_plugin_deps=("${gh_paths[@]}")
        return 0
    done
    return 0
}
