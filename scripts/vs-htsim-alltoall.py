#!/usr/bin/env python3
"""MPI's pairwise all-to-all in udrma and in Ultra Ethernet's htsim_uec,
the same traffic side by side in one run.

    python3 scripts/vs-htsim-alltoall.py UEC_DATACENTER_DIR [--hosts 128] [--size 1048576]

UEC_DATACENTER_DIR is `sim/datacenter` of a built uet-htsim checkout
(ultraethernet/uet-htsim, built with its CMake files; it holds
`htsim_uec`). MPICH's pairwise exchange on P ranks (P a power of two)
takes P - 1 steps: at step i rank r sends SIZE bytes to r XOR i and
receives as much from it, and starts step i + 1 only once both are done.
htsim_uec's connection matrices say that with triggers: the script
writes one flow per (rank, step); step 1's flows start at 0, and each
later flow waits on a barrier trigger of count 2 that the two flows of
its rank's previous pair fire when acknowledged (`send_done_trigger`).
A trigger fires when the sender learns its last byte arrived, up to
half a round trip after udrma's rank sees it land: htsim's steps can
only be slower for it. udrma runs the same collective
(`collective = "alltoall"`, `algorithm = "pairwise"`, `form = "rdma"`,
phantom payloads) on the fabric of `scenarios/examples/perm-128-uec.toml`
(a k = 8 fat tree of 100 Gb/s, 1 us links, NSCC, REPS, ACKs first, no
NIC or host costs), which is htsim_uec's shape. Then, one after the
other:

    htsim_uec -tm MATRIX -sender_cc_only -paths 128 -end 1000000
    udrma run SCENARIO --json

and prints both simulators' completion (htsim_uec: the last flow's
finish; udrma: the slowest rank's time for the collective, from its
start to its end, the barrier after it not counted), their wall times
and peak memory, and the ratio. Needs a release build of udrma (cargo build --release).
"""
import argparse
import json
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import measure, require  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UDRMA = os.path.join(ROOT, "target", "release", "udrma")


def matrix(hosts, size):
    """htsim's connection matrix of the pairwise all-to-all, flow ids from
    1. At step i the partners r and r XOR i exchange, and each starts
    step i + 1 once both flows of its step-i pair are done: so one
    barrier trigger per pair and step (count 2), fired by the pair's two
    flows, starts both partners' next flows. htsim_uec fires a flow's
    `send_done_trigger` when its last byte is acknowledged, which also
    says its receiver holds every byte (its `recv_done_trigger` never
    fires without -conn_reuse, and -conn_reuse refuses triggered
    messages, at commit 40ccb05)."""
    steps = hosts - 1
    trig = {}
    for i in range(1, steps):
        for r in range(hosts):
            trig.setdefault((min(r, r ^ i), i), len(trig) + 1)
    lines = [f"Nodes {hosts}", f"Connections {hosts * steps}", f"Triggers {len(trig)}"]
    fid = 0
    for i in range(1, steps + 1):
        for r in range(hosts):
            d = r ^ i
            fid += 1
            if i == 1:
                when = "start 0"
            else:
                prev = r ^ (i - 1)
                when = f"trigger {trig[(min(r, prev), i - 1)]}"
            after = f" send_done_trigger {trig[(min(r, d), i)]}" if i < steps else ""
            lines.append(f"{r}->{d} id {fid} {when} size {size}{after}")
    for t in trig.values():
        lines.append(f"trigger id {t} barrier count 2")
    return "\n".join(lines) + "\n"


def scenario(hosts, size):
    """perm-HOSTS-uec.toml's fabric with the collective as its workload."""
    template = open(os.path.join(ROOT, "scenarios", "examples", f"perm-{hosts}-uec.toml")).read()
    fabric = template[template.index("[topology]"):template.index("[[workload]]")]
    return (f'name = "alltoall-{hosts}-uec"\nseed = 1\ntime_limit = "1s"\n\n{fabric}'
            '[[workload]]\nkind = "collective"\ncollective = "alltoall"\n'
            'algorithm = "pairwise"\nform = "rdma"\ndatatype = "u32"\n'
            f'sizes = "{size}B"\ncount = 1\nwarmup = 0\n')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("uec_dir", help="uet-htsim's sim/datacenter directory, built")
    ap.add_argument("--hosts", type=int, default=128, choices=[128, 1024])
    ap.add_argument("--size", type=int, default=1 << 20, help="bytes per pair (whole u32s)")
    args = ap.parse_args()
    if args.size % 4:
        sys.exit("--size must be a whole number of 4-byte elements")
    uec = os.path.join(args.uec_dir, "htsim_uec")
    require([(uec, "htsim_uec (build uet-htsim first)"), (UDRMA, "udrma (cargo build --release)")])
    work = tempfile.mkdtemp(prefix="vs-htsim-alltoall-")
    cm = os.path.join(work, "alltoall.cm")
    with open(cm, "w") as f:
        f.write(matrix(args.hosts, args.size))
    toml = os.path.join(work, "alltoall.toml")
    with open(toml, "w") as f:
        f.write(scenario(args.hosts, args.size))

    hw, hrss, htext = measure([uec, "-tm", cm, "-sender_cc_only", "-paths", "128",
                               "-end", "1000000"], work)
    done = [float(m) for m in re.findall(r"finished at ([0-9.]+)", htext)]
    flows = args.hosts * (args.hosts - 1)
    if len(done) != flows:
        sys.exit(f"htsim_uec finished {len(done)} of {flows} flows; output kept in {work}")
    uw, urss, utext = measure([UDRMA, "run", toml, "--json"], work)
    r = json.loads(utext)
    row = r["scheduled"]["rows"][0]
    if not all(r["checks"].values()) or row["messages"] != flows:
        sys.exit(f"udrma: checks {r['checks']}, {row['messages']} messages of {flows}")
    h_us, u_us = max(done), row["max_us"]
    ideal = args.size * (args.hosts - 1) * 8 / 100e3  # µs at 100 Gb/s out of each host
    print(f"pairwise all-to-all, {args.hosts} hosts, {args.size:,} B a pair, {flows:,} flows "
          f"(ideal {ideal:.0f} µs at 100 Gb/s)")
    print("| simulator | completion | of ideal | wall | peak RSS | events or retransmits |")
    print("|---|---:|---:|---:|---:|---:|")
    rts = sum(int(m) for m in re.findall(r" RTS ([0-9]+)", htext))
    print(f"| htsim_uec | {h_us:,.1f} µs | {h_us / ideal:.2f} | {hw:.2f} s | {hrss:.0f} MiB "
          f"| {rts:,} retransmits |")
    print(f"| udrma | {u_us:,.1f} µs | {u_us / ideal:.2f} | {uw:.2f} s | {urss:.0f} MiB "
          f"| {r['events']:,} events, {r['retransmits']:,} retransmits |")
    print(f"udrma / htsim_uec: completion {u_us / h_us:.3f}, wall {uw / hw:.2f} "
          f"(speed-up {hw / uw:.2f}×); trace {r['trace_hash']}; files kept in {work}")


if __name__ == "__main__":
    main()
