# shellcheck shell=bash
# shellcheck disable=SC2154  # gh_* globals come from lib/hooks.sh (sourced by galley-entrypoint)
# nccl.sh: wire NCCL (and libfabric) to the site's network (site.env NETWORK).
#
# NETWORK=tcp (generic): nothing is set; NCCL and MPI pick their own transport.
# NETWORK=slingshot: when the CXI fabric is there (/dev/cxi*, libcxi), the site's FABRIC_LIB_DIRS
# go on LD_LIBRARY_PATH and profiles/slingshot-fabric.env (FI_*) applies; when the aws-ofi-nccl
# plugin is there too, its folders go first on LD_LIBRARY_PATH and slingshot-nccl.env (NCCL_NET,
# NCCL_SOCKET_IFNAME, ...) applies, NCCL_NET making NCCL fail rather than fall back to sockets.
# Without the plugin or the fabric, in a job that spans nodes: stop with a clear error
# (NCCL_PLUGIN_MISSING=fail) or warn once and let NCCL use TCP (fallback);
# GALLEY_NCCL_PLUGIN_REQUIRED=1/0 overrides the site either way.

gh_hook_nccl() {
    local net=${gh_cfg[NETWORK]:-tcp} policy missing="" d
    gh_nccl_plugin_find
    gh_fabric_detect
    gh_note "[nccl] network: $net (site.env NETWORK)"
    gh_note "  plugin: ${gh_plugin:-not found}${gh_plugin:+ (in $gh_plugin_dir)}"
    gh_note "  fabric: $gh_fabric_desc"
    # podman-hpc --nccl copies what its nccl.yaml names from the host (the plugin into
    # nccl-plugin/lib, libfabric and libcxi into nccl-plugin/deps/lib), silently nothing that is not
    # there, and sets its variables (LD_LIBRARY_PATH too) all the same.
    if [[ ${ENABLE_NCCL:-} == 1 ]]; then
        local deps=/opt/udiImage/modules/nccl-plugin/deps/lib
        local -a lost=()
        local what="" x
        [[ -z $gh_plugin ]] && lost+=("the NCCL OFI plugin (libnccl-net*.so in /opt/udiImage/modules/nccl-plugin/lib)")
        gh_find_lib "libfabric.so*" "$deps" || lost+=("the host's libfabric ($deps/libfabric.so*)")
        gh_find_lib "libcxi.so*" "$deps" || lost+=("libcxi ($deps/libcxi.so*)")
        if ((${#lost[@]})); then
            for x in "${lost[@]}"; do what+=${what:+, }$x; done
            gh_warn "podman-hpc --nccl, but the container lacks $what: this host lacks the files the nccl module copies (the copy: lines of nccl.yaml in ${PODMANHPC_MODULES_DIR:-the podman-hpc modules.d folder}), so NCCL uses TCP sockets. Run on a node that has them (Perlmutter: a GPU node) or ask the site to fix the module; a single node needs no plugin (leave out --nccl)"
        fi
    fi
    if [[ $net == tcp ]]; then
        gh_note "  nothing set: NCCL and MPI choose their own transport (TCP sockets unless they find InfiniBand)"
        return 0
    fi

    # LD_LIBRARY_PATH: the plugin's folders, then the host libfabric/libcxi folders.
    local wired=0
    [[ -n $gh_plugin ]] && ((gh_fabric)) && wired=1
    ((wired)) && gh_ld_prepend "$gh_plugin_dir" "${gh_plugin_deps[@]}"
    if ((gh_fabric)); then
        gh_words "${gh_cfg[FABRIC_LIB_DIRS]:-}"
        gh_glob "${gh_items[@]}"
        gh_ld_prepend "${gh_paths[@]}"
        gh_apply_profile "$net-fabric"
    fi
    if ((wired)); then
        [[ -n $gh_plugin_name ]] && gh_set NCCL_NET_PLUGIN "$gh_plugin_name" \
            "the plugin file is libnccl-net-$gh_plugin_name.so; NCCL loads libnccl-net.so otherwise"
        gh_apply_profile "$net-nccl"
        return 0
    fi

    # Not wired: say what is missing, then apply the site's policy.
    [[ -z $gh_plugin ]] && missing="the NCCL OFI plugin (libnccl-net*.so; searched $gh_plugin_searched)"
    if ((!gh_fabric)); then
        missing+=${missing:+ and }"the Slingshot fabric (no /dev/cxi* device, no libcxi.so)"
    fi
    if [[ -v NCCL_NET ]]; then
        gh_note "  not wired: missing $missing; NCCL_NET=$NCCL_NET is set already, so the choice is the user's"
        return 0
    fi
    policy=${gh_cfg[NCCL_PLUGIN_MISSING]:-fallback}
    case ${GALLEY_NCCL_PLUGIN_REQUIRED:-} in
    1) policy=fail-always ;;
    0) policy=fallback ;;
    esac
    local how="start the container with 'podman-hpc run --gpu --nccl' or 'shifter --module=gpu,nccl-plugin' (or put the plugin in the image)"
    if [[ $policy == fail-always ]] || [[ $policy == fail && $gh_multinode == 1 ]]; then
        d=${gh_nodes:+$gh_nodes nodes}
        gh_die "site $gh_site: missing $missing. Across nodes NCCL would fall back to TCP sockets (about 3x slower). To fix: $how. To run over TCP anyway: GALLEY_NCCL_PLUGIN_REQUIRED=0.${d:+ (This job spans $d.)}${GALLEY_NCCL_PLUGIN_REQUIRED:+ (GALLEY_NCCL_PLUGIN_REQUIRED=1 asks for the plugin.)}"
    fi
    if ((gh_multinode)); then
        gh_warn "site $gh_site: missing $missing: NCCL falls back to TCP sockets (about 3x slower across nodes); to fix: $how"
    else
        gh_note "  not wired: missing $missing; a single node needs no network plugin (NCCL uses NVLink/shared memory)"
    fi
}
gh_hook_nccl
