# shellcheck shell=bash
# shellcheck disable=SC2154  # gh_* globals come from lib/hooks.sh (sourced by galley-entrypoint)
# mpi.sh: Open MPI inside the container, started by the host's launcher.
#
# Under `srun --mpi=pmix` (PMIX_RANK/PMIX_NAMESPACE set, or SLURM_MPI_TYPE=pmix*):
# profiles/pmix.env (PMIX_MCA_gds=hash, PMIX_MCA_psec=native): the container's PMIx client is
# not the host's, so skip the shared-memory dstore and munge security it cannot share.
# On a site with a fabric (NETWORK other than tcp, CXI present) and an Open MPI in the image that
# has the libfabric MTL (mca_mtl_ofi.so): profiles/<NETWORK>-ompi.env (OMPI_MCA_pml=cm,
# OMPI_MCA_mtl=ofi), so Open MPI goes through the host libfabric (FI_PROVIDER=cxi).
# A host Cray MPICH mounted by podman-hpc --mpi / shifter --module=mpich is only reported: it
# serves images built on MPICH (MPICH ABI); galley's Open MPI does not use it.

gh_hook_mpi() {
    local net=${gh_cfg[NETWORK]:-tcp} mtl=""
    gh_note "[mpi]"
    if [[ -v PMIX_RANK || -v PMIX_NAMESPACE || ${SLURM_MPI_TYPE:-} == pmix* ]]; then
        gh_note "  launched through PMIx (${SLURM_MPI_TYPE:+SLURM_MPI_TYPE=$SLURM_MPI_TYPE, }PMIX_RANK=${PMIX_RANK:-unset})"
        gh_apply_profile pmix
    else
        gh_note "  not launched through PMIx: no PMIX_* set"
    fi

    gh_words "${gh_cfg[OMPI_COMPONENT_DIRS]:-}"
    gh_glob "${gh_items[@]}" '/usr/lib/*-linux-gnu/openmpi/lib/openmpi*' /usr/lib64/openmpi/lib/openmpi \
        /usr/local/lib/openmpi '/opt/openmpi*/lib/openmpi'
    gh_find_lib mca_mtl_ofi.so "${gh_paths[@]}" && mtl=$gh_found
    gh_note "  Open MPI libfabric MTL: ${mtl:-not found}"
    if [[ $net != tcp ]]; then
        gh_fabric_detect
        if ((gh_fabric)) && [[ -n $mtl ]]; then
            gh_apply_profile "$net-ompi"
        elif ((gh_fabric)); then
            gh_note "  no mca_mtl_ofi.so in the image's Open MPI: it uses TCP between nodes"
        else
            gh_note "  no CXI fabric: Open MPI keeps its defaults"
        fi
    fi
    if [[ -d $gh_root/opt/udiImage/modules/mpich ]]; then
        gh_note "  host MPICH at /opt/udiImage/modules/mpich (podman-hpc --mpi, shifter --module=mpich): for MPICH-ABI images; galley's Open MPI does not use it"
    fi
}
gh_hook_mpi
