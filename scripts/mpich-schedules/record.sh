#!/usr/bin/env bash
# Records the point-to-point messages of MPICH's collective algorithms.
#
#   bash scripts/mpich-schedules/record.sh
#       forced algorithms, P = 2..17; writes schedules.tsv and fallbacks.tsv
#       next to this script.
#   bash scripts/mpich-schedules/record.sh --auto OUT_DIR
#       MPICH's own choice (no algorithm CVARs, device collectives left on);
#       writes OUT_DIR/auto.tsv.
#
# Environment: PS="2 3 ..." limits the process counts; MPIEXEC overrides the
# launcher (default mpiexec.mpich); NOLOCAL=0 with --auto records the
# single-node default (MPICH then sees all ranks on one node).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODE=forced
OUT_DIR="$HERE"
if [[ "${1:-}" == "--auto" ]]; then
    MODE=auto
    OUT_DIR="${2:?--auto needs an output directory}"
    mkdir -p "$OUT_DIR"
fi

PS="${PS:-$(seq 2 17)}"
COUNTS="1 5 16 100 1000"
MPIEXEC="${MPIEXEC:-mpiexec.mpich}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/mpich-schedules.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

gcc -O2 -Wall -shared -fPIC -o "$WORK/librecorder.so" "$HERE/recorder.c" -ldl
mpicc.mpich -O2 -Wall -o "$WORK/colltest" "$HERE/colltest.c" -ldl

# Algorithm names as MPICH 4.0.2 spells them in its CVARs; one run per
# column index, so each run forces at most one algorithm per collective.
declare -A ALGOS=(
    [allreduce]="recursive_doubling reduce_scatter_allgather"
    [iallreduce]="tsp_ring"
    [bcast]="binomial scatter_recursive_doubling_allgather scatter_ring_allgather"
    [reduce]="binomial reduce_scatter_gather"
    [allgather]="recursive_doubling brucks ring"
    [reduce_scatter_block]="recursive_halving pairwise recursive_doubling"
    [alltoall]="brucks pairwise scattered"
    [barrier]="dissemination"
)
COLLS="allreduce iallreduce bcast reduce allgather reduce_scatter_block alltoall barrier"

specs_for() { # coll algo p
    local coll=$1 algo=$2 p=$3 c
    if [[ $coll == barrier ]]; then
        echo "barrier:0:0"
        return
    fi
    for c in $COUNTS; do
        echo "$coll:$c:0"
        if [[ $p -gt 3 && $algo == binomial && ( $coll == bcast || $coll == reduce ) ]]; then
            echo "$coll:$c:3"
        fi
        if [[ $MODE == auto && $p -gt 3 && ( $coll == bcast || $coll == reduce ) ]]; then
            echo "$coll:$c:3"
        fi
    done
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
    if [[ $MODE == auto ]]; then
        specs=()
        for coll in $COLLS; do
            [[ $coll == iallreduce ]] && continue
            mapfile -t s < <(specs_for "$coll" auto "$p")
            specs+=("${s[@]}")
        done
        dir="$WORK/p$p"
        run_one "$dir" "$p" "MPIR_CVAR_NOLOCAL=${NOLOCAL:-1}" -- "${specs[@]}"
        RUNS+=("$dir")
        echo "p=$p auto done ($(( $(date +%s) - start ))s)" >&2
        continue
    fi
    for g in 0 1 2; do
        envs=(MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_DEVICE_COLLECTIVES=none
              MPIR_CVAR_COLLECTIVE_FALLBACK=print)
        specs=()
        for coll in $COLLS; do
            read -r -a list <<<"${ALGOS[$coll]}"
            [[ $g -lt ${#list[@]} ]] || continue
            algo=${list[$g]}
            envs+=("MPIR_CVAR_${coll^^}_INTRA_ALGORITHM=$algo")
            mapfile -t s < <(specs_for "$coll" "$algo" "$p")
            specs+=("${s[@]}")
        done
        dir="$WORK/p$p-g$g"
        run_one "$dir" "$p" "${envs[@]}" -- "${specs[@]}"
        RUNS+=("$dir")
    done
    echo "p=$p done ($(( $(date +%s) - start ))s)" >&2
done

if [[ $MODE == auto ]]; then
    python3 "$HERE/collate.py" "$OUT_DIR/auto.tsv" "$WORK/unused-fallbacks.tsv" "${RUNS[@]}"
else
    python3 "$HERE/collate.py" "$HERE/schedules.tsv" "$HERE/fallbacks.tsv" "${RUNS[@]}"
fi
