#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A corrupt copy in a replica area healed from the object store (issue
12; docs/replication.md, "Corrupt copies"), against a real radosgw
(tests/s3/radosgw.sh; skips without Ceph).

Two daemons, one clique (replication factor 2), both flushing to the same
bucket.  Step 60 is saved by both (rank 0 on node 0, rank 1 on node 1),
committed, replicated and flushed.  Node 0, which owns rank 0 and holds
the only other copy of it, is stopped; a byte is flipped in node 1's
replica area copy of rank 0.  `ckptctl verify --repair` on node 1 finds
it, no neighbour is up, and the copy is fetched from the objects node 0
flushed into a tmp directory of the replica area, checked block by
block, swapped in and verified again: the files equal the originals, a
read of rank 0 through node 1 returns the bytes saved, the log says
"repaired from the object store" and status counts one copy repaired.
(Before: the object store was not tried for a replica area's copy, and
the copy was recorded unrepairable.)
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (CKPTCTL, CKPTD, TESTRANK, check, cluster_flags, flip_byte,  # noqa: E402
                     free_ports, log, log_lines, run_cases, save_node, wait_until, write_psk)
from objstore import start_store, wait_remote  # noqa: E402
from cluster import (layout, must_verify, replica_step_path, same_as, snapshot,  # noqa: E402
                     status_object, stop_clean, wait_replicated)

MiB = 1024 * 1024
JOB = "heal.job-6"
STEP = 60
LAYOUTS = {0: layout(0, big=3 * MiB), 1: layout(1)}


def case_replica_from_store(ctx):
    rctx = start_store(ctx)
    ctx.cleanups.append(rctx.cleanup)  # runs first: the daemons before the gateway
    bucket = "heal-area"
    rctx.store.s3.create_bucket(bucket)
    peers = ",".join("127.0.0.1:%d" % p for p in free_ports(2))
    psk = write_psk(os.path.join(ctx.tmp, "heal-area-psk"))
    nodes = []
    for i in range(2):
        d = rctx.daemon("n%d" % i, bucket, pool="64M", slot="4M",
                        flags=cluster_flags(peers, 2, i, 2, psk))
        d.node = i
        nodes.append(d)
    for d in nodes:
        d.start(wait=False)
    for d in nodes:
        d.wait_ready(60)
    n0, n1 = nodes
    wait_until(lambda: status_object(n0, "replication").get("peers_up") == 1, timeout=30,
               what="node 0 to be connected to node 1")
    for d in nodes:
        save_node(d, JOB, STEP, [d.node], 2, LAYOUTS, seed=STEP, commit=False)
    n0.rank("commit", "--job", JOB, "--step", STEP)
    wait_replicated(n0, JOB, STEP)
    wait_replicated(n1, JOB, STEP)
    for d in nodes:
        wait_remote(d, JOB, STEP)

    # the owner of rank 0 (its only other copy) goes away
    stop_clean([n0])
    replica = os.path.join(replica_step_path(n1.state_dir, 0, JOB, STEP), "rank-0")
    original = snapshot(replica)
    flip_byte(os.path.join(replica, "big"), 2 * MiB + 99)

    p = n1.ctl("verify", JOB, STEP, "--rank", 0, "--repair", check_rc=False)
    check(p.returncode == 0, "verify --repair of node 1's replica of rank 0: exit %d:\n%s%s\n%s"
          % (p.returncode, p.stdout, p.stderr, "\n".join(log_lines(n1, "corrupt|repair|fetch")
                                                          [-10:])))
    same_as(replica, original, "node 1's replica of rank 0 repaired from the object store")
    check(log_lines(n1, r"node 1: job %s step %d rank 0: the copy in the replica area of node 0 "
                    r"was corrupt \(.*\); repaired from the object store"
                    % (re.escape(JOB), STEP)),
          "node 1's log does not say the replica was repaired from the object store:\n%s"
          % "\n".join(log_lines(n1, "corrupt|repair")[-10:]))
    # the bytes read back through the holder are the bytes saved
    must_verify(n1, JOB, STEP, 0, LAYOUTS[0], seed=STEP, what=" (replica repaired from the store)")
    check(status_object(n1, "copies") == {"bad": 0, "repaired": 1, "unrepairable": 0},
          "node 1's status after the repair: %r" % status_object(n1, "copies"))
    log("   node 0 down, node 1's replica of rank 0 corrupt: repaired from the object store")
    stop_clean([n1])


CASES = [
    (1, "a replica area's corrupt copy, no neighbour: repaired from the object store",
     case_replica_from_store),
]


def main():
    return run_cases(CASES, "CKPT_HEAL_REMOTE_CASES", "ckptd-heal-remote-",
                     (CKPTD, CKPTCTL, TESTRANK))


if __name__ == "__main__":
    sys.exit(main())
