# shellcheck shell=bash
# slurm_nodes.sh: a private Slurm across the nodes of lib/nodes.sh: slurmctld and a slurmd on the
# first node, a slurmd on each other node (its own NodeName and address), munged on the machine
# (its socket is a file, reachable from every node). Source it after common.sh and nodes.sh:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm_nodes.sh"
#   nodes_start 2 2
#   slurm_nodes_start                  # skips (77) without root or the binaries, like slurm_start
#   slurm_nodes_check_mpi              # srun -N 2 across the nodes: hostname and an MPI hello-world
#   slurm_nodes_srun -N 2 -n 4 --mpi="$GL_SLURM_MPI" "$GALLEY" train ...   # from the first node
#
# It reuses lib/slurm.sh (slurm_why_not, slurm_kill, GL_SLURM_DIR/GL_SLURM_PIDS, GL_SLURM_MPI) and
# keeps its rules: everything in one temporary directory, the system's Slurm and munge untouched,
# a failure to come up with root and the binaries present is a failure, not a skip. What a node
# keeps for itself (slurmd's spool, TmpFS for the PMIx plugin) is in node-local storage
# (GL_NODES_LOCAL), as on a cluster: the two slurmds would otherwise share one spool. The daemons
# listen on Slurm's default ports, each node being its own network namespace. Commands that talk
# to Slurm (srun, sinfo, scancel) run on a node: the machine itself has no route to them.

# shellcheck source=tests/e2e/lib/slurm.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm.sh"

GL_SLURM_NODES_TIMEOUT=120   # seconds slurm_nodes_srun may run

# slurm_nodes_write_conf CPUS: $GL_SLURM_DIR/slurm.conf for GL_NODES, the first the controller:
# lib/slurm.sh's one-node slurm.conf (its lines, for the reasons it gives there) on Slurm's default
# ports, with the controller, the nodes and the partition replaced, and slurmd's spool, TmpFS, pid
# and log files made per node.
slurm_nodes_write_conf() {
    local cpus=$1 f=$GL_SLURM_DIR/slurm.conf k nodes=""
    slurm_write_conf "${GL_NODES[0]}" "$cpus" 6817 6818
    for k in "${!GL_NODES[@]}"; do
        nodes+="NodeName=${GL_NODES[k]} NodeAddr=$(nodes_addr "$k") CPUs=$cpus State=UNKNOWN\n"
    done
    awk -v ctl="${GL_NODES[0]}($(nodes_addr 0))" -v nodes="$nodes" -v loc="$GL_NODES_LOCAL/slurm" '
        /^# written by/ { print "# written by tests/e2e/lib/slurm_nodes.sh (from lib/slurm.sh'"'"'s); removed when the test ends"; next }
        /^SlurmctldHost=/ { print "SlurmctldHost=" ctl; next }
        /^SlurmdSpoolDir=/ { print "SlurmdSpoolDir=" loc "/spool"; next }
        /^TmpFS=/ { print "TmpFS=" loc "/tmp"; next }
        /^Slurmd(PidFile|LogFile)=/ { sub(/slurmd\./, "slurmd-%n."); print; next }
        /^NodeName=/ { printf "%s", nodes; next }
        /^PartitionName=/ { sub(/Nodes=[^ ]+/, "Nodes=ALL"); print; next }
        { print }' "$f" >"$f.nodes" && mv "$f.nodes" "$f"
    if ! grep -q "^NodeName=${GL_NODES[-1]} " "$f" || ! grep -q '^SlurmdLogFile=.*slurmd-%n.log$' "$f"; then
        slurm_nodes_broken "lib/slurm.sh's slurm.conf did not take the 2-node edits (has its layout changed?)"
    fi
}

