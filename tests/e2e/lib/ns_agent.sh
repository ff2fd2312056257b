#!/usr/bin/env bash
# ns_agent.sh HOST COMMAND...: Open MPI's remote start (plm_rsh_agent, ssh's place) for the nodes
# of tests/e2e/lib/nodes.sh. HOST is a node's name; COMMAND is what mpirun would give ssh (the
# orted command line, written for a shell). It runs in HOST's namespaces (network, host name,
# mounts) with a clean environment, as an ssh login would give: PATH, HOME, USER, SHELL, LANG
# and TMPDIR only, so that nothing reaches a remote rank that mpirun did not pass on itself.
#
# The nodes are found through GL_NODES_DIR (exported by nodes_start): HOST.pid is the pid of
# the process holding HOST's namespaces, used only while it is still in the network namespace
# whose inode HOST.netns records.
# Exit 255 (what ssh gives when it cannot connect) for a host that is not a running node.
set -u

host=${1:-}
if [[ -z $host || $# -lt 2 ]]; then
    echo "ns_agent.sh: usage: ns_agent.sh HOST COMMAND... (Open MPI's plm_rsh_agent)" >&2
    exit 255
fi
shift
if [[ -z ${GL_NODES_DIR:-} ]]; then
    echo "ns_agent.sh: GL_NODES_DIR is not set (start the nodes with nodes_start, tests/e2e/lib/nodes.sh)" >&2
    exit 255
fi
pid=$(cat "$GL_NODES_DIR/$host.pid" 2>/dev/null) || pid=
if [[ -z $pid || $(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null) != "$(cat "$GL_NODES_DIR/$host.netns" 2>/dev/null)" ]]; then
    echo "ns_agent.sh: $host is not a running node (no live holder of its network namespace in $GL_NODES_DIR/$host.pid)" >&2
    exit 255
fi
exec nsenter --target "$pid" --net --uts --mount --wd="$PWD" -- \
    env -i PATH="${PATH:-/usr/bin:/bin}" HOME="${HOME:-/root}" USER="${USER:-root}" SHELL=/bin/bash \
    LANG="${LANG:-C.UTF-8}" TMPDIR="${TMPDIR:-/tmp}" /bin/bash -c "$*"
