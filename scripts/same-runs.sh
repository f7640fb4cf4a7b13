#!/bin/bash
# Shows that a change moved no behaviour: runs two udrma binaries on
# every scenario file given (or, with none, on tests/found,
# tests/check-cases and scenarios/examples) and compares their
# `udrma run --json` (trace hash, every counter, every check), leaving
# out only the wall-clock fields (`wall_s`, `packet_hops_per_s`):
#
#   bash scripts/same-runs.sh OLD_BINARY NEW_BINARY [FILES...]
#
# Prints one line per file that differs and the count of those that
# agree; exits 1 if any differs. A file both binaries refuse alike (the
# same exit code and message) agrees.
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 OLD_BINARY NEW_BINARY [FILES...]" >&2
    exit 2
fi
old=$1 new=$2
shift 2
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
    set -- tests/found/*.toml tests/check-cases/*.toml scenarios/examples/*.toml
fi
steady() { jq -S 'del(.wall_s, .packet_hops_per_s)' 2>/dev/null || cat; }
same=0 differ=0
for f in "$@"; do
    a=$("$old" run "$f" --json 2>&1 | steady; echo "exit ${PIPESTATUS[0]}")
    b=$("$new" run "$f" --json 2>&1 | steady; echo "exit ${PIPESTATUS[0]}")
    if [ "$a" == "$b" ]; then
        same=$((same + 1))
    else
        differ=$((differ + 1))
        echo "DIFFERS: $f"
        diff <(echo "$a") <(echo "$b") | head -n 10
    fi
done
echo "$same file(s) run alike, $differ differ"
[ "$differ" -eq 0 ]