# slurm_nodes_logs: each daemon's log (last lines), on stderr, for a failure report.
slurm_nodes_logs() {
    local f
    for f in "$GL_SLURM_DIR"/munge/munged.log "$GL_SLURM_DIR"/log/*; do
        [[ -s $f ]] || continue
        echo "  --- $f (last 15 lines) ---"
        tail -n 15 "$f" | sed 's/^/  | /'
    done >&2
}

# slurm_nodes_broken MSG: the private Slurm did not come up although it could have.
slurm_nodes_broken() {
    echo "  slurm.conf: $GL_SLURM_DIR/slurm.conf" >&2
    slurm_nodes_logs
    fail "private 2-node Slurm: $*"
}

# slurm_nodes_stop: end the daemons and remove GL_SLURM_DIR. Idempotent. The cluster is thrown
# away with the nodes, so slurmctld and the slurmds get SIGKILL (a graceful stop, with a node cut
# off, takes seconds), and so does every job step on the nodes (nodes_stop); then munged, last,
# by lib/slurm.sh's slurm_kill.
slurm_nodes_stop() {
    local pid
    for pid in "${GL_SLURM_PIDS[@]:1}"; do
        slurm_ours "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
    done
    # Quiet: slurm_ours may read the command line of a daemon that is just going away.
    slurm_kill 2>/dev/null
    unset SLURM_CONF
}

# slurm_nodes_munged: munged with its own key and socket in GL_SLURM_DIR/munge (as lib/slurm.sh's).
slurm_nodes_munged() {
    local d=$GL_SLURM_DIR i
    mkdir -p "$d/munge"
    dd if=/dev/urandom of="$d/munge/munged.key" bs=1024 count=1 status=none
    chmod 0400 "$d/munge/munged.key"
    chown -R munge:munge "$d/munge"
    chmod 0755 "$d/munge"
    setpriv --reuid=munge --regid=munge --init-groups \
        munged --foreground --socket="$d/munge/munged.socket" --key-file="$d/munge/munged.key" \
        --pid-file="$d/munge/munged.pid" --seed-file="$d/munge/munged.seed" \
        --log-file="$d/munge/munged.log" </dev/null >"$d/log/munged.out" 2>&1 &
    GL_SLURM_PIDS+=($!)
    disown $! 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do
        [[ -S $d/munge/munged.socket ]] && return 0
        slurm_alive "${GL_SLURM_PIDS[-1]}" || break
        sleep 0.1
    done
    slurm_nodes_broken "munged did not create its socket $d/munge/munged.socket (within 5 s)"
}

# slurm_nodes_wait_idle: wait (bounded) until sinfo shows every node idle.
slurm_nodes_wait_idle() {
    local state="" deadline=$((SECONDS + GL_SLURM_START_TIMEOUT)) pid n=${#GL_NODES[@]}
    while ((SECONDS < deadline)); do
        for pid in "${GL_SLURM_PIDS[@]}"; do
            slurm_alive "$pid" || slurm_nodes_broken "a daemon (pid $pid) exited during start-up"
        done
        state=$(nodes_exec "${GL_NODES[0]}" timeout 5 sinfo --noheader --format='%t %D' 2>/dev/null || true)
        [[ $state == "idle $n" ]] && return 0
        sleep 0.2
    done
    slurm_nodes_broken "the $n nodes are not idle after ${GL_SLURM_START_TIMEOUT} s (sinfo says '${state:-nothing}')"
}

# slurm_nodes_start: munged, slurmctld and one slurmd per node; returns once every node is idle.
# Sets GL_SLURM_DIR, GL_SLURM_NODES_START_SECONDS; exports SLURM_CONF.
slurm_nodes_start() {
    local why t0 d v k cpus
    ((${#GL_NODES[@]} >= 2)) || fail "slurm_nodes_start: start the nodes first (nodes_start)"
    why=$(slurm_why_not)
    [[ -z $why ]] || skip "private Slurm: $why"
    t0=$(date +%s%N)
    for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done
    cpus=$(nproc)
    GL_SLURM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/galley-slurm.XXXXXX")
    d=$GL_SLURM_DIR
    chmod 0711 "$d" # munged (user munge) must reach its folder; see lib/slurm.sh
    mkdir -p "$d/state" "$d/run" "$d/log"
    for k in "${!GL_NODES[@]}"; do mkdir -p "$GL_NODES_DIR/${GL_NODES[k]}/local/slurm/spool" \
        "$GL_NODES_DIR/${GL_NODES[k]}/local/slurm/tmp"; done
    slurm_nodes_write_conf "$cpus"
    export SLURM_CONF=$d/slurm.conf
    GL_NODES_ATEXIT+=(slurm_nodes_stop)

    slurm_nodes_munged
    nodes_spawn "${GL_NODES[0]}" slurmctld -D -i -f "$SLURM_CONF" </dev/null >"$d/log/slurmctld.out" 2>&1
    GL_SLURM_PIDS+=("$GL_NODES_SPAWNED")
    for k in "${!GL_NODES[@]}"; do
        nodes_spawn "${GL_NODES[k]}" slurmd -D -f "$SLURM_CONF" -N "${GL_NODES[k]}" </dev/null \
            >"$d/log/slurmd-${GL_NODES[k]}.out" 2>&1
        GL_SLURM_PIDS+=("$GL_NODES_SPAWNED")
    done
    # Killed outright: lib/nodes.sh's watchdog ends what runs on the nodes; this one munged (it
    # sees GL_SLURM_PIDS as they are now, so it starts after the daemons).
    (
        trap '' INT TERM
        while kill -0 "$$" 2>/dev/null; do sleep 1; done
        slurm_kill
    ) </dev/null >/dev/null 2>&1 &
    disown $! 2>/dev/null || true
    slurm_nodes_wait_idle
    GL_SLURM_NODES_START_SECONDS=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    info "private Slurm on ${#GL_NODES[@]} nodes up in ${GL_SLURM_NODES_START_SECONDS} s: controller on" \
        "${GL_NODES[0]}, $cpus CPUs a node, $d"
    nodes_exec "${GL_NODES[0]}" srun --mpi=list 2>&1 | grep -qw "$GL_SLURM_MPI" ||
        slurm_nodes_broken "srun --mpi=list does not offer '$GL_SLURM_MPI'"
}

# slurm_nodes_srun ARGS...: srun ARGS on the first node, ended after GL_SLURM_NODES_TIMEOUT s (124).
slurm_nodes_srun() {
    nodes_exec "${GL_NODES[0]}" timeout "$GL_SLURM_NODES_TIMEOUT" srun "$@"
}

# slurm_nodes_check_mpi: `srun -N N -n 2N` runs hostname twice on every node, with SLURM_LOCALID 0
# and 1 on each. Sets GL_SLURM_NODES_SRUN_SECONDS.
slurm_nodes_check_mpi() {
    local n=${#GL_NODES[@]} out want t0 name
    t0=$(date +%s%N)
    # shellcheck disable=SC2016 # expanded by each task's shell
    out=$(slurm_nodes_srun -N "$n" -n $((2 * n)) --mpi="$GL_SLURM_MPI" bash -c 'echo "$(hostname) $SLURM_LOCALID"' \
        2>"$GL_SLURM_DIR/check_mpi.err") ||
        slurm_nodes_broken "srun -N $n -n $((2 * n)) hostname failed: $out $(cat "$GL_SLURM_DIR/check_mpi.err")"
    GL_SLURM_NODES_SRUN_SECONDS=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    want=$(for name in "${GL_NODES[@]}"; do echo "$name 0"; echo "$name 1"; done | sort | tr '\n' ',')
    [[ $(sort <<<"$out" | tr '\n' ',') == "$want" ]] ||
        slurm_nodes_broken "srun across the nodes printed '$(tr '\n' ',' <<<"$out")', expected '$want' (host, local id)"
    info "srun -N $n -n $((2 * n)) --mpi=$GL_SLURM_MPI: two tasks on each node in ${GL_SLURM_NODES_SRUN_SECONDS} s"
}
