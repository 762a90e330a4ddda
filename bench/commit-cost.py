#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# commit-cost.py — what one cluster-wide commit costs the coordinator
# (node 0) at NODES nodes of RANKS ranks each (issue 10: "write down what
# that costs at 2,048 nodes"), counted from the protocol as implemented
# (daemon/server/save.c, daemon/step/coordinator.c) with the message sizes
# of proto/peer.c's encoding, which are the variables below: change them
# when the protocol changes, and run
#
#   python3 bench/commit-cost.py [--nodes N] [--ranks R]
#
# to print the table (markdown) that bench/commit.sh puts into
# docs/BENCHMARKS.md.
#
# Per step, every node but node 0 (whose own reports do not leave it):
#   - STEP_REPORT BEGIN at its first save_begin of the step, answered with a
#     short STEP_STATE PENDING ("world_size N agreed": no list of what is
#     missing for a BEGIN);
#   - a STEP_REPORT for the ranks that land on its disk in one turn of its
#     loop (naming all of its ranks on disk so far): between one per node
#     and one per rank; counted here as one per rank, the upper bound;
#   - a STEP_REPORT COMMIT per ckpt_commit called there, answered with a
#     PENDING (what is missing, cached at node 0) while the step is not
#     decided; while trainers wait, their node asks again every 500 ms
#     (CLUSTER_ASK_AGAIN_MS) — not counted: a commit of the last rank
#     decides within one round trip;
#   - the decision: STEP_STATE DECIDED to each holder, a COMMITTED report
#     back from each, STEP_STATE EVERYWHERE to each.
# Two cases: "barrier" — the trainer's barrier, then one rank commits, so
# every rank is on disk when the request arrives and no commit is answered
# PENDING; "worst" — every rank calls ckpt_commit with no barrier, each
# before the decision.
import argparse

# ---- sizes, bytes (proto/peer-proto.h, proto/peer.c) ----------------------------
HEADER = 24           # PEER_HDR_SIZE
FRAME_TAG = 16        # PEER_TAG_SIZE, after every frame ([cluster] peer_frame_mac)
JOB_LEN = 9           # the job's name, e.g. "llama-70b" (u16 length + bytes)
# STEP_REPORT: job, uid u32, step u64, world_size u32, flags u8,
# committed_at u64, nranks u32, then a u32 per rank
REPORT_FIXED = 2 + JOB_LEN + 4 + 8 + 4 + 1 + 8 + 4
REPORT_PER_RANK = 4
# STEP_STATE: job, step u64, world_size u32, state u8, committed_at u64,
# error i32, message (u16 length + bytes)
STATE_FIXED = 2 + JOB_LEN + 8 + 4 + 1 + 8 + 4 + 2
PENDING_MESSAGE = 512  # PEER_ERRMSG_MAX: at 2,048 nodes the list of what is
                       # missing is cut there ("..."); a few dozen bytes on small clusters
BEGIN_MESSAGE = len("world_size 16384 agreed")  # the answer to a BEGIN
PING = HEADER + 8 + FRAME_TAG  # keepalive PING and PONG, each (u64 value)
KEEPALIVE_S = 15      # [cluster] peer_keepalive
TCPIP = 20 + 32       # IPv4 + TCP with timestamps, one segment per frame (no
                      # coalescing: the upper bound)


def frame(body):
    return HEADER + body + FRAME_TAG


def report(nranks):
    return frame(REPORT_FIXED + REPORT_PER_RANK * nranks)


def state(message=0):
    return frame(STATE_FIXED + message)


def rows(nodes, ranks):
    """(what, direction, per case {barrier, worst}: (count, bytes))."""
    m = nodes - 1  # the nodes that send over a link
    landing = sum(report(k) for k in range(1, ranks + 1))  # one node's ranks landing
    pending = state(PENDING_MESSAGE)
    return [
        ("STEP_REPORT BEGIN", "in", {c: (m, m * report(0)) for c in ("barrier", "worst")}),
        ("STEP_STATE PENDING (answer to BEGIN)", "out",
         {c: (m, m * state(BEGIN_MESSAGE)) for c in ("barrier", "worst")}),
        ("STEP_REPORT, a rank landed", "in",
         {c: (m * ranks, m * landing) for c in ("barrier", "worst")}),
        ("STEP_REPORT COMMIT", "in",
         {"barrier": (1, report(ranks)), "worst": (m * ranks, m * ranks * report(ranks))}),
        ("STEP_STATE PENDING (answer to COMMIT)", "out",
         {"barrier": (0, 0), "worst": (m * ranks, m * ranks * pending)}),
        ("STEP_STATE DECIDED", "out", {c: (m, m * state()) for c in ("barrier", "worst")}),
        ("STEP_REPORT COMMITTED", "in",
         {c: (m, m * report(ranks)) for c in ("barrier", "worst")}),
        ("STEP_STATE EVERYWHERE", "out", {c: (m, m * state()) for c in ("barrier", "worst")}),
    ]


def human(b):
    for unit, div in (("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:.2f} {unit}"
    return f"{b:.0f} B"


def main():
    ap = argparse.ArgumentParser(description="what one cluster-wide commit costs the "
                                             "coordinator (node 0)")
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--ranks", type=int, default=8, help="ranks per node")
    a = ap.parse_args()
    if a.nodes < 2 or a.ranks < 1:
        ap.error("--nodes must be at least 2, --ranks at least 1")

    rs = rows(a.nodes, a.ranks)
    links = a.nodes - 1
    print(f"{a.nodes:,} nodes × {a.ranks} ranks (world_size {a.nodes * a.ranks:,}), "
          f"coordinator node 0, {links:,} control links. Frames: header {HEADER} B + body + "
          f"tag {FRAME_TAG} B; STEP_REPORT {report(0)} B + {REPORT_PER_RANK} B per rank, "
          f"STEP_STATE {state()} B + its message (PENDING: {PENDING_MESSAGE} B here); "
          f"job name {JOB_LEN} B.")
    print()
    print("| at node 0, per commit | dir | barrier, one rank commits: frames | bytes "
          "| no barrier, every rank commits: frames | bytes |")
    print("|---|---|---|---|---|---|")
    tot = {c: [0, 0, 0] for c in ("barrier", "worst")}  # frames, bytes, frames in
    for what, d, cases in rs:
        cells = []
        for c in ("barrier", "worst"):
            n, b = cases[c]
            tot[c][0] += n
            tot[c][1] += b
            tot[c][2] += n if d == "in" else 0
            cells += [f"{n:,}", human(b)]
        print(f"| {what} | {d} | " + " | ".join(cells) + " |")
    cells = []
    for c in ("barrier", "worst"):
        n, b, n_in = tot[c]
        cells += [f"**{n:,}** ({n_in:,} in)", f"**{human(b)}** ({human(b + n * TCPIP)} with TCP/IP)"]
    print("| **total** | | " + " | ".join(cells) + " |")
    print()
    print(f"Standing cost: {links:,} TCP connections and descriptors at node 0, one "
          f"authenticated handshake each at start and after a reconnect; keepalives "
          f"{links * 2 / KEEPALIVE_S:,.1f} frames/s ({human(links * 2 * PING / KEEPALIVE_S)}/s). "
          f"Node 0's table per step in flight: a node per rank and a state per node "
          f"({a.nodes * a.ranks:,} + {a.nodes:,} entries).")


if __name__ == "__main__":
    main()
