# shellcheck shell=bash
# nodes.sh: 2-4 "nodes" on one machine for the multi-node tests (tests/e2e/test_nodes_*.sh).
# Source it after common.sh (it uses GL_TMP, info, skip, fail and gl_cleanup):
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/nodes.sh"
#   nodes_start 2 2            # 2 nodes of 2 slots; skips (77) where namespaces cannot be made
#   nodes_check_mpi            # mpirun across them: each node's host name, slots times
#   nodes_mpirun -np 4 "$GALLEY" train R     # from the first node, as a batch script would
#   nodes_exec "${GL_NODES[1]}" hostname     # any command on a node
#   nodes_spawn "${GL_NODES[1]}" daemon ... >log 2>&1   # in the background: GL_NODES_SPAWNED
#   nodes_cut "${GL_NODES[1]}"               # its link down: cut off from the others
#
# A node is a network namespace and a UTS namespace (its own host name, which is also the netns
# name: glns-TAG-nK), plus a mount namespace in which two things differ from the machine's:
# /etc/hosts names every node, and GL_NODES_LOCAL (one path, the same on every node) is that
# node's own folder, GL_NODES_DIR/nK/local: node-local storage, as /dev/shm or a local SSD on a
# cluster. Everything else (GL_TMP, the build, the recipes) is shared, as a parallel file system.
# Each node's eth0 is one end of a veth pair whose other end is on a bridge in a switch namespace
# (glns-TAG-sw), subnet GL_NODES_NET.0/24, node K at .K+1. No interface, address or route of the
# machine's own network namespace is created or changed, and all traffic stays between the nodes.
# A node's namespaces are held by one process (`sleep infinity`, pid in GL_NODES_DIR/nK.pid);
# commands enter them with nsenter (nodes_exec, and lib/ns_agent.sh for Open MPI's remote starts).
#
# mpirun runs on the first node and starts the others' orted through lib/ns_agent.sh as its
# plm_rsh_agent (ssh's place), with a clean environment as ssh would give; Open MPI's TCP traffic
# (btl and oob) is held to the nodes' subnet. Cleanup (nodes_stop, from the EXIT trap that
# nodes_start sets, or from a watchdog when the test is killed outright) ends every process in the
# nodes' network namespaces, then deletes the namespaces (and with them the veths and the bridge).
# Needs root, ip (iproute2), nsenter and unshare (util-linux), mpirun for the MPI part.

GL_NODES_NET=10.77.0        # the /24 on the private bridge; it exists only inside the switch namespace
GL_NODES_START_TIMEOUT=10   # seconds for a node's namespaces to be ready
GL_NODES_MPI_TIMEOUT=${GL_NODES_MPI_TIMEOUT:-120} # seconds nodes_mpirun may run
GL_NODES=()                 # node names (= host names = network namespace names)
GL_NODES_TAG=               # glns-XXXX: the prefix of this test's namespaces
GL_NODES_DIR=               # hosts, hostfile, each node's pid file and local folder
GL_NODES_LOCAL=             # node-local storage: the same path on every node, its own contents
GL_NODES_SLOTS=             # each node's slots in Open MPI's hostfile
GL_NODES_ATEXIT=()          # commands run (newest first) before the nodes are taken down
GL_NODES_AGENT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/ns_agent.sh

