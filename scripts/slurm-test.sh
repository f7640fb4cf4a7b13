#!/usr/bin/env bash
# udrma's sweeps on a real (one-node) Slurm cluster: what CI runs as root.
#
#   bash scripts/slurm-test.sh
#
# Starts the cluster of scripts/slurm-cluster.sh, then:
# 1. `udrma slurm submit` a job array of a small sweep, `udrma slurm
#    collect` it, and compares the merged CSV and plot with a local
#    `udrma sweep` of the same cases, byte for byte;
# 2. a plain `sbatch --array` of `udrma sweep` without --shard (the shard
#    comes from SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT), merged
#    with `udrma merge`, against the same local sweep;
# 3. an array whose task 1 fails: collect must name it with its log and
#    exit 1; after `sbatch --array=1` of the job's script, collect merges
#    and the result equals the local sweep again.
# 4. `udrma check` as a two-task array of scripts/udrma-check.sbatch, its
#    shards merged with `udrma check --merge`, against one process; and
#    the same with --merge-states on check-credits, against the answer
#    of one plain process.
# 5. one `udrma run` over two MPI ranks (a build with --features mpi):
#    with `srun --mpi=pmi2 -n 2` and with scripts/udrma-ranks.sbatch,
#    each printing one process's JSON but for its wall-clock fields and
#    the ranks' own figures; `srun -n 2` without an MPI plugin refused.
# Needs root, slurm-wlm and munge; builds the release binary if missing.
set -euo pipefail
cd "$(dirname "$0")/.."

udrma=$PWD/target/release/udrma
[ -x "$udrma" ] || cargo build --release --locked --quiet
cluster=$(mktemp -d /tmp/udrma-slurm-test.XXXXXX)
work=$(mktemp -d /tmp/udrma-slurm-work.XXXXXX)
cleanup() {
    bash scripts/slurm-cluster.sh stop "$cluster" || true
    rm -rf "$cluster" "$work"
}
trap cleanup EXIT

eval "$(bash scripts/slurm-cluster.sh start "$cluster")"
export SLURM_CONF
sinfo

scenario=scenarios/examples/small-faults.toml
sets=(--set fault.loss.p=0,0.02,0.05 --set nic.max_retries=3,8)
seeds=8
ok() { printf 'ok: %s\n' "$*"; }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }
same() {
    cmp "$1" "$2" || { diff "$1" "$2" | head -n 20 >&2; fail "$1 differs from $2"; }
}

# The reference: one machine, one process.
local_rc=0
"$udrma" sweep "$scenario" "${sets[@]}" --seeds "$seeds" \
    --csv "$work"/local.csv --plot "$work"/local.svg > "$work"/local.txt || local_rc=$?
[ "$local_rc" -le 1 ] || fail "local sweep exited $local_rc"
rows=$(($(wc -l < "$work"/local.csv) - 1))
echo "local sweep: $rows runs, exit $local_rc"

# 1. submit and collect.
start=$(date +%s)
"$udrma" slurm submit "$scenario" "${sets[@]}" --seeds "$seeds" --tasks 5 \
    --dir "$work"/job --time 10:00
collect_rc=0
"$udrma" slurm collect "$work"/job --poll 0.5 --timeout 600 > "$work"/collect.txt || collect_rc=$?
[ "$collect_rc" -eq "$local_rc" ] || fail "collect exited $collect_rc, the local sweep $local_rc"
same "$work"/local.csv "$work"/job/sweep.csv
same "$work"/local.svg "$work"/job/sweep.svg
same "$work"/local.txt "$work"/collect.txt
ok "5 array tasks, collected in $(($(date +%s) - start)) s: CSV, plot and table equal the local sweep's"

# 2. the shard from Slurm's environment.
sbatch --wait --array=0-3 --output="$work"/env-%a.log --wrap \
    "$udrma sweep $scenario ${sets[*]} --seeds $seeds --parts $work/env-parts" > /dev/null
grep -h '^shard' "$work"/env-*.log
merge_rc=0
"$udrma" merge "$work"/env-parts --csv "$work"/env.csv --plot "$work"/env.svg \
    > /dev/null || merge_rc=$?
[ "$merge_rc" -eq "$local_rc" ] || fail "merge exited $merge_rc, the local sweep $local_rc"
same "$work"/local.csv "$work"/env.csv
same "$work"/local.svg "$work"/env.svg
ok "shards from SLURM_ARRAY_TASK_ID/COUNT merge to the local sweep"

# 3. a task fails, is named, is rerun alone.
cat > "$work"/flaky <<EOF
#!/bin/bash
case "\$*" in *"--shard 1/"*) echo "error: this task was told to fail" >&2; exit 2;; esac
exec $udrma "\$@"
EOF
chmod +x "$work"/flaky
"$udrma" slurm submit "$scenario" "${sets[@]}" --seeds "$seeds" --tasks 3 \
    --dir "$work"/flaky-job --udrma "$work"/flaky > /dev/null
