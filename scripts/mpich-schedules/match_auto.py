#!/usr/bin/env python3
"""Name the algorithm MPICH chose by default in each recorded case.

usage: match_auto.py SCHEDULES_TSV FALLBACKS_TSV OUT_TSV

SCHEDULES_TSV and FALLBACKS_TSV are collate.py's output for a set of runs
that holds, for each (collective, p, count), one default run (algorithm
column "auto") and runs with algorithms forced.  A case's schedule is every
rank's sends and receives in posting order, each as (dir, peer, bytes, got).
For every default case, OUT_TSV names the forced algorithm whose schedule is
identical.  Forced runs that MPICH refused (listed in FALLBACKS_TSV) are not
candidates, since they did not run the algorithm they are labelled with.
Several names joined by "," mean those algorithms coincide at that size;
"unknown" means none matched.
"""
import collections
import csv
import sys

COLL_ORDER = ["allreduce", "bcast", "reduce", "allgather", "reduce_scatter_block",
              "alltoall", "barrier"]


def main():
    sched_tsv, fb_tsv, out_tsv = sys.argv[1:4]
    sig = collections.defaultdict(lambda: collections.defaultdict(list))
    with open(sched_tsv) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            key = (r["collective"], r["algorithm"], int(r["p"]), int(r["count"]), int(r["root"]))
            sig[key][int(r["rank"])].append((r["dir"], int(r["peer"]), int(r["bytes"]),
                                             int(r["got"])))
    refused = set()
    with open(fb_tsv) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            refused.add((r["collective"], r["algorithm"], int(r["p"]), int(r["count"]),
                         int(r["root"])))

    def schedule(key):
        p = key[2]
        return tuple(tuple(sig[key].get(rank, ())) for rank in range(p))

    # Cases with no messages at all (none here) would still need a default row.
    autos = sorted((k for k in sig if k[1] == "auto"),
                   key=lambda k: (COLL_ORDER.index(k[0]), k[2], k[3], k[4]))
    unknown = 0
    with open(out_tsv, "w") as out:
        out.write("collective\tp\tcount\tbytes\talgorithm\n")
        for k in autos:
            coll, _, p, count, root = k
            mine = schedule(k)
            cands = [k2 for k2 in sig if k2[0] == coll and k2[1] != "auto"
                     and k2[2:] == k[2:]]
            if not cands:
                sys.exit("no forced runs recorded for %s" % (k,))
            same = sorted(k2[1] for k2 in cands if k2 not in refused and schedule(k2) == mine)
            name = ",".join(same) if same else "unknown"
            unknown += not same
            out.write("%s\t%d\t%d\t%d\t%s\n" % (coll, p, count, count * 4, name))
    print("auto cases: %d  unknown: %d  refused forced runs: %d" % (
        len(autos), unknown, len(refused)))


if __name__ == "__main__":
    main()
