# shellcheck shell=bash
# shellcheck disable=SC2154  # gh_* globals come from lib/hooks.sh (sourced by galley-entrypoint)
# gpu.sh: bind this rank to one GPU: local rank -> CUDA_VISIBLE_DEVICES, in the order the site
# gives (site.env GPU_ORDER, e.g. Perlmutter's 3,2,1,0 that matches the CPU affinity of local
# ranks 0..3; default 0,1,...). A list already in CUDA_VISIBLE_DEVICES (Slurm --gpus-per-node,
# the user) is narrowed, never widened: its GPUs are taken in the site's order. One GPU already
# chosen, no GPU, no local rank, or GALLEY_GPU_BIND=0: nothing is set.

gh_hook_gpu() {
    local -a devs=() order=() cands=()
    local i n pick listed=${CUDA_VISIBLE_DEVICES-} all_int=1 g
    local -A in_list=()

    gh_glob "/dev/nvidia[0-9]*"
    devs=("${gh_paths[@]}")
    n=${#devs[@]}
    if ((n == 0)); then
        if [[ ${ENABLE_GPU:-} == 1 ]]; then
            # podman-hpc's gpu module binds whatever /dev/nvidia* and libcuda the host has, silently none.
            gh_warn "podman-hpc --gpu, but no GPU in the container (no /dev/nvidia[0-9]*): this host has no NVIDIA GPU or driver, so galley runs on the CPU. To use GPUs, run on a GPU node (Perlmutter: salloc -C gpu)"
        else
            gh_note "[gpu] no GPU device (/dev/nvidia[0-9]*): nothing set, galley runs on the CPU (on a GPU node: podman-hpc run --gpu, shifter --module=gpu)"
        fi
        return 0
    fi
    if [[ ${GALLEY_GPU_BIND:-1} == 0 ]]; then
        gh_note "[gpu] $n GPU devices; GALLEY_GPU_BIND=0: nothing set, every rank sees every GPU"
        return 0
    fi
    if [[ -z $gh_local_rank ]]; then
        gh_note "[gpu] $n GPU devices; no local rank (not started by srun or mpirun): nothing set, all GPUs visible"
        return 0
    fi

    # The site's order, limited to the GPUs present; default: identity.
    gh_split "${gh_cfg[GPU_ORDER]:-}" ","
    for g in "${gh_items[@]}"; do
        [[ $g =~ ^[0-9]+$ ]] && ((g < n)) && order+=("$g")
    done
    if ((${#order[@]} == 0)); then
        for ((i = 0; i < n; i++)); do order+=("$i"); done
    fi

    if [[ -n $listed ]]; then
        gh_split "$listed" ","
        if ((${#gh_items[@]} <= 1)); then
            gh_note "[gpu] local rank $gh_local_rank: CUDA_VISIBLE_DEVICES=$listed already names one GPU: kept"
            return 0
        fi
        for g in "${gh_items[@]}"; do
            [[ $g =~ ^[0-9]+$ ]] || all_int=0
            in_list[$g]=1
        done
        if ((all_int)); then
            # The listed GPUs in the site's order, then any the order does not know.
            for g in "${order[@]}"; do
                [[ -n ${in_list[$g]:-} ]] && cands+=("$g") && unset "in_list[$g]"
            done
            for g in "${gh_items[@]}"; do
                [[ -n ${in_list[$g]:-} ]] && cands+=("$g")
            done
        else
            cands=("${gh_items[@]}") # UUIDs or MIG names: their own order
        fi
    else
        cands=("${order[@]}")
    fi

    pick=${cands[gh_local_rank % ${#cands[@]}]}
    gh_join , "${cands[@]}"
    local why="local rank $gh_local_rank ($gh_local_rank_var) -> position $((gh_local_rank % ${#cands[@]})) of $gh_joined"
    ((gh_local_rank >= ${#cands[@]})) && why+="; more local ranks than GPUs: GPUs are shared"
    gh_join , "${order[@]}"
    gh_note "[gpu] $n GPU devices, order $gh_joined${listed:+, restricted by CUDA_VISIBLE_DEVICES=$listed}"
    export CUDA_VISIBLE_DEVICES="$pick"
    gh_note "  set  CUDA_VISIBLE_DEVICES=$pick  ($why)"
}
gh_hook_gpu
