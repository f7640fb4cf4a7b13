#!/usr/bin/env python3
"""Where the data packets of some hosts waited, from a JSON-lines trace of
a fat-tree run.

    udrma run SCENARIO --trace run.jsonl
    python3 scripts/fat-tree-waits.py run.jsonl --k 16 --hosts 432-439 \
        [--bandwidth 100Gbps] [--latency 1us] [--slice 10us]

For every data packet (WRITE, READ response, SEND) whose first hop is the
link of one of HOSTS, the trace's `Tx` events give the time it started
across each link of its path; the wait at a hop is that start less the
previous start, the previous link's serialization and its latency (the
fabric's links all have one rate and one latency). It prints:

- the mean, median, 90th percentile and largest wait at each hop
  (hop 1 is the queue of the edge switch's port up, the last one the
  port down to the destination);
- for each first-hop-up link those packets took (the edge switch's
  uplinks), how many of them started across it per time slice, with the
  mean wait there in the same slices: an uplink whose count drops while
  the others stay full is one the senders stopped using.

Link numbers are a fat tree's as udrma builds it: host links first
(`hH-eE`), then edge-to-aggregation pod by pod, then
aggregation-to-core; the names are printed with them.
"""
import argparse
import collections
import json
import re
import statistics
import sys

DATA = {0x01, 0x03, 0x04}
UNITS = {"ps": 1, "ns": 10**3, "us": 10**6, "ms": 10**9, "s": 10**12}


def duration_ps(text):
    m = re.fullmatch(r"([0-9.]+)\s*(ps|ns|us|ms|s)", text.strip())
    if not m:
        sys.exit(f"{text!r}: not a duration (like 1us or 500ns)")
    return int(float(m.group(1)) * UNITS[m.group(2)])


def rate_bps(text):
    m = re.fullmatch(r"([0-9.]+)\s*([kMG]?)bps", text.strip())
    if not m:
        sys.exit(f"{text!r}: not a rate (like 100Gbps)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}[m.group(2)]


def host_range(text):
    lo, _, hi = text.partition("-")
    try:
        return set(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        sys.exit(f"{text!r}: not a host range (like 432-439)")


def link_name(k, link):
    """A fat tree's link name by number, in udrma's build order."""
    half = k // 2
    hosts = k * k * k // 4
    if link < hosts:
        return f"h{link}-e{link // half}"
    i = link - hosts
    pod, rest = divmod(i, half * half)
    if pod < k:
        return f"e{pod * half + rest // half}-a{pod * half + rest % half}"
    pod, rest = divmod(i - k * half * half, half * half)
    a = rest // half
    return f"a{pod * half + a}-c{a * half + rest % half}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="a JSON-lines trace (udrma run --trace FILE.jsonl)")
    ap.add_argument("--k", type=int, required=True, help="the fat tree's k")
    ap.add_argument("--hosts", required=True, help="senders, as H or H1-H2")
    ap.add_argument("--bandwidth", default="100Gbps")
    ap.add_argument("--latency", default="1us")
    ap.add_argument("--slice", default="10us")
    a = ap.parse_args()
    if a.k < 2 or a.k % 2:
        sys.exit(f"--k {a.k}: a fat tree's k is even and at least 2")
    hosts = host_range(a.hosts)
    ps_per_byte = 8e12 / rate_bps(a.bandwidth)
    latency, width = duration_ps(a.latency), duration_ps(a.slice)
    wire_overhead = 42 + 24  # Ethernet, IP and UDP headers, preamble and gap

    paths = {}
    with open(a.trace) as f:
        for n, line in enumerate(f, 1):
            if not line.startswith('{"Tx"'):
                continue
            try:
                tx = json.loads(line)["Tx"]
            except (ValueError, KeyError):
                sys.exit(f"{a.trace}:{n}: not a trace line")
            pkt = tx["pkt"]
            if pkt not in paths:
                if tx["dir"] != 0 or tx["link"] not in hosts or tx["opcode"] not in DATA:
                    continue
                paths[pkt] = []
            paths[pkt].append((tx["t"], tx["link"], tx["len"]))
    if not paths:
        sys.exit(f"{a.trace}: no data packet sent by hosts {a.hosts}")

    waits = collections.defaultdict(list)
    up = collections.defaultdict(lambda: collections.defaultdict(list))
    for hops in paths.values():
        for i in range(1, len(hops)):
            (t0, _, size), (t1, link, _) = hops[i - 1], hops[i]
            wait = (t1 - t0 - (size + wire_overhead) * ps_per_byte - latency) / 1e6
            waits[i].append(max(wait, 0.0))
            if i == 1:
                up[link][t1 // width].append(max(wait, 0.0))
    print(f"{len(paths)} data packets from hosts {a.hosts}; waits in µs")
    print("hop   packets     mean   median      p90      max")
    for i, w in sorted(waits.items()):
        w.sort()
        print(f"{i:>3} {len(w):>9} {statistics.mean(w):>8.2f} {w[len(w) // 2]:>8.2f} "
              f"{w[int(len(w) * 0.9)]:>8.2f} {w[-1]:>8.2f}")
    last = max(s for per in up.values() for s in per)
    print(f"\nfirst link up: packets started per {a.slice} slice (mean wait there, µs)")
    for link, per in sorted(up.items()):
        cells = " ".join(f"{len(per.get(s, [])):>3}({statistics.mean(per[s]) if per.get(s) else 0:4.1f})"
                         for s in range(last + 1))
        print(f"{link:>6} {link_name(a.k, link):>10}  {cells}")


if __name__ == "__main__":
    main()
