#!/usr/bin/env python3
"""Merge the recorder's per-rank logs into one schedule table.

usage: collate.py OUT_TSV FALLBACK_TSV RUN_DIR...

Each RUN_DIR holds rank<N>.log files written by recorder.c and the
mpiexec stderr (file "stderr") with the @@CASE/@@END markers printed by
colltest.c.  Exits non-zero if a run looks wrong (endpoints not mapped,
messages outside the collective's context, unmatched sends/receives).
"""
import collections
import glob
import os
import sys

COLL_ORDER = ["allreduce", "iallreduce", "bcast", "reduce", "allgather",
              "reduce_scatter_block", "alltoall", "barrier"]


def read_run(d):
    cases = collections.OrderedDict()
    problems = []
    for path in sorted(glob.glob(os.path.join(d, "rank*.log"))):
        rank = int(os.path.basename(path)[4:-4])
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("#meta"):
                    meta = dict(kv.split("=") for kv in line.split("\t")[1:])
                    if int(meta["am_in_window"]) or int(meta["unmapped_sends"]):
                        problems.append("%s: %s" % (path, line))
                    continue
                coll, algo, p, count, root, idx, dr, peer, nbytes, got, ctx, tag, anysrc = \
                    line.split("\t")
                key = (coll, algo, int(p), int(count), int(root))
                cases.setdefault(key, {}).setdefault(rank, []).append(dict(
                    idx=int(idx), dir=dr, peer=int(peer), bytes=int(nbytes), got=int(got),
                    ctx=int(ctx), tag=int(tag), anysrc=int(anysrc)))
    fallbacks = {}
    errpath = os.path.join(d, "stderr")
    if os.path.exists(errpath):
        cur = None
        with open(errpath) as f:
            for line in f:
                line = line.rstrip("\n")
                if line.startswith("@@CASE\t"):
                    parts = line.split("\t")[1:]
                    cur = (parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4]))
                elif line.startswith("@@END"):
                    cur = None
                elif "cannot be applied" in line and cur is not None:
                    fallbacks[cur] = line.strip()
    return cases, fallbacks, problems


def order_rows(algo, recs):
    recs = sorted(recs, key=lambda r: r["idx"])
    reordered = False
    if algo.startswith("tsp_"):
        # Transport (DAG) schedules issue ready vertices in a timing-dependent
        # order; their per-step tags give the algorithm's own step order.
        by_tag = sorted(recs, key=lambda r: (r["tag"], r["idx"]))
        reordered = [r["idx"] for r in by_tag] != [r["idx"] for r in recs]
        recs = by_tag
    return recs, reordered


def main():
    out_tsv, fb_tsv = sys.argv[1], sys.argv[2]
    runs = sys.argv[3:]
    all_cases = {}
    all_fallbacks = {}
    problems = []
    for d in runs:
        cases, fbs, probs = read_run(d)
        for k, v in cases.items():
            if k in all_cases:
                problems.append("case recorded twice: %s" % (k,))
            all_cases[k] = v
        all_fallbacks.update(fbs)
        problems.extend(probs)

    def sort_key(k):
        coll, algo, p, count, root = k
        ci = COLL_ORDER.index(coll) if coll in COLL_ORDER else 99
        return (ci, algo, p, count, root)

    nrows = 0
    reordered_cases = 0
    all_ctxs = set()
    signatures = {}
    with open(out_tsv, "w") as out:
        out.write("collective\talgorithm\tp\tcount\troot\trank\tseq\tdir\tpeer\tbytes\tgot\n")
        for k in sorted(all_cases, key=sort_key):
            coll, algo, p, count, root = k
            ranks = all_cases[k]
            ctxs = set()
            sends = collections.Counter()
            recvs = collections.Counter()
            sig = []
            any_reordered = False
            for rank in range(p):
                recs, reordered = order_rows(algo, ranks.get(rank, []))
                any_reordered |= reordered
                seq = {"send": 0, "recv": 0}
                rank_sig = []
                for r in recs:
                    ctxs.add(r["ctx"])
                    if r["anysrc"]:
                        problems.append("%s rank %d: MPI_ANY_SOURCE receive" % (k, rank))
                    if r["peer"] < 0:
                        problems.append("%s rank %d: unknown peer" % (k, rank))
                    out.write("%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\n" % (
                        coll, algo, p, count, root, rank, seq[r["dir"]], r["dir"], r["peer"],
                        r["bytes"], r["got"]))
                    seq[r["dir"]] += 1
                    nrows += 1
                    rank_sig.append((r["dir"], r["peer"], r["bytes"], r["got"]))
                    if r["dir"] == "send":
                        sends[(rank, r["peer"], r["got"])] += 1
                    else:
                        recvs[(r["peer"], rank, r["got"])] += 1
                sig.append(tuple(rank_sig))
            if any_reordered:
                reordered_cases += 1
            all_ctxs |= ctxs
            if len(ctxs) > 1:
                problems.append("%s: messages on several context ids %s" % (k, sorted(ctxs)))
            if sends != recvs:
                problems.append("%s: sends and receives do not pair up" % (k,))
            signatures[k] = tuple(sig)

    # For every fallback, name the recorded algorithms whose schedule is identical.
    with open(fb_tsv, "w") as fb:
        fb.write("collective\talgorithm\tp\tcount\troot\tmpich_message\tsame_schedule_as\n")
        for k in sorted(all_fallbacks, key=sort_key):
            coll, algo, p, count, root = k
            same = []
            for k2, s2 in signatures.items():
                if k2 != k and k2[0] == coll and k2[2:] == k[2:] and k2 not in all_fallbacks \
                        and s2 == signatures.get(k):
                    same.append(k2[1])
            fb.write("%s\t%s\t%d\t%d\t%d\t%s\t%s\n" % (
                coll, algo, p, count, root, all_fallbacks[k], ",".join(sorted(same)) or "-"))

    print("cases: %d  rows: %d  fallbacks: %d  tsp cases reordered by step tag: %d  "
          "context ids: %s" % (len(all_cases), nrows, len(all_fallbacks), reordered_cases,
                               sorted(all_ctxs)))
    for pr in problems[:50]:
        print("PROBLEM:", pr)
    if problems:
        print("%d problems" % len(problems))
        sys.exit(1)


if __name__ == "__main__":
    main()
