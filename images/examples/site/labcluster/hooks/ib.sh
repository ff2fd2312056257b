# shellcheck shell=bash
# ib.sh: labcluster's own hook (HOOKS in site.env names it): NCCL on the InfiniBand HCAs only.
# Sourced by galley-entrypoint after the standard hooks; gh_set never overrides a value the user
# set, and gh_note's lines go into the wiring report (GALLEY_HOOKS_DEBUG=1, galley info --wiring).
gh_note "[ib] labcluster InfiniBand"
gh_set NCCL_IB_HCA "mlx5" "the HCAs; NCCL leaves the Ethernet ports to sockets"
gh_set NCCL_SOCKET_IFNAME "ib0" "bootstrap over IPoIB"