# nodes_why_not: why this machine cannot make the nodes (empty output: it can).
nodes_why_not() {
    if [[ $(id -u) -ne 0 ]]; then
        echo "needs root (network, UTS and mount namespaces)"
        return
    fi
    local c missing=()
    for c in ip nsenter unshare; do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    if ((${#missing[@]})); then
        echo "needs ${missing[*]} (Debian: iproute2, util-linux; build.sh installs them for ./build.sh test)"
        return
    fi
    # A container without CAP_SYS_ADMIN cannot unshare: that is the machine, not a broken harness.
    unshare --net --uts --mount true 2>/dev/null ||
        echo "cannot create network/UTS/mount namespaces here (unshare --net --uts --mount: $(unshare --net --uts --mount true 2>&1 | head -n 1))"
}

# nodes_broken MSG: the harness could not be set up although the machine allows it: a failure.
nodes_broken() {
    echo "  nodes: ${GL_NODES[*]:-none}, state in ${GL_NODES_DIR:-nowhere}" >&2
    fail "multi-node harness: $*"
}

# nodes_holder NAME: pid of the process holding NAME's namespaces, when it is alive and still in
# that network namespace (NAME.netns: its inode, recorded at start), so a recycled pid is never
# used. (/run/netns is no help from inside a node: its mount namespace does not see the entries
# made after it.)
nodes_holder() {
    local pid
    pid=$(cat "$GL_NODES_DIR/$1.pid" 2>/dev/null) || return 1
    [[ -n $pid && $(stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null) == "$(cat "$GL_NODES_DIR/$1.netns" 2>/dev/null)" ]] ||
        return 1
    echo "$pid"
}

# nodes_exec NODE CMD...: run CMD on NODE (its network, host name and mounts), in this directory.
nodes_exec() {
    local node=$1 pid
    shift
    pid=$(nodes_holder "$node") || nodes_broken "node $node is not running"
    nsenter --target "$pid" --net --uts --mount --wd="$PWD" -- "$@"
}

# nodes_spawn NODE CMD...: start CMD on NODE in the background; its pid (CMD's own: nsenter
# execs it) in GL_NODES_SPAWNED. Redirect the call as you would CMD's.
nodes_spawn() {
    local node=$1 pid
    shift
    pid=$(nodes_holder "$node") || nodes_broken "node $node is not running"
    nsenter --target "$pid" --net --uts --mount --wd="$PWD" -- "$@" &
    GL_NODES_SPAWNED=$!
    disown "$GL_NODES_SPAWNED" 2>/dev/null || true
}

# nodes_addr K: the address of node K (0-based).
nodes_addr() { echo "$GL_NODES_NET.$(($1 + 2))"; }

# nodes_write_files SLOTS: the hosts file every node mounts on /etc/hosts, and Open MPI's hostfile.
nodes_write_files() {
    local k
    {
        echo "# written by tests/e2e/lib/nodes.sh: the nodes of one test"
        echo "127.0.0.1 localhost"
        for k in "${!GL_NODES[@]}"; do echo "$(nodes_addr "$k") ${GL_NODES[k]}"; done
    } >"$GL_NODES_DIR/hosts"
    for k in "${!GL_NODES[@]}"; do echo "${GL_NODES[k]} slots=$1"; done >"$GL_NODES_DIR/hostfile"
}

# nodes_add K: node K's namespaces, its link to the bridge, and its holder process.
nodes_add() {
    local k=$1 name=${GL_NODES[$1]} sw=$GL_NODES_TAG-sw
    ip netns add "$name" || nodes_broken "ip netns add $name failed"
    stat -c %i "/run/netns/$name" >"$GL_NODES_DIR/$name.netns"
    # Both ends are made in their own namespaces: nothing appears in the machine's namespace.
    if ! { ip link add eth0 netns "$name" type veth peer name "p$k" netns "$sw" &&
        ip -n "$sw" link set "p$k" master br0 up &&
        ip -n "$name" addr add "$(nodes_addr "$k")/24" dev eth0 &&
        ip -n "$name" link set eth0 up && ip -n "$name" link set lo up; }; then
        nodes_broken "could not wire $name to the bridge"
    fi
    mkdir -p "$GL_NODES_DIR/$name/local"
    # nsenter --net, not `ip netns exec`: that one remounts /sys without /sys/fs/cgroup, which slurmd needs.
    # shellcheck disable=SC2016 # $1..$3 are the inner shell's arguments
    nsenter --net="/run/netns/$name" unshare --uts --mount --propagation private -- bash -c '
        hostname "$1" && mount --bind "$2/hosts" /etc/hosts && mount --bind "$2/$1/local" "$3" &&
            touch "$2/$1.ready" && exec sleep infinity' nodes_holder "$name" "$GL_NODES_DIR" "$GL_NODES_LOCAL" \
        </dev/null >"$GL_NODES_DIR/$name.log" 2>&1 &
    echo $! >"$GL_NODES_DIR/$name.pid"
    disown $! 2>/dev/null || true # nodes_stop kills it: no "Killed" line from this shell
}

# nodes_wait_ready: every node's holder has set it up (bounded), and answers to its name.
nodes_wait_ready() {
    local name deadline=$((SECONDS + GL_NODES_START_TIMEOUT)) got
    for name in "${GL_NODES[@]}"; do
        while [[ ! -e $GL_NODES_DIR/$name.ready ]]; do
            ((SECONDS < deadline)) || nodes_broken "$name not ready after ${GL_NODES_START_TIMEOUT} s: $(cat "$GL_NODES_DIR/$name.log")"
            kill -0 "$(cat "$GL_NODES_DIR/$name.pid")" 2>/dev/null ||
                nodes_broken "$name's holder exited: $(cat "$GL_NODES_DIR/$name.log")"
            sleep 0.05
        done
        got=$(nodes_exec "$name" hostname)
        [[ $got == "$name" ]] || nodes_broken "$name calls itself '$got'"
    done
}

# nodes_stop: end every process on the nodes, delete their namespaces. Idempotent; quiet.
nodes_stop() {
    local i ns pids
    for ((i = ${#GL_NODES_ATEXIT[@]} - 1; i >= 0; i--)); do
        eval "${GL_NODES_ATEXIT[i]}" || true
    done
    GL_NODES_ATEXIT=()
    [[ -n $GL_NODES_TAG ]] || return 0
    for ns in $(ip netns list 2>/dev/null | awk -v t="$GL_NODES_TAG-" 'index($1, t) == 1 { print $1 }'); do
        # Every process in a glns-TAG namespace is this test's: its holder and what ran there
        # (orted daemonizes; a cut-off node's ranks and slurmstepd stay behind).
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        # shellcheck disable=SC2086 # one word per pid
        [[ -n ${pids// /} ]] && kill -KILL $pids 2>/dev/null
        ip netns del "$ns" 2>/dev/null || true
    done
    GL_NODES_TAG=
}

# nodes_start N SLOTS: N nodes (2-4) of SLOTS slots each. Sets GL_NODES, GL_NODES_TAG,
# GL_NODES_DIR, GL_NODES_LOCAL, GL_NODES_START_SECONDS; exports GL_NODES_DIR for ns_agent.sh.
nodes_start() {
    local n=$1 slots=$2 why t0 k
    ((n >= 2 && n <= 4)) || fail "nodes_start: 2 to 4 nodes, not $n"
    why=$(nodes_why_not)
    [[ -z $why ]] || skip "multi-node harness: $why"
    t0=$(date +%s%N)
    # A tag no namespace has yet (tests run in parallel under ctest -j).
    while :; do
        GL_NODES_TAG=glns-$(printf '%04x' $((RANDOM % 65536)))
        ip netns list | grep -q "^$GL_NODES_TAG-" || break
    done
    GL_NODES_DIR=$GL_TMP/nodes
    GL_NODES_SLOTS=$slots
    GL_NODES_LOCAL=$GL_NODES_DIR/local
    mkdir -p "$GL_NODES_LOCAL"
    export GL_NODES_DIR
    GL_NODES=()
    for ((k = 0; k < n; k++)); do GL_NODES+=("$GL_NODES_TAG-n$((k + 1))"); done
    trap 'nodes_stop; gl_cleanup' EXIT
    # Killed outright (ctest's timeout sends SIGKILL): the namespaces still go once this shell is gone.
    (
        trap '' INT TERM
        while kill -0 "$$" 2>/dev/null; do sleep 1; done
        nodes_stop
        rm -rf "$GL_NODES_DIR" # staged copies and logs (common.sh's GL_TMP cleanup did not run either)
    ) </dev/null >/dev/null 2>&1 &
    disown $! 2>/dev/null || true

    if ! { ip netns add "$GL_NODES_TAG-sw" && ip -n "$GL_NODES_TAG-sw" link add br0 type bridge &&
        ip -n "$GL_NODES_TAG-sw" link set br0 up; }; then
        nodes_broken "could not make the switch namespace and its bridge"
    fi
    nodes_write_files "$slots"
    for ((k = 0; k < n; k++)); do nodes_add "$k"; done
    nodes_wait_ready
    GL_NODES_START_SECONDS=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    info "$n nodes up in ${GL_NODES_START_SECONDS} s: ${GL_NODES[*]} on $GL_NODES_NET.0/24," \
        "$slots slots each, node-local storage at $GL_NODES_LOCAL"
}

# nodes_mpirun ARGS...: mpirun on the first node across all nodes (the hostfile's slots; add
# --oversubscribe for more), ended after GL_NODES_MPI_TIMEOUT seconds (exit 124) so that a hang
# cannot eat ctest's time. Open MPI's TCP (btl and oob) keeps to the bridge's subnet.
nodes_mpirun() {
    nodes_exec "${GL_NODES[0]}" timeout "$GL_NODES_MPI_TIMEOUT" mpirun --allow-run-as-root --hostfile "$GL_NODES_DIR/hostfile" --bind-to none \
        --mca plm_rsh_agent "$GL_NODES_AGENT" --mca plm_rsh_no_tree_spawn 1 \
        --mca btl_tcp_if_include "$GL_NODES_NET.0/24" --mca oob_tcp_if_include "$GL_NODES_NET.0/24" "$@"
}

# nodes_check_mpi: mpirun across the nodes runs `hostname` GL_NODES_SLOTS times on each node.
# Sets GL_NODES_MPIRUN_SECONDS.
nodes_check_mpi() {
    local out want got t0 name k
    t0=$(date +%s%N)
    # stdout only: Open MPI may warn on stderr (plm:rsh's setpgid races the agent's exec: harmless).
    out=$(nodes_mpirun hostname 2>"$GL_NODES_DIR/check_mpi.err") ||
        nodes_broken "mpirun hostname across the nodes failed: $out $(cat "$GL_NODES_DIR/check_mpi.err")"
    GL_NODES_MPIRUN_SECONDS=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    want=$(for name in "${GL_NODES[@]}"; do
        for ((k = 0; k < GL_NODES_SLOTS; k++)); do echo "$name"; done
    done | sort | tr '\n' ' ')
    got=$(sort <<<"$out" | tr '\n' ' ')
    [[ $got == "$want" ]] || nodes_broken "mpirun hostname printed '$got', expected '$want'"
    info "mpirun across ${#GL_NODES[@]} nodes: hostname ran on ${got% } in ${GL_NODES_MPIRUN_SECONDS} s"
}

# nodes_sysctl NODE KEY=VALUE...: network settings of NODE's kernel (net.*, which belong to its
# network namespace; the machine's own stay as they are).
nodes_sysctl() {
    local node=$1
    shift
    nodes_exec "$node" sysctl -qw "$@" || nodes_broken "sysctl -w $* on $node failed"
}

# nodes_cut NODE / nodes_mend NODE: NODE's link down (cut off from every other node) or up again.
nodes_cut() { ip -n "$1" link set eth0 down; }
nodes_mend() { ip -n "$1" link set eth0 up; }

# nodes_pids NODE [PATTERN]: the processes on NODE (whose command line matches PATTERN), one a line.
nodes_pids() {
    local pid
    for pid in $(ip netns pids "$1" 2>/dev/null); do
        [[ -z ${2:-} ]] || tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qE "$2" || continue
        echo "$pid"
    done
}

# ---- for the tests: two runs that must be the same -----------------------------------------------

# nodes_losses RUN_DIR: "kind step loss" per train/eval record of RUN_DIR/metrics.jsonl, as written.
nodes_losses() {
    sed -nE 's/^\{"kind":"(train|eval)".*"step":([0-9]+),.*"loss":([^,}]+).*$/\1 \2 \3/p' "$1/metrics.jsonl"
}

# nodes_same_training A B WHAT: runs A and B (run directory X, checkpoints in ck-X) logged the same
# losses, as text, and their final checkpoints hold bitwise the same /params and /optim (h5diff).
# Fails saying how they differ; sets GL_NODES_SAME to what was compared.
nodes_same_training() {
    local a=$1 b=$2 what=$3 la lb group
    la=$(nodes_losses "$a")
    lb=$(nodes_losses "$b")
    [[ -n $la ]] || fail "$what: $a/metrics.jsonl has no losses"
    [[ $la == "$lb" ]] || fail "$what: losses differ (deterministic mode wants them bitwise equal):
$(diff <(echo "$la") <(echo "$lb") | head -20)"
    local -a ck_a=(ck-"$a"/*.h5) ck_b=(ck-"$b"/*.h5)
    [[ -f ${ck_a[-1]} && $(basename "${ck_a[-1]}") == "$(basename "${ck_b[-1]}")" ]] ||
        fail "$what: final checkpoints '${ck_a[*]}' vs '${ck_b[*]}'"
    for group in /params /optim; do
        h5diff -r "${ck_a[-1]}" "${ck_b[-1]}" "$group" "$group" >"$GL_TMP/h5diff.out" 2>&1 ||
            fail "$what: final checkpoints differ in $group: $(head -n 20 "$GL_TMP/h5diff.out")"
    done
    # shellcheck disable=SC2034 # for the test that calls it
    GL_NODES_SAME="$(grep -c . <<<"$la") losses as text, /params and /optim of $(basename "${ck_a[-1]}") bitwise"
}
