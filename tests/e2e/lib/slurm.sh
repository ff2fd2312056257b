# shellcheck shell=bash
# slurm.sh: a private one-node Slurm on localhost for the tests that launch galley with srun.
# Source it after common.sh (it uses GL_TMP, info, skip, fail and gl_cleanup):
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib/slurm.sh"
#   slurm_start              # skips (77) without root or the binaries; fails if they are there
#                            # and Slurm still does not come up; exports SLURM_CONF
#   slurm_check_mpi          # srun -n 2 --mpi=$GL_SLURM_MPI: hostname and an MPI hello-world
#   srun -n 2 --mpi="$GL_SLURM_MPI" "$GALLEY" train ...
#   srun --overcommit -n 4 ...   # more tasks than the node's CPUs
#
# Everything lives in one temporary directory (GL_SLURM_DIR): slurm.conf, state, spool, logs, and
# munged's own key, socket, pid and seed files, so the system's Slurm and munge (if any) are
# neither used nor touched. Ports are chosen among the free ones, so parallel tests and a system
# slurmctld do not clash. slurm_stop (run by the EXIT trap that slurm_start sets in place of
# common.sh's, which it still calls) ends the daemons and removes the directory; a watchdog does the same if the test is killed outright
# (ctest's timeout). Needs: root (slurmd must be able to start tasks as any user), slurmctld,
# slurmd, srun, sinfo, scontrol, scancel (Debian: slurm-wlm), munged (Debian: munge) and setpriv;
# build.sh installs them for `./build.sh test`. Variables other than SLURM_CONF are GL_SLURM_*,
# never SLURM_*, which srun would read as options.

GL_SLURM_MPI=pmix  # the srun --mpi plugin that Open MPI 4.1 in Debian 12 speaks
GL_SLURM_START_TIMEOUT=30  # seconds to wait for the node to become idle
GL_SLURM_DIR=
GL_SLURM_PIDS=()

