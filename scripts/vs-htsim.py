#!/usr/bin/env python3
"""udrma against htsim on the same job, side by side in one run.

    python3 scripts/vs-htsim.py HTSIM_DATACENTER_DIR [--k 8 16] [--rounds 3]
                                [--threads 1 2]

HTSIM_DATACENTER_DIR is `sim/datacenter` of a built htsim checkout
(Broadcom/csg-htsim: `make` in sim/, then in sim/datacenter): it holds
`htsim_ndp` and `connection_matrices/gen_permutation.py`. For each k the
script writes one permutation matrix of 2,000,000-byte flows with htsim's
own generator (seed 1), then runs, alternating, `rounds` times each:

    htsim_ndp -strat perm -q 35 -cwnd 50 -mtu 4000 -linkspeed 100000 \
              -nodes N -tm MATRIX
    udrma bench sim --k K --matrix MATRIX [--threads T]

(once for each T of --threads, 1 alone by default; htsim runs on one
thread whatever T is) and prints the median wall time of the whole process, its peak resident
memory and the ratio. Absolute times depend on the machine; the ratio is
the figure to quote. Needs a release build of udrma (cargo build --release).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import measure, require  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UDRMA = os.path.join(ROOT, "target", "release", "udrma")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("htsim_dir", help="htsim's sim/datacenter directory, built")
    ap.add_argument("--k", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1],
                    help="udrma's thread counts (bench sim --threads)")
    args = ap.parse_args()
    ndp = os.path.join(args.htsim_dir, "htsim_ndp")
    gen = os.path.join(args.htsim_dir, "connection_matrices", "gen_permutation.py")
    require([(ndp, "htsim_ndp (build htsim first)"), (gen, "gen_permutation.py"),
             (UDRMA, "udrma (cargo build --release)")])
    work = tempfile.mkdtemp(prefix="vs-htsim-")
    rows = []
    for k in args.k:
        n = k * k * k // 4
        cm = os.path.join(work, f"perm_{n}.cm")
        subprocess.run([sys.executable, gen, cm, str(n), str(n), "2000000", "0", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        htsim_cmd = [ndp, "-strat", "perm", "-q", "35", "-cwnd", "50", "-mtu", "4000",
                     "-linkspeed", "100000", "-nodes", str(n), "-tm", cm,
                     "-o", os.path.join(work, "logout.dat")]
        udrma_cmds = [[UDRMA, "bench", "sim", "--k", str(k), "--matrix", cm,
                       "--threads", str(t)] for t in args.threads]
        h, u = [], [[] for _ in args.threads]
        for r in range(args.rounds):
            h.append(measure(htsim_cmd, work)[:2])
            for i, cmd in enumerate(udrma_cmds):
                u[i].append(measure(cmd, work)[:2])
            times = ", ".join(f"{t} thread(s) {ui[-1][0]:.2f} s" for t, ui in zip(args.threads, u))
            print(f"k={k} round {r + 1}: htsim {h[-1][0]:.2f} s, udrma {times}", file=sys.stderr)
        hw, hm = statistics.median(x[0] for x in h), max(x[1] for x in h)
        for t, ui in zip(args.threads, u):
            uw, um = statistics.median(x[0] for x in ui), max(x[1] for x in ui)
            rows.append((k, n, t, hw, uw, hw / uw, hm, um))
    print("| k | hosts | udrma threads | htsim_ndp wall | udrma wall | udrma speed-up "
          "| htsim peak RSS | udrma peak RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for k, n, t, hw, uw, ratio, hm, um in rows:
        print(f"| {k} | {n:,} | {t} | {hw:.2f} s | {uw:.2f} s | **{ratio:.1f}×** "
              f"| {hm:.0f} MiB | {um:.0f} MiB |")
    print(f"(medians of {args.rounds} alternating rounds; whole processes; same matrix for both)")


if __name__ == "__main__":
    main()