rc=0
"$udrma" slurm collect "$work"/flaky-job --poll 0.5 --timeout 600 2> "$work"/flaky.err || rc=$?
cat "$work"/flaky.err
[ "$rc" -eq 1 ] || fail "collect of a failed task exited $rc, not 1"
grep -q "task 1: exit 2; log $work/flaky-job/logs/task-1.log" "$work"/flaky.err \
    || fail "collect did not name task 1 and its log"
grep -q "this task was told to fail" "$work"/flaky.err || fail "collect did not quote the log"
sed -i "s|^$work/flaky |$udrma |" "$work"/flaky-job/udrma-sweep.sbatch
sbatch --array=1 "$work"/flaky-job/udrma-sweep.sbatch
rc=0
"$udrma" slurm collect "$work"/flaky-job --poll 0.5 --timeout 600 > /dev/null || rc=$?
[ "$rc" -eq "$local_rc" ] || fail "collect after the rerun exited $rc"
same "$work"/local.csv "$work"/flaky-job/sweep.csv
ok "a failed task is named with its log; rerun alone, the merge equals the local sweep"

# 4. one `udrma check` split over a job array, merged.
check=scenarios/examples/check-pair.toml
"$udrma" check "$check" --faults 2 --out "$work"/check-one > "$work"/check-one.txt
UDRMA=$udrma sbatch --wait --array=0-1 --output="$work"/check-%a.log \
    scripts/udrma-check.sbatch "$check" 2 2 "$work"/check-shards > /dev/null
grep -h '^shard' "$work"/check-*.log
"$udrma" check "$check" --merge "$work"/check-shards/*-check-shard-*.json \
    --out "$work"/check-merged > "$work"/check-merged.txt
steady() { grep -v -e '^time ' -e '^estimate ' -e '^shards ' "$1"; }
same <(steady "$work"/check-one.txt) <(steady "$work"/check-merged.txt)
cat "$work"/check-merged.txt
ok "udrma check in 2 array tasks, merged: the counts and result of one process"

# 4b. the same with --merge-states on a messaging scenario: each task
# merges the states it saw; the merge gives one plain process's answer.
check=scenarios/examples/check-credits.toml
"$udrma" check "$check" --faults 2 --out "$work"/credits-one > "$work"/credits-one.txt || true
UDRMA=$udrma sbatch --wait --array=0-1 --output="$work"/credits-%a.log \
    scripts/udrma-check.sbatch "$check" 2 2 "$work"/credits-shards --merge-states > /dev/null
grep -h '^shard' "$work"/credits-*.log
"$udrma" check "$check" --merge "$work"/credits-shards/*-check-shard-*.json \
    --out "$work"/credits-merged > "$work"/credits-merged.txt || true
answer() { grep -e '^result ' -e '^fault ' "$1" | sed 's/ (the smallest[^)]*)//'; }
same <(answer "$work"/credits-one.txt) <(answer "$work"/credits-merged.txt)
grep -q '^merged .*states recorded' "$work"/credits-merged.txt \
    || fail "the merged shards of --merge-states tally no merged states"
cat "$work"/credits-merged.txt
ok "udrma check --merge-states in 2 array tasks, merged: the answer of one plain process"

# 5. one run over two MPI ranks: srun, and the documented job script.
# The build with the mpi feature replaces the release binary (only the
# root crate rebuilds), so this comes last.
cargo build --release --locked --features mpi --quiet
file=scenarios/tests/ranks/spray-k4.toml
comparable() { jq -S 'del(.wall_s, .packet_hops_per_s, .ranks)' "$1"; }
"$udrma" run "$file" --json > "$work"/ranks-one.json
srun --mpi=pmi2 -n 2 "$udrma" run "$file" --json > "$work"/ranks-srun.json
same <(comparable "$work"/ranks-one.json) <(comparable "$work"/ranks-srun.json)
[ "$(jq '.ranks | length' "$work"/ranks-srun.json)" -eq 2 ] || fail "srun: not 2 ranks"
UDRMA=$udrma sbatch --wait --ntasks=2 --output="$work"/ranks-sbatch.json --error="$work"/ranks-sbatch.err \
    scripts/udrma-ranks.sbatch "$file" --json > /dev/null
same <(comparable "$work"/ranks-one.json) <(comparable "$work"/ranks-sbatch.json)
jq -c '.ranks' "$work"/ranks-sbatch.json
rc=0
srun -n 2 "$udrma" run "$file" > "$work"/ranks-noplugin.txt 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q -- '--mpi=pmi2' "$work"/ranks-noplugin.txt \
    || { cat "$work"/ranks-noplugin.txt >&2; fail "srun without an MPI plugin was not refused"; }
ok "udrma run over 2 ranks with srun and with scripts/udrma-ranks.sbatch: one process's report"
