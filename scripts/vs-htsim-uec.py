#!/usr/bin/env python3
"""udrma's NSCC and REPS against Ultra Ethernet's htsim_uec, on several
permutations, side by side in one run.

    python3 scripts/vs-htsim-uec.py UEC_DATACENTER_DIR [--hosts 128 1024] [--seeds 1 2 3]
                                    [--order time|windows] [--threads 1 2]

UEC_DATACENTER_DIR is `sim/datacenter` of a built uet-htsim checkout
(ultraethernet/uet-htsim, built with its CMake files): it holds
`htsim_uec` and `connection_matrices/gen_permutation.py`. For each host
count and seed the script writes a permutation of 2,000,000-byte flows,
all starting at once, with htsim_uec's own generator, then runs, one
after the other:

    htsim_uec -tm MATRIX -sender_cc_only -paths 128 -end 1000000
    udrma run SCENARIO --json

where SCENARIO is `scenarios/examples/perm-HOSTS-uec.toml` with its
pairs replaced by the matrix's (same shape: a fat tree of 100 Gb/s, 1 us
links, NSCC, REPS, ACKs served first; with `--order windows` the
simulator runs its events in lookahead windows, `order = "windows"` in
the scenario's [topology], instead of the examples' time order; with
`--threads 1 2` udrma runs once per thread count, `udrma run --threads
N` for N above 1, which needs `--order windows`: a split run is a run in
windows, and reports what one thread in windows does). It
prints, per matrix, both
simulators' p50, p99 and last completion, their retransmissions and
wall times, and at the end the means over the seeds: one matrix's tail
is a single flow and moves by microseconds with any change to which
packet goes when, so the comparison of tails is made over several.
Needs a release build of udrma (cargo build --release).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import measure, require  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UDRMA = os.path.join(ROOT, "target", "release", "udrma")


def percentile(xs, p):
    """The nearest-rank percentile, as udrma's report computes it."""
    xs = sorted(xs)
    i = max(0, -(-len(xs) * p // 100) - 1)
    return xs[int(i)]


def htsim_figures(text):
    """p50, p99, last completion (µs) and retransmissions of htsim_uec's
    output (its `finished at` lines)."""
    done = [float(m) for m in re.findall(r"finished at ([0-9.]+)", text)]
    rts = sum(int(m) for m in re.findall(r" RTS ([0-9]+)", text))
    if not done:
        sys.exit("htsim_uec printed no 'finished at' line:\n" + text[-2000:])
    return percentile(done, 50), percentile(done, 99), max(done), rts, len(done)


def scenario_for(template, matrix, name, order):
    """The template scenario with its workload's pairs taken from the
    matrix (lines `SRC->DST id N start 0 size BYTES`), run in `order`."""
    pairs = []
    for line in open(matrix):
        m = re.match(r"\s*(\d+)->(\d+) .*size (\d+)", line)
        if m:
            if m.group(3) != "2000000":
                sys.exit(f"{matrix}: flow of {m.group(3)} bytes; the template is for 2000000")
            pairs.append(f'["h{m.group(1)}", "h{m.group(2)}"]')
    text = open(template).read()
    start = text.index("pairs = [")
    end = text.index("\n]", start) + 2
    rows = ",\n    ".join(", ".join(pairs[i:i + 6]) for i in range(0, len(pairs), 6))
    text = text[:start] + "pairs = [\n    " + rows + ",\n]" + text[end:]
    if order != "time":
        text = text.replace("[topology]\n", f'[topology]\norder = "{order}"\n', 1)
    return re.sub(r'(?m)^name = ".*"$', f'name = "{name}"', text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("uec_dir", help="uet-htsim's sim/datacenter directory, built")
    ap.add_argument("--hosts", type=int, nargs="+", default=[128, 1024], choices=[128, 1024])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--order", choices=["time", "windows"], default="time",
                    help="the simulator's event order (the examples run in time order)")
    ap.add_argument("--threads", type=int, nargs="+", default=[1],
                    help="udrma's thread counts, each run in turn (above 1: --order windows)")
    args = ap.parse_args()
    if any(t > 1 for t in args.threads) and args.order != "windows":
        sys.exit("--threads above 1 splits a run in windows: add --order windows")
    uec = os.path.join(args.uec_dir, "htsim_uec")
    gen = os.path.join(args.uec_dir, "connection_matrices", "gen_permutation.py")
    require([(uec, "htsim_uec (build uet-htsim first)"), (gen, "gen_permutation.py"),
             (UDRMA, "udrma (cargo build --release)")])
    work = tempfile.mkdtemp(prefix="vs-htsim-uec-")
    walls_head = " / ".join(f"udrma {t} thr." for t in args.threads)
    print("| hosts | seed | htsim_uec p50 / p99 / tail | udrma p50 / p99 / tail | tail ratio "
          f"| retransmits (htsim_uec / udrma) | wall (htsim_uec / {walls_head}) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    means = []
    for n in args.hosts:
        template = os.path.join(ROOT, "scenarios", "examples", f"perm-{n}-uec.toml")
        tails, walls = [], []
        for seed in args.seeds:
            cm = os.path.join(work, f"perm_{n}_{seed}.cm")
            subprocess.run([sys.executable, gen, cm, str(n), str(n), "2000000", "0", str(seed)],
                           check=True, stdout=subprocess.DEVNULL)
            toml = os.path.join(work, f"perm-{n}-{seed}.toml")
            with open(toml, "w") as f:
                f.write(scenario_for(template, cm, f"perm-{n}-uec-seed{seed}", args.order))
            hw, _, htext = measure([uec, "-tm", cm, "-sender_cc_only", "-paths", "128",
                                    "-end", "1000000"], work)
            h50, h99, hmax, hrts, flows = htsim_figures(htext)
            if flows != n:
                sys.exit(f"htsim_uec finished {flows} of {n} flows (seed {seed})")
            uws, reports = [], []
            for t in args.threads:
                split = ["--threads", str(t)] if t > 1 else []
                uw, _, utext = measure([UDRMA, "run", toml, "--json"] + split, work)
                r = json.loads(utext)
                if r["ops"]["completed"] != n or not all(r["checks"].values()):
                    sys.exit(f"udrma run of seed {seed} on {t} threads: {r['ops']}, checks {r['checks']}")
                uws.append(uw)
                reports.append(r)
            if len({r["trace_hash"] for r in reports}) != 1:
                sys.exit(f"seed {seed}: the thread counts gave different trace hashes")
            r = reports[0]
            c = r["completion_ns"]
            u50, u99, umax = c["p50"] / 1e3, c["p99"] / 1e3, c["max"] / 1e3
            tails.append((hmax, umax))
            walls.append((hw, uws))
            uw_text = " / ".join(f"{uw:.2f}" for uw in uws)
            print(f"| {n:,} | {seed} | {h50:.1f} / {h99:.1f} / {hmax:.1f} µs "
                  f"| {u50:.1f} / {u99:.1f} / {umax:.1f} µs | {umax / hmax:.3f} "
                  f"| {hrts} / {r['retransmits']} | {hw:.2f} / {uw_text} s |", flush=True)
        means.append((n, statistics.mean(h for h, _ in tails), statistics.mean(u for _, u in tails),
                      statistics.median(h for h, _ in walls),
                      [statistics.median(u[i] for _, u in walls) for i in range(len(args.threads))]))
    print()
    print("| hosts | mean tail, htsim_uec | mean tail, udrma | ratio "
          f"| median wall, htsim_uec / {walls_head} | speed-up |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, ht, ut, hw, uws in means:
        walls_text = " / ".join(f"{uw:.2f}" for uw in uws)
        ups = " / ".join(f"{hw / uw:.1f}×" for uw in uws)
        print(f"| {n:,} | {ht:.1f} µs | {ut:.1f} µs | {ut / ht:.3f} | {hw:.2f} / {walls_text} s | {ups} |")
    print(f"(seeds {' '.join(map(str, args.seeds))} of htsim_uec's gen_permutation.py; udrma in {args.order} order"
          f" on {' and '.join(map(str, args.threads))} thread(s); whole processes;"
          f" matrices and scenarios kept in {work})")


if __name__ == "__main__":
    main()
