#!/usr/bin/env bash
# Records which algorithm MPICH picks by default, at message sizes on both
# sides of every threshold of its selection, and writes auto.tsv next to
# this script.
#
#   bash scripts/mpich-schedules/record-auto.sh
#
# For each P, one launch runs every case with no algorithm CVAR (the default
# choice; MPIR_CVAR_DEVICE_COLLECTIVES left at its default) and up to three
# launches run the same cases with each algorithm forced, as record.sh does.
# collate.py checks all recordings; match_auto.py then names, for each
# default case, the forced algorithm whose schedule is identical.
#
# Environment: PS="4 7 ..." limits the process counts; MPIEXEC overrides the
# launcher (default mpiexec.mpich); KEEP=DIR also writes the merged schedule
# table of every run to DIR/auto-schedules.tsv (not kept in the repository).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PS="${PS:-4 7 8 9 12 16}"
MPIEXEC="${MPIEXEC:-mpiexec.mpich}"

# MPI_INT counts chosen to straddle MPICH 4.0.2's selection thresholds
# (maint/tuning/coll/mpir/generic.json and ch4/generic.json at v4.0.2).
declare -A COUNTS=(
    [allreduce]="1 2 3 16 1000"                          # 8 bytes; count < pof2
    [reduce]="100 512 513 4096"                           # 2048 bytes; count < pof2
    [bcast]="1000 3072 3073 131072 131073"                # 12288 and 524288 bytes
    [allgather]="10 1000 1204 1205 2048 8192 8193"        # count*4*P vs 81920, 524288
    [reduce_scatter_block]="100 2048 8191 8192 8193"      # count*4*P vs 524288
    [alltoall]="16 64 65 8192 8193"                       # per pair vs 256, 32768 bytes
    [barrier]="0"
)
declare -A ALGOS=(
    [allreduce]="recursive_doubling reduce_scatter_allgather"
    [bcast]="binomial scatter_recursive_doubling_allgather scatter_ring_allgather"
    [reduce]="binomial reduce_scatter_gather"
    [allgather]="recursive_doubling brucks ring"
    [reduce_scatter_block]="recursive_halving pairwise recursive_doubling"
    [alltoall]="brucks pairwise scattered"
    [barrier]="dissemination"
)
COLLS="allreduce bcast reduce allgather reduce_scatter_block alltoall barrier"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/mpich-auto.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

gcc -O2 -Wall -shared -fPIC -o "$WORK/librecorder.so" "$HERE/recorder.c" -ldl
mpicc.mpich -O2 -Wall -o "$WORK/colltest" "$HERE/colltest.c" -ldl

specs_for() { # coll
    local c
    for c in ${COUNTS[$1]}; do echo "$1:$c:0"; done
}

run_one() { # dir p envs... -- specs...
    local dir=$1 p=$2
    shift 2
    local envs=()
    while [[ $1 != -- ]]; do envs+=("$1"); shift; done
    shift
    mkdir -p "$dir"
    if ! env "${envs[@]}" REC_DIR="$dir" timeout 600 \
        "$MPIEXEC" -n "$p" -bind-to none -genv LD_PRELOAD "$WORK/librecorder.so" \
        "$WORK/colltest" "$@" 2>"$dir/stderr" >"$dir/stdout"; then
        echo "run failed: $dir" >&2
        cat "$dir/stderr" >&2
        exit 1
    fi
}

RUNS=()
start=$(date +%s)
for p in $PS; do
    # MPICH's default choice: no algorithm CVAR, device collectives as shipped.
    specs=()
    for coll in $COLLS; do
        mapfile -t s < <(specs_for "$coll")
        specs+=("${s[@]}")
    done
    dir="$WORK/p$p-auto"
    run_one "$dir" "$p" MPIR_CVAR_NOLOCAL=1 -- "${specs[@]}"
    RUNS+=("$dir")

    # Candidates: every algorithm forced in turn, exactly as in record.sh.
    for g in 0 1 2; do
        envs=(MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_DEVICE_COLLECTIVES=none
              MPIR_CVAR_COLLECTIVE_FALLBACK=print)
        specs=()
        for coll in $COLLS; do
            read -r -a list <<<"${ALGOS[$coll]}"
            [[ $g -lt ${#list[@]} ]] || continue
            envs+=("MPIR_CVAR_${coll^^}_INTRA_ALGORITHM=${list[$g]}")
            mapfile -t s < <(specs_for "$coll")
            specs+=("${s[@]}")
        done
        dir="$WORK/p$p-g$g"
        run_one "$dir" "$p" "${envs[@]}" -- "${specs[@]}"
        RUNS+=("$dir")
    done
    echo "p=$p done ($(( $(date +%s) - start ))s)" >&2
done

# collate.py checks every recording (endpoints mapped, one context id per
# case, sends pair with receives) and lists the forced runs MPICH refused.
python3 "$HERE/collate.py" "$WORK/schedules.tsv" "$WORK/fallbacks.tsv" "${RUNS[@]}"
python3 "$HERE/match_auto.py" "$WORK/schedules.tsv" "$WORK/fallbacks.tsv" "$HERE/auto.tsv"
if [[ -n "${KEEP:-}" ]]; then
    mkdir -p "$KEEP"
    cp "$WORK/schedules.tsv" "$KEEP/auto-schedules.tsv"
    cp "$WORK/fallbacks.tsv" "$KEEP/auto-fallbacks.tsv"
fi