# slurm_why_not: why this machine cannot run the private Slurm (empty output: it can).
slurm_why_not() {
    if [[ $(id -u) -ne 0 ]]; then
        echo "needs root (slurmd runs job steps as the submitting user and must be able to switch)"
        return
    fi
    local c missing=()
    for c in slurmctld slurmd srun sinfo scontrol scancel munged setpriv; do
        command -v "$c" >/dev/null 2>&1 || missing+=("$c")
    done
    if ((${#missing[@]})); then
        echo "needs ${missing[*]} (Debian: apt-get install slurm-wlm munge; ./build.sh test does)"
        return
    fi
    id munge >/dev/null 2>&1 || echo "needs the 'munge' user (Debian's munge package makes it)"
}

# slurm_listening: the TCP ports something listens on, one per line (from /proc, so no ss/netstat).
slurm_listening() {
    local f local_addr st
    for f in /proc/net/tcp /proc/net/tcp6; do
        [[ -r $f ]] || continue
        # columns: sl local_address(ip:PORT, hex) rem_address st(0A = LISTEN) ...
        while read -r _ local_addr _ st _; do
            [[ $st == 0A ]] && echo $((16#${local_addr##*:}))
        done < <(tail -n +2 "$f")
    done
}

# slurm_free_ports N: N distinct ports nobody listens on, below Linux's ephemeral range
# (32768-60999), so an outgoing connection cannot be holding one either.
slurm_free_ports() {
    local n=$1 used p out=()
    used=" $(slurm_listening | tr '\n' ' ') "
    while ((${#out[@]} < n)); do
        p=$((20000 + RANDOM % 12000))
        [[ $used == *" $p "* || " ${out[*]} " == *" $p "* ]] && continue
        out+=("$p")
    done
    echo "${out[@]}"
}

# slurm_write_conf HOST CPUS CTLD_PORT SLURMD_PORT: $GL_SLURM_DIR/slurm.conf.
slurm_write_conf() {
    local host=$1 cpus=$2 ctld_port=$3 slurmd_port=$4 d=$GL_SLURM_DIR
    # Why each line: linuxproc/none need no cgroups (this machine's hybrid cgroups and CI's
    # container have none usable); cons_tres + CR_CPU schedules single CPUs so two 1-CPU tasks fit
    # on a 2-CPU node; OverSubscribe lets a test ask for more tasks than CPUs with
    # `srun --overcommit`; NodeAddr/SlurmctldHost pin 127.0.0.1 so no DNS lookup is needed;
    # TmpFS keeps the PMIx plugin's files in here; a short KillWait (SIGTERM to SIGKILL on
    # cancel or time limit) frees the node soon after a failed step (galley checkpoints on SIGTERM
    # in far less than 2 s for the test models).
    cat >"$d/slurm.conf" <<EOF
# written by tests/e2e/lib/slurm.sh for one test run; removed when the test ends
ClusterName=galleytest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$d/munge/munged.socket
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
TmpFS=$d/tmp
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
PropagateResourceLimits=NONE
ReturnToService=2
MailProg=/bin/true
InactiveLimit=0
KillWait=2
MinJobAge=30
SchedulerType=sched/builtin
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=galley Nodes=$host Default=YES MaxTime=INFINITE OverSubscribe=YES State=UP
EOF
}

# slurm_logs: each daemon's log (last lines), on stderr, for a failure report. The log file when
# the daemon got as far as opening it, else what it printed before.
slurm_logs() {
    local name f
    for name in munged slurmctld slurmd; do
        f=$GL_SLURM_DIR/log/$name.log
        [[ $name == munged ]] && f=$GL_SLURM_DIR/munge/munged.log
        [[ -s $f ]] || f=$GL_SLURM_DIR/log/$name.out
        [[ -s $f ]] || continue
        echo "  --- $f (last 25 lines) ---"
        tail -n 25 "$f" | sed 's/^/  | /'
    done >&2
}

# slurm_broken MSG: the harness could not be set up although root and the binaries are there.
# That is a failure, not a skip: CI has both, and a broken harness must not hide as a skip.
slurm_broken() {
    echo "  slurm.conf: $GL_SLURM_DIR/slurm.conf" >&2
    slurm_logs
    fail "private Slurm: $*"
}

# slurm_ours PID: PID is one of this harness's daemons (its command line names GL_SLURM_DIR), so a
# recycled pid is never killed.
slurm_ours() {
    [[ -n $GL_SLURM_DIR && -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qF "$GL_SLURM_DIR"
}

# slurm_alive PID: PID runs (a zombie does not: once the test shell is gone, its daemons' zombies
# wait for init to reap them).
slurm_alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# slurm_kill: end the daemons and remove GL_SLURM_DIR. Idempotent. Newest first, each waited
# for: slurmd and slurmctld still talk to munged while they shut down (killing all three at once
# makes them wait seconds for it).
slurm_kill() {
    local i t pid
    for ((i = ${#GL_SLURM_PIDS[@]} - 1; i >= 0; i--)); do
        pid=${GL_SLURM_PIDS[i]}
        slurm_ours "$pid" || continue
        kill -TERM "$pid" 2>/dev/null || continue
        for ((t = 0; t < 100; t++)); do
            slurm_alive "$pid" || break
            sleep 0.1
        done
        slurm_alive "$pid" && kill -KILL "$pid" 2>/dev/null
    done
    GL_SLURM_PIDS=()
    if [[ -n $GL_SLURM_DIR && -d $GL_SLURM_DIR ]]; then
        rm -rf "$GL_SLURM_DIR"
    fi
    GL_SLURM_DIR=
}

# slurm_stop: cancel what is still queued or running, then slurm_kill.
slurm_stop() {
    if ((${#GL_SLURM_PIDS[@]})) && [[ -n ${SLURM_CONF:-} ]]; then
        timeout 5 scancel --quiet --full --user=root >/dev/null 2>&1 || true
    fi
    slurm_kill
    unset SLURM_CONF
}

# slurm_wait_idle HOST: wait (bounded) until sinfo shows HOST idle.
slurm_wait_idle() {
    local host=$1 state="" deadline=$((SECONDS + GL_SLURM_START_TIMEOUT)) pid
    while ((SECONDS < deadline)); do
        for pid in "${GL_SLURM_PIDS[@]}"; do
            slurm_alive "$pid" || slurm_broken "a daemon (pid $pid) exited during start-up"
        done
        state=$(timeout 5 sinfo --noheader --nodes="$host" --format=%t 2>/dev/null || true)
        [[ $state == idle ]] && return 0
        sleep 0.2
    done
    slurm_broken "node $host not idle after ${GL_SLURM_START_TIMEOUT} s (sinfo says '${state:-nothing}')"
}

# slurm_start: set up and start munged, slurmctld and slurmd; return once the node is idle.
# Sets GL_SLURM_DIR, GL_SLURM_NODE, GL_SLURM_CPUS, GL_SLURM_START_SECONDS; exports SLURM_CONF.
slurm_start() {
    local why t0 host cpus ctld_port slurmd_port d
    why=$(slurm_why_not)
    [[ -z $why ]] || skip "private Slurm: $why"
    t0=$(date +%s%N)

    # A test started inside a real Slurm job would otherwise run its steps in that job.
    local v
    for v in $(compgen -e | grep '^SLURM_' || true); do
        unset "$v"
    done

    host=$(hostname -s)
    cpus=$(nproc)
    read -r ctld_port slurmd_port <<<"$(slurm_free_ports 2)"
    GL_SLURM_DIR=$(mktemp -d "${TMPDIR:-/tmp}/galley-slurm.XXXXXX")
    d=$GL_SLURM_DIR
    # munged (running as munge) must reach its own directory, insists that no directory on the
    # way to its key and socket is writable by others (hence 0711, not 0777), and wants its socket
    # directory open to all for execute (0755).
    chmod 0711 "$d"
    mkdir -p "$d/state" "$d/spool" "$d/tmp" "$d/run" "$d/log" "$d/munge"
    dd if=/dev/urandom of="$d/munge/munged.key" bs=1024 count=1 status=none
    chmod 0400 "$d/munge/munged.key"
    chown -R munge:munge "$d/munge"
    chmod 0755 "$d/munge"
    slurm_write_conf "$host" "$cpus" "$ctld_port" "$slurmd_port"
    export SLURM_CONF=$d/slurm.conf
    # For the tests that source this file:
    # shellcheck disable=SC2034
    GL_SLURM_NODE=$host GL_SLURM_CPUS=$cpus

    trap 'slurm_stop; gl_cleanup' EXIT

    # Each daemon in the foreground (-F / -D) in the background, so its pid is $!.
    setpriv --reuid=munge --regid=munge --init-groups \
        munged --foreground --socket="$d/munge/munged.socket" --key-file="$d/munge/munged.key" \
        --pid-file="$d/munge/munged.pid" --seed-file="$d/munge/munged.seed" \
        --log-file="$d/munge/munged.log" </dev/null >"$d/log/munged.out" 2>&1 &
    GL_SLURM_PIDS+=($!)
    local i
    for ((i = 0; i < 50; i++)); do
        [[ -S $d/munge/munged.socket ]] && break
        slurm_alive "${GL_SLURM_PIDS[0]}" || break
        sleep 0.1
    done
    if [[ ! -S $d/munge/munged.socket ]]; then
        slurm_broken "munged did not create its socket $d/munge/munged.socket (within 5 s)"
    fi
    slurmctld -D -i -f "$SLURM_CONF" </dev/null >"$d/log/slurmctld.out" 2>&1 &
    GL_SLURM_PIDS+=($!)
    slurmd -D -f "$SLURM_CONF" -N "$host" </dev/null >"$d/log/slurmd.out" 2>&1 &
    GL_SLURM_PIDS+=($!)
    # If the test is killed without running its EXIT trap (ctest's timeout sends SIGKILL), the
    # watchdog still ends the daemons once this shell is gone.
    (
        trap '' INT TERM
        while kill -0 "$$" 2>/dev/null; do sleep 1; done
        slurm_kill
    ) </dev/null >/dev/null 2>&1 &
    disown $! 2>/dev/null || true
    slurm_wait_idle "$host"

    GL_SLURM_START_SECONDS=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    info "private Slurm up in ${GL_SLURM_START_SECONDS} s: node $host, $cpus CPUs," \
        "ports $ctld_port/$slurmd_port, $d"
    srun --mpi=list 2>&1 | grep -qw "$GL_SLURM_MPI" ||
        slurm_broken "srun --mpi=list does not offer '$GL_SLURM_MPI': $(srun --mpi=list 2>&1 | tr '\n' ' ')"
}

# slurm_check_mpi: the harness itself launches MPI programs: `srun -n 2 --mpi=$GL_SLURM_MPI hostname`
# gives two lines, and a tiny MPI program reports ranks 0 and 1 of size 2. Sets GL_SLURM_SRUN_SECONDS
# (the wall time of the hostname step: srun's own launch overhead).
slurm_check_mpi() {
    local out t0 src=$GL_SLURM_DIR/mpi_hello.c exe=$GL_SLURM_DIR/mpi_hello
    t0=$(date +%s%N)
    out=$(timeout 60 srun -n 2 --mpi="$GL_SLURM_MPI" hostname 2>&1) ||
        slurm_broken "srun -n 2 --mpi=$GL_SLURM_MPI hostname failed: $out"
    GL_SLURM_SRUN_SECONDS=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
    [[ $(grep -c . <<<"$out") -eq 2 ]] ||
        slurm_broken "srun -n 2 hostname printed '$out', expected two lines"
    info "srun -n 2 --mpi=$GL_SLURM_MPI hostname: ${GL_SLURM_SRUN_SECONDS} s"

    command -v mpicc >/dev/null 2>&1 || {
        info "no mpicc: MPI hello-world under srun not checked"
        return 0
    }
    cat >"$src" <<'EOF'
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    printf("rank %d of %d\n", rank, size);
    MPI_Finalize();
    return 0;
}
EOF
    out=$(mpicc -o "$exe" "$src" 2>&1) || slurm_broken "mpicc could not build an MPI hello-world: $out"
    t0=$(date +%s%N)
    out=$(timeout 60 srun -n 2 --mpi="$GL_SLURM_MPI" "$exe" 2>&1) ||
        slurm_broken "srun -n 2 --mpi=$GL_SLURM_MPI mpi_hello failed: $out"
    local got
    got=$(grep -E '^rank [0-9]+ of [0-9]+$' <<<"$out" | sort | tr '\n' ',')
    [[ $got == "rank 0 of 2,rank 1 of 2," ]] ||
        slurm_broken "srun -n 2 --mpi=$GL_SLURM_MPI mpi_hello printed '$out', expected ranks 0 and 1 of 2"
    info "srun -n 2 --mpi=$GL_SLURM_MPI MPI hello-world: ranks 0 and 1 of 2 in" \
        "$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.2f", (b - a) / 1e9 }') s"
}
