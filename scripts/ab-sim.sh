#!/bin/bash
# Compares two udrma binaries on the standard fabric shape, alternating
# their runs so that the machine's drift hits both alike:
#
#   bash scripts/ab-sim.sh K ROUNDS OLD_BINARY NEW_BINARY [ARGS...]
#
# runs `OLD bench sim --k K ARGS` and `NEW bench sim --k K ARGS` ROUNDS
# times (ARGS, e.g. `--order time`, go to both), the
# old one first in odd rounds and the new one first in even rounds (on
# this project's VM the second run of a pair was often a few per cent
# faster, whichever binary it was), checks that both report the same
# trace hash, prints each pair's wall times as it goes, and at the end
# the best and median run wall time of each, their ratios (new over
# old), and the median of the rounds' own ratios.
set -euo pipefail
if [ $# -lt 4 ]; then
    echo "usage: $0 K ROUNDS OLD_BINARY NEW_BINARY [ARGS...]" >&2
    exit 2
fi
K=$1 ROUNDS=$2 OLD=$3 NEW=$4
shift 4
for i in $(seq "$ROUNDS"); do
    if [ $((i % 2)) -eq 1 ]; then
        a=$("$OLD" bench sim --k "$K" "$@")
        b=$("$NEW" bench sim --k "$K" "$@")
    else
        b=$("$NEW" bench sim --k "$K" "$@")
        a=$("$OLD" bench sim --k "$K" "$@")
    fi
    ha=$(awk '/^trace hash/{print $3}' <<<"$a")
    hb=$(awk '/^trace hash/{print $3}' <<<"$b")
    if [ "$ha" != "$hb" ]; then
        echo "trace hashes differ: $ha (old) against $hb (new)" >&2
        exit 1
    fi
    pair="$(awk '/^wall/{print $2}' <<<"$a") $(awk '/^wall/{print $2}' <<<"$b")"
    echo "round $i: old, new $pair" >&2
    echo "$pair"
done | python3 -c '
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
a = [r[0] for r in rows]
b = [r[1] for r in rows]
print(f"old best {min(a):.3f} s, median {statistics.median(a):.3f} s")
print(f"new best {min(b):.3f} s, median {statistics.median(b):.3f} s")
print(f"ratio   best {min(b) / min(a):.3f}, median {statistics.median(b) / statistics.median(a):.3f}, "
      f"median of the rounds {statistics.median(y / x for x, y in rows):.3f}")
'
