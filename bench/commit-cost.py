#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
#
# commit-cost.py — what one cluster-wide commit costs the coordinator
# (node 0) at NODES nodes of RANKS ranks each (issue 10: "write down what
# that costs at 2,048 nodes"), computed from the peer protocol's message
# sizes, which are the variables below: change them when the protocol
# changes, and run
#
#   python3 bench/commit-cost.py [--nodes N] [--ranks R] [--commit-from one|every-node]
#
# to print the table (markdown) that bench/commit.sh puts into
# docs/BENCHMARKS.md.
#
# The protocol as implemented for issue 10: every node but node 0 keeps one
# authenticated control link to node 0.  Per step, each such node sends a
# STEP_REPORT when its ranks are on its disk, one more with the commit
# request when one of its ranks calls ckpt_commit, and a COMMITTED report
# once it has recorded the decision; node 0 sends each holder a STEP_STATE
# "committed" (the decision) and, when every holder has recorded it, a
# STEP_STATE "committed everywhere".  Node 0's own ranks cost no messages.
import argparse

# ---- message sizes, bytes (the lead confirms them against proto/peer*) ----
HEADER = 24           # every peer frame's header (proto/peer.h PEER_HDR_SIZE)
FRAME_TAG = 16        # the frame MAC after every frame ([cluster] peer_frame_mac)
REPORT_BODY = 40      # STEP_REPORT without its rank list: job, step, world_size, flags
REPORT_PER_RANK = 4   # one u32 per rank the node holds
STATE_BODY = 60       # STEP_STATE: job, step, world_size, decision
COMMITTED_BODY = None # the COMMITTED report back; None: sized as a STEP_REPORT
PING = HEADER + FRAME_TAG  # keepalive ping and pong, each
KEEPALIVE_S = 15      # [cluster] peer_keepalive
# TCP/IPv4 with timestamps, one segment per message (no coalescing; the
# upper bound on what the wire and the NIC see)
TCPIP = 20 + 32


def frame(body):
    return HEADER + body + FRAME_TAG


def cost(nodes, ranks, commit_from):
    """Per-commit counts at the coordinator, as rows (what, count, bytes)."""
    remote = nodes - 1
    report = frame(REPORT_BODY + REPORT_PER_RANK * ranks)
    committed = frame(COMMITTED_BODY) if COMMITTED_BODY is not None else report
    state = frame(STATE_BODY)
    requesters = remote if commit_from == "every-node" else min(1, remote)
    rows = [
        ("STEP_REPORT, ranks on disk (in)", remote, remote * report),
        ("STEP_REPORT, commit request (in)", requesters, requesters * report),
        ("STEP_STATE committed (out)", remote, remote * state),
        ("COMMITTED report back (in)", remote, remote * committed),
        ("STEP_STATE committed everywhere (out)", remote, remote * state),
    ]
    return rows, report, state, committed


def human(b):
    for unit, div in (("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:.2f} {unit}"
    return f"{b:.0f} B"


def main():
    ap = argparse.ArgumentParser(description="what one cluster-wide commit costs the coordinator")
    ap.add_argument("--nodes", type=int, default=2048)
    ap.add_argument("--ranks", type=int, default=8, help="ranks per node")
    ap.add_argument("--commit-from", choices=("one", "every-node"), default="every-node",
                    help="which nodes send a commit request (every-node: every rank "
                         "calls ckpt_commit, the worst case)")
    a = ap.parse_args()
    if a.nodes < 1 or a.ranks < 1:
        ap.error("--nodes and --ranks must be positive")

    rows, report, state, committed = cost(a.nodes, a.ranks, a.commit_from)
    links = a.nodes - 1
    msgs = sum(r[1] for r in rows)
    wire = sum(r[2] for r in rows)
    print(f"{a.nodes:,} nodes x {a.ranks} ranks (world_size {a.nodes * a.ranks:,}), "
          f"coordinator node 0, commit requested by "
          f"{'every node' if a.commit_from == 'every-node' else 'one node other than node 0'}; "
          f"sizes: STEP_REPORT {report} B, STEP_STATE {state} B, COMMITTED {committed} B "
          f"(header {HEADER} + body + tag {FRAME_TAG})")
    print()
    print("| at the coordinator, per commit | messages | bytes (frames) | bytes with TCP/IP |")
    print("|---|---|---|---|")
    for what, n, b in rows:
        print(f"| {what} | {n:,} | {human(b)} | {human(b + n * TCPIP)} |")
    print(f"| **total** | **{msgs:,}** (in {msgs - 2 * links:,}, out {2 * links:,}) "
          f"| **{human(wire)}** | **{human(wire + msgs * TCPIP)}** |")
    print()
    ka = links * 2 * PING / KEEPALIVE_S
    print(f"Standing cost: {links:,} control links (file descriptors and TCP "
          f"connections) at the coordinator, one authenticated handshake each at start "
          f"and after a reconnect; keepalives {links * 2 / KEEPALIVE_S:,.1f} frames/s, "
          f"{human(ka)}/s. Coordinator state per step in flight: one bit per rank "
          f"({human((a.nodes * a.ranks + 7) // 8)}) plus one entry per holder "
          f"({a.nodes:,}).")


if __name__ == "__main__":
    main()
