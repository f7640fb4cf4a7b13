#!/usr/bin/env bash
# A one-node Slurm cluster for udrma's Slurm test (and for trying
# `udrma slurm submit` on a laptop): slurmctld and slurmd on this machine,
# authenticated by a munged of its own, everything under one directory.
#
#   bash scripts/slurm-cluster.sh start [DIR]   # prints the SLURM_CONF to export
#   bash scripts/slurm-cluster.sh stop  [DIR]
#
# DIR defaults to /tmp/udrma-slurm. Needs root and the distribution's
# packages (Debian/Ubuntu: slurm-wlm munge). Nothing outside DIR is
# touched: the munge key and socket, the state, the logs and slurm.conf
# all live there, so a machine that already runs munge or Slurm keeps its
# own (the daemons here use ports 16817 and 16818; override with
# UDRMA_SLURM_PORT, which takes the first of the two).
set -euo pipefail

cmd=${1:-}
dir=${2:-/tmp/udrma-slurm}
port=${UDRMA_SLURM_PORT:-16817}

die() { echo "slurm-cluster: $*" >&2; exit 1; }

stop() {
    for pid in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        if [ -s "$pid" ]; then
            kill "$(cat "$pid")" 2>/dev/null || true
        fi
    done
    # Give the daemons a moment, then make sure.
    for _ in $(seq 1 20); do
        alive=0
        for pid in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
            if [ -s "$pid" ] && kill -0 "$(cat "$pid")" 2>/dev/null; then alive=1; fi
        done
        [ "$alive" -eq 0 ] && break
        sleep 0.25
    done
    for pid in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
        if [ -s "$pid" ]; then
            kill -9 "$(cat "$pid")" 2>/dev/null || true
            rm -f "$pid"
        fi
    done
}

start() {
    [ "$(id -u)" -eq 0 ] || die "needs root (slurmd runs jobs as their users)"
    for tool in munged mungekey slurmctld slurmd sbatch sinfo; do
        command -v "$tool" >/dev/null 2>&1 \
            || die "$tool is missing (Debian/Ubuntu: apt-get install slurm-wlm munge)"
    done
    stop
    rm -rf "$dir"
    mkdir -p "$dir"/state "$dir"/spool "$dir"/munge
    chmod 700 "$dir" "$dir"/munge

    # A fresh key for this cluster only.
    mungekey --create --keyfile "$dir"/munge/munge.key --force >/dev/null
    chmod 400 "$dir"/munge/munge.key
    munged --force --key-file "$dir"/munge/munge.key \
        --socket "$dir"/munge/munge.socket \
        --pid-file "$dir"/munged.pid \
        --log-file "$dir"/munged.log \
        --seed-file "$dir"/munge/munge.seed \
        || die "munged did not start (see $dir/munged.log)"

    node=$(hostname -s)
    # What this machine has, as slurmd sees it (CPUs, sockets, memory).
    hw=$(slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ UpTime=.*//')
    cat > "$dir"/slurm.conf <<EOF
# Written by scripts/slurm-cluster.sh: a one-node cluster for udrma.
ClusterName=udrma
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
MaxArraySize=10001
NodeName=$node NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=udrma Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF=$dir/slurm.conf
    slurmctld -f "$SLURM_CONF" || die "slurmctld did not start (see $dir/slurmctld.log)"
    slurmd -f "$SLURM_CONF" -N "$node" || die "slurmd did not start (see $dir/slurmd.log)"
    for _ in $(seq 1 60); do
        state=$(sinfo -h -N -o '%T' 2>/dev/null | head -n 1 || true)
        case "$state" in
            idle*|mixed*|allocated*)
                echo "export SLURM_CONF=$SLURM_CONF"
                return 0
                ;;
        esac
        sleep 0.5
    done
    sinfo -N -l >&2 || true
    tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.log >&2 || true
    die "the node did not come up within 30 s (logs above)"
}

case "$cmd" in
    start) start ;;
    stop) stop ;;
    *) die "usage: $0 start|stop [DIR]" ;;
esac
