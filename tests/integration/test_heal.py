#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A corrupt copy is found, never served, and healed from a good one
(issue 12, reproductions 1 and 2; docs/replication.md, "Corrupt copies").

Real daemons on the loopback: two nodes, one clique (replication factor
2), no object store.  Corruption is injected by editing the files on disk
the way a failing disk or a stray write would.

  1. A corrupt copy in node 0's local tier — a flipped byte, a truncated
     shard file, a deleted shard file, two blocks swapped, a MANIFEST made
     wrong (one per step) — and one in node 1's replica area of node 0:
     the reads through that node return the right bytes, the bad copy is
     replaced by one whose files equal the original's, and `ckptctl
     status` counts the repairs; a copy `ckptctl verify` found corrupt is
     restored by `ckptctl restore JOB STEP --from-peers` (1 rank).
     (Before: every read failed with -EIO; the restore said 0 ranks.)
  2. Every copy of a rank bad (node 0's local copy and node 1's replica):
     the read fails with -EIO naming the shard, the block and the copies
     tried, node 0's log blames node 1's copy (not node 0) and node 0
     tells node 1, which records its replica unrepairable; status counts
     the copy with no good one left, LATEST_RANK for that rank falls back
     to the previous good step, and MAP is refused.  (Before: the log
     blamed node 0 and LATEST_RANK kept naming the corrupt step.)  The
     job-wide LATEST on either node names the previous step too, and with
     that step's rank 0 as bad everywhere fails with -ENOENT naming both
     damaged steps.  (Before: it named the corrupt step.)

  3. `ckptctl verify` (text and --json) finds swapped blocks in the local
     tier and a truncated file in a replica area, exits 1, and with
     --repair replaces both (exit 0, files equal the originals); unknown
     job or step and bad arguments are clear errors.  (Before: no such
     command.)
  4. With an object store (a real radosgw, tests/s3/radosgw.sh; skipped
     without Ceph) and no neighbour: a flipped byte in the local copy is
     repaired from the store.  (Before: the read failed with -EIO.)
  5. Three nodes (replication factor 3): node 0's copy and node 1's
     replica bad, node 2's good: node 0's read passes over node 1's copy
     for node 2's, and node 1, told, repairs its replica.  (Before: the
     read failed with -EIO.)

Cases can be chosen with CKPT_HEAL_CASES=1,2 when run by hand.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (CKPTD, CKPTCTL, TESTRANK, TestFailure, check, check_log_clean,  # noqa: E402
                     ctl_json, flip_byte, log, log_lines, run_cases, save_node, shards_arg,
                     step_path, wait_until)
from objstore import start_store, wait_remote  # noqa: E402
from cluster import (Cluster, layout, must_verify, replica_step_path, same_as,  # noqa: E402
                     snapshot, status_object, stop_clean, wait_replicated)

MiB = 1024 * 1024
JOB = "heal.job-1"


# --------------------------------------------------------------------------
# helpers


def commit_both(cl, job, step, layouts, seed):
    """Both nodes save their ranks of step, then one commit."""
    for d in cl.nodes:
        save_node(d, job, step, cl.ranks_of(d.node), cl.world, layouts, seed=seed, commit=False)
    cl.nodes[0].rank("commit", "--job", job, "--step", step)


def truncate(path, size):
    os.truncate(path, size)


def swap_blocks(path, a, b):
    with open(path, "r+b") as f:
        f.seek(a * MiB)
        x = f.read(MiB)
        f.seek(b * MiB)
        y = f.read(MiB)
        check(x != y, "blocks %d and %d of %s are equal: swapping them changes nothing"
              % (a, b, path))
        f.seek(a * MiB)
        f.write(y)
        f.seek(b * MiB)
        f.write(x)
        f.flush()
        os.fsync(f.fileno())


def break_manifest(path):
    """One block CRC of the first `blocks` line changed: the MANIFEST no
    longer parses (its end CRC and the shard CRC disagree)."""
    with open(path) as f:
        text = f.read()
    m = re.search(r"^blocks ([0-9a-f]{8})", text, re.M)
    check(m, "no blocks line in %s" % path)
    old = m.group(1)
    new = "%08x" % (int(old, 16) ^ 1)
    text = text[:m.start(1)] + new + text[m.end(1):]
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def copies(d):
    return status_object(d, "copies")


def latest_rank(d, rank, job):
    p = d.rank("latest", "--job", job, "--rank", rank)
    kv = {}
    for ln in p.stdout.splitlines():
        if ln.startswith("fell back from step "):
            continue
        k, _, v = ln.partition(" ")
        kv[k] = int(v)
    return kv


def two_nodes(ctx, steps):
    """Two nodes, one clique; the steps saved by both, committed and
    replicated."""
    # every step of a case is kept (retention's default keeps 3)
    cl = Cluster(ctx, 2, 2, 1, "clique", ranks_per_node=1, pool="64M", slot="4M",
                 extra=["--local-keep", "10", "--pool-memory-tier=no"])
    cl.start()
    wait_until(lambda: ctl_json(cl.nodes[0], "status").get("replication", {}).get("peers_up")
               == 1, timeout=30, what="node 0 to be connected to node 1")
    for step in steps:
        commit_both(cl, JOB, step, LAYOUTS, seed=step)
        wait_replicated(cl.nodes[0], JOB, step)
    return cl


# rank 0 has a shard of three whole blocks (for the swap) besides the usual
LAYOUTS = {0: layout(0, big=3 * MiB), 1: layout(1)}


# --------------------------------------------------------------------------
# 1. a corrupt copy is repaired from a good one


def case_repair(ctx):
    steps = {
        10: ("a flipped byte", lambda d: flip_byte(os.path.join(d, "big"), MiB + 12345)),
        11: ("a truncated shard file", lambda d: truncate(os.path.join(d, "opt.state"), 100)),
        12: ("a deleted shard file", lambda d: os.unlink(os.path.join(d, "model.weights"))),
        13: ("two blocks swapped", lambda d: swap_blocks(os.path.join(d, "big"), 0, 2)),
        14: ("a wrong MANIFEST", lambda d: break_manifest(os.path.join(d, "MANIFEST"))),
        15: ("a flipped byte in node 1's replica",
             lambda d: flip_byte(os.path.join(d, "big"), 2 * MiB + 7)),
    }
    cl = two_nodes(ctx, list(steps) + [16])
    n0, n1 = cl.nodes
    for step, (what, damage) in sorted(steps.items()):
        if step == 15:
            node, rank_dir = n1, os.path.join(replica_step_path(n1.state_dir, 0, JOB, step),
                                              "rank-0")
        else:
            node, rank_dir = n0, os.path.join(step_path(n0.state_dir, JOB, step), "rank-0")
        original = snapshot(rank_dir)
        damage(rank_dir)
        must_verify(node, JOB, step, 0, LAYOUTS[0], seed=step, what=" (%s)" % what)
        same_as(rank_dir, original, "node %d, step %d (%s)" % (node.node, step, what))
        check(log_lines(node, r"node %d: job %s step %d rank 0: the copy in %s was corrupt "
                        r".*; repaired from a neighbour" % (node.node, re.escape(JOB), step,
                                                           "the replica area of node 0"
                                                           if step == 15 else "the local tier")),
              "node %d's log does not say it repaired step %d:\n%s"
              % (node.node, step, "\n".join(log_lines(node, "corrupt|repair")[-10:])))
        # served again: no repair the second time
        must_verify(node, JOB, step, 0, LAYOUTS[0], seed=step, what=" (again, %s)" % what)
        log("   %s: the read returned the right bytes, the copy was repaired" % what)
    # reproduction 1 by hand: a copy found corrupt (by verify, without
    # --repair) is restored by `ckptctl restore --from-peers`, not skipped
    # as present ("0 ranks restored")
    rank_dir = os.path.join(step_path(n0.state_dir, JOB, 16), "rank-0")
    original = snapshot(rank_dir)
    flip_byte(os.path.join(rank_dir, "opt.state"), 7)
    p = n0.ctl("verify", JOB, 16, check_rc=False)
    check(p.returncode == 1, "verify of the corrupt step 16: exit %d\n%s" % (p.returncode,
                                                                            p.stdout))
    p = n0.ctl("restore", JOB, 16, "--from-peers")
    check("1 ranks restored from the neighbours" in p.stdout,
          "restore --from-peers of the corrupt copy: %r" % p.stdout)
    same_as(rank_dir, original, "node 0, step 16 (restore --from-peers)")
    must_verify(n0, JOB, 16, 0, LAYOUTS[0], seed=16, what=" (after restore --from-peers)")
    log("   a copy verify found corrupt: restore --from-peers restored it (1 rank)")
    c0, c1 = copies(n0), copies(n1)
    check(c0 == {"bad": 0, "repaired": 6, "unrepairable": 0},
          "node 0's status counts copies %r, expected 6 repaired" % c0)
    check(c1 == {"bad": 0, "repaired": 1, "unrepairable": 0},
          "node 1's status counts copies %r, expected 1 repaired" % c1)
    text = n0.ctl("status").stdout
    check("6 corrupt copies repaired" in text, "ckptctl status does not show the repairs:\n%s"
          % text)
    # LATEST_RANK keeps the newest step: its copy is good again
    kv = latest_rank(n0, 0, JOB)
    check(kv.get("step") == 16 and kv.get("newest") == 16,
          "latest --rank 0 after the repairs: %r, expected step 16" % kv)
    stop_clean(cl.nodes)


# --------------------------------------------------------------------------
# 2. no good copy left


def case_all_bad(ctx):
    cl = two_nodes(ctx, (20, 21))
    n0, n1 = cl.nodes
    local = os.path.join(step_path(n0.state_dir, JOB, 21), "rank-0")
    replica = os.path.join(replica_step_path(n1.state_dir, 0, JOB, 21), "rank-0")
    flip_byte(os.path.join(local, "big"), MiB + 1)
    flip_byte(os.path.join(replica, "big"), 2 * MiB + 1)

    p = n0.rank("verify", "--job", JOB, "--step", 21, "--rank", 0, "--shards",
                shards_arg(LAYOUTS[0]), "--seed", 21, check_rc=False)
    err = p.stderr
    check(p.returncode == 1 and "EIO" in err,
          "a read with every copy bad should fail with EIO, got exit %d: %s%s"
          % (p.returncode, p.stdout, err))
    for want in ("shard big block 1 failed its CRC32C", "node 0's copy in the local tier",
                 "node 1's copy: shard big block 2 failed its CRC32C"):
        check(want in err, "the read's error does not say %r: %s" % (want, err))
    log("   the read failed: %s" % err.strip().splitlines()[0])
    # reproduction 2: the receiver blames the node whose copy was bad
    blamed = log_lines(n0, r"rank 0 \(node 0's\) from node 1: node 1's copy: shard big block 2 "
                       r"failed its CRC32C")
    check(blamed, "node 0's log does not blame node 1's copy:\n%s"
          % "\n".join(log_lines(n0, "CRC32C")[-10:]))
    check(not log_lines(n0, r"from node 0: shard big"),
          "node 0's log blames node 0 for node 1's bad copy")
    # ... and tells node 1, which tries to heal its replica (from node 0,
    # whose copy is bad too), records it, and stops offering it
    wait_until(lambda: status_object(n1, "copies").get("unrepairable") == 1, timeout=30,
               what=lambda: "node 1 to record its replica unrepairable: %r\n%s"
               % (status_object(n1, "copies"), "\n".join(log_lines(n1, "corrupt")[-10:])))
    check(log_lines(n1, r"node 0 \(.*\) reports this node's copy of job %s step 21 rank 0 "
                    r"corrupt: node 1's copy: shard big block 2" % re.escape(JOB)),
          "node 1's log does not say node 0 reported its copy:\n%s"
          % "\n".join(log_lines(n1, "corrupt")[-10:]))
    check(log_lines(n1, r"node 1: job %s step 21 rank 0: the copy in the replica area of node 0 "
                    r"is corrupt \(node 0 found: .*\) and no good copy was found" % re.escape(JOB)),
          "node 1's log does not record its replica unrepairable:\n%s"
          % "\n".join(log_lines(n1, "corrupt")[-10:]))
    c0 = copies(n0)
    check(c0 == {"bad": 0, "repaired": 0, "unrepairable": 1},
          "node 0's status counts copies %r, expected 1 with no good copy" % c0)
    text = n0.ctl("status").stdout
    check("1 with no good copy left (CORRUPT)" in text,
          "ckptctl status does not show the corrupt copy:\n%s" % text)
    # LATEST_RANK no longer offers step 21 for rank 0; rank 1 keeps it
    kv = latest_rank(n0, 0, JOB)
    check(kv.get("step") == 20 and kv.get("newest") == 21,
          "latest --rank 0 with step 21's copies bad: %r, expected step 20 (newest 21)" % kv)
    check(log_lines(n0, r"step 21 is not restorable \(its copy on node 0 is corrupt"),
          "node 0's log does not say why step 21 was passed over")
    # LATEST_RANK is per rank (docs/restore.md): rank 1 keeps step 21; the
    # trainer takes the minimum over its ranks
    kv = latest_rank(n0, 1, JOB)
    check(kv.get("step") == 21, "latest --rank 1: %r, expected step 21 (its copies are good)"
          % kv)
    # the job-wide LATEST (ckpt_latest, ckptctl latest, the DCP reader)
    # passes over step 21 too: on node 0 (its local copy) and on node 1
    # (its replica-area copy of node 0's rank)
    for d in (n0, n1):
        doc = ctl_json(d, "latest", JOB)
        check(doc.get("step") == 20, "node %d: latest with step 21's rank 0 unrepairable: %r, "
              "expected step 20" % (d.node, doc))
        check(log_lines(d, r"job %s: newest restorable step 20; passed over committed step 21: "
                        r"a rank of it has no good copy left" % re.escape(JOB)),
              "node %d's log does not say why latest passed over step 21" % d.node)
    # MAP refuses the rank; the older step reads fine
    # (the first shard is empty: nothing is READ before its MAP)
    p = n0.rank("verify", "--job", JOB, "--step", 21, "--rank", 0, "--shards",
                shards_arg(LAYOUTS[0]), "--seed", 21, "--map", check_rc=False)
    check(p.returncode != 0 and "EIO" in p.stderr and "no good copy" in p.stderr,
          "MAP of the unrepairable rank: exit %d: %s" % (p.returncode, p.stderr))
    must_verify(n0, JOB, 20, 0, LAYOUTS[0], seed=20, what=" (the previous good step)")
    # ckptctl verify: the copy stays bad, --repair cannot help, exit 1 both times
    for args in ((), ("--repair",)):
        p = n0.ctl("verify", JOB, 21, "--rank", 0, *args, check_rc=False)
        check(p.returncode == 1 and re.search(r"^21 +0 +local +big .*BAD: block 1 failed "
                                              r"its CRC32C", p.stdout, re.M),
              "verify %s of the unrepairable copy: exit %d:\n%s%s"
              % (" ".join(args), p.returncode, p.stdout, p.stderr))
    check("not repaired: no good copy" in p.stdout, "verify --repair does not say why it "
          "could not repair:\n%s" % p.stdout)
    # step 20's rank 0 as bad everywhere: no committed step is left to
    # restore the job from, and latest says which steps are damaged
    flip_byte(os.path.join(step_path(n0.state_dir, JOB, 20), "rank-0", "big"), MiB + 1)
    flip_byte(os.path.join(replica_step_path(n1.state_dir, 0, JOB, 20), "rank-0", "big"),
              2 * MiB + 1)
    p = n0.rank("verify", "--job", JOB, "--step", 20, "--rank", 0, "--shards",
                shards_arg(LAYOUTS[0]), "--seed", 20, check_rc=False)
    check(p.returncode == 1 and "EIO" in p.stderr,
          "a read of step 20 with every copy bad: exit %d: %s" % (p.returncode, p.stderr))
    wait_until(lambda: copies(n0).get("unrepairable") == 2, timeout=30,
               what=lambda: "node 0 to record step 20's copy unrepairable: %r" % copies(n0))
    p = n0.ctl("latest", JOB, check_rc=False)
    check(p.returncode != 0 and "has no committed checkpoint to restore from: committed steps "
          "21, 20 each have a rank with no good copy left" in p.stderr,
          "latest with every committed step damaged: exit %d: %s%s"
          % (p.returncode, p.stdout, p.stderr))
    kv = latest_rank(n0, 1, JOB)
    check(kv.get("step") == 21, "latest --rank 1 with rank 0 damaged in every step: %r, "
          "expected step 21" % kv)
    stop_clean(cl.nodes)


# --------------------------------------------------------------------------
# 3. ckptctl verify


def verify_json(d, *args):
    p = d.ctl("--json", "verify", *args, check_rc=False)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        raise TestFailure("verify --json %s printed %r (exit %d, %s)"
                          % (args, p.stdout, p.returncode, p.stderr))
    return p.returncode, doc


def shard_entries(doc):
    """verify --json's entries by (step, rank, replica_of) and shard."""
    out = {}
    for e in doc["shards"]:
        out.setdefault((e["step"], e["rank"], e["replica_of"]), {})[e["shard"]] = e
    return out


def case_verify(ctx):
    cl = two_nodes(ctx, (30, 31))
    n0, n1 = cl.nodes
    local = os.path.join(step_path(n0.state_dir, JOB, 30), "rank-0")
    local31 = os.path.join(step_path(n0.state_dir, JOB, 31), "rank-0")
    replica = os.path.join(replica_step_path(n0.state_dir, 1, JOB, 31), "rank-1")
    originals = {local: snapshot(local), local31: snapshot(local31), replica: snapshot(replica)}
    # step 30 rank 0 (4 shards): two bad, in different blocks; the check of
    # the copy goes on past the first
    swap_blocks(os.path.join(local, "big"), 0, 1)
    flip_byte(os.path.join(local, "model.weights"), MiB)
    truncate(os.path.join(replica, "opt.state"), 1000)
    os.unlink(os.path.join(local31, "opt.state"))

    # everything node 0 holds: its own rank 0 and node 1's rank 1, two steps
    rc, doc = verify_json(n0, JOB)
    check(rc == 1 and doc["copies_checked"] == 4 and doc["bad"] == 3 and doc["repaired"] == 0,
          "verify --json %s on node 0: exit %d, %r" % (JOB, rc, doc))
    got = shard_entries(doc)
    want_shards = {(s, r, c): {n for n, _ in LAYOUTS[r]} for s in (30, 31)
                   for r, c in ((0, None), (1, 1))}
    check({k: set(v) for k, v in got.items()} == want_shards and len(doc["shards"]) == 12,
          "verify lists the shards %r, expected %r" % (got, want_shards))
    want_bad = {
        (30, 0, None, "big"): "block 0 failed its CRC32C",
        (30, 0, None, "model.weights"): "block 1 failed its CRC32C",
        (31, 1, 1, "opt.state"): "the file has 1000 bytes, the MANIFEST says %d"
                                 % dict(LAYOUTS[1])["opt.state"],
        (31, 0, None, "opt.state"): "the file is missing",
    }
    bad = {k + (n,): e["detail"] for k, v in got.items() for n, e in v.items()
           if e["state"] == "bad"}
    check(bad == want_bad, "verify's bad shards: %r, expected %r" % (bad, want_bad))
    for k, v in got.items():
        for n, e in v.items():
            check(e["bytes"] == dict(LAYOUTS[k[1]])[n] and e["copy"] == (
                  "local" if k[2] is None else "replica of node %d" % k[2]),
                  "verify's entry for %r %s: %r" % (k, n, e))
            if k + (n,) not in want_bad:
                check(e["state"] == "good" and e["detail"] == "",
                      "verify's good shard %r %s: %r" % (k, n, e))
    check(copies(n0)["bad"] == 3, "status after verify: %r, expected 3 bad" % copies(n0))
    # narrowed to one copy, in text: a line per shard
    p = n0.ctl("verify", JOB, 31, "--rank", 1, check_rc=False)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("31 ")]
    check(p.returncode == 1 and len(lines) == 2
          and re.search(r"^31 +1 +replica of node 1 +opt\.state .* BAD: the file has 1000 bytes",
                        p.stdout, re.M)
          and re.search(r"^31 +1 +replica of node 1 +empty .* good$", p.stdout, re.M)
          and "job %s: 1 copy checked, 1 bad, 0 repaired" % JOB in p.stdout,
          "verify %s 31 --rank 1: exit %d:\n%s%s" % (JOB, p.returncode, p.stdout, p.stderr))
    # repaired, from node 1 (the replica's origin) and node 1's replica of rank 0
    rc, doc = verify_json(n0, JOB, "--repair")
    check(rc == 0 and doc["bad"] == 0 and doc["repaired"] == 3,
          "verify --repair on node 0: exit %d, %r" % (rc, doc))
    got = shard_entries(doc)
    for k in ((30, 0, None), (31, 0, None), (31, 1, 1)):
        check(all(e["state"] == "repaired" for e in got[k].values()),
              "verify --repair: the shards of the repaired copy %r: %r" % (k, got[k]))
    check(all(e["state"] == "good" for e in got[(30, 1, 1)].values()),
          "verify --repair: the good copy's shards: %r" % got[(30, 1, 1)])
    for path, want in originals.items():
        same_as(path, want, path)
    rc, doc = verify_json(n0, JOB)
    check(rc == 0 and doc["bad"] == 0 and doc["repaired"] == 0 and doc["copies_checked"] == 4
          and all(e["state"] == "good" for e in doc["shards"]),
          "verify after the repair: exit %d, %r" % (rc, doc))
    check(copies(n0) == {"bad": 0, "repaired": 3, "unrepairable": 0},
          "status after verify --repair: %r" % copies(n0))
    log("   verify named each bad shard (two in one copy, a truncated and a missing file) and "
        "the good ones; --repair fixed the three copies")
    # bad input: a clear error, nothing changes
    p = n0.ctl("verify", "no.such-job", check_rc=False)
    check(p.returncode == 1 and "no job named 'no.such-job'" in p.stderr and not p.stdout,
          "verify of an unknown job: exit %d: %s%s" % (p.returncode, p.stdout, p.stderr))
    p = n0.ctl("verify", JOB, 99, check_rc=False)
    check(p.returncode == 1 and "holds no copy of job '%s' step 99" % JOB in p.stderr,
          "verify of an unknown step: exit %d: %s%s" % (p.returncode, p.stdout, p.stderr))
    p = n0.ctl("verify", JOB, "--rank", "x", check_rc=False)
    check(p.returncode == 2, "verify --rank x: exit %d, expected 2 (usage)" % p.returncode)
    stop_clean(cl.nodes)


# --------------------------------------------------------------------------
# 5. three nodes: a bad copy on the first neighbour, a good one on the next


def case_next_neighbour(ctx):
    cl = Cluster(ctx, 3, 3, 1, "clique", ranks_per_node=1, pool="64M", slot="4M",
                 extra=["--pool-memory-tier=no"])
    cl.start()
    n0, n1, n2 = cl.nodes
    wait_until(lambda: status_object(n0, "replication").get("peers_up") == 2, timeout=30,
               what="node 0 to be connected to nodes 1 and 2")
    layouts = {0: layout(0, big=3 * MiB), 1: layout(1), 2: layout(2)}
    commit_both(cl, JOB, 50, layouts, seed=50)
    wait_replicated(n0, JOB, 50)
    local = os.path.join(step_path(n0.state_dir, JOB, 50), "rank-0")
    replica = os.path.join(replica_step_path(n1.state_dir, 0, JOB, 50), "rank-0")
    originals = {local: snapshot(local), replica: snapshot(replica)}
    flip_byte(os.path.join(local, "big"), 5)
    flip_byte(os.path.join(replica, "big"), MiB + 5)
    # node 0 asks its targets in order: node 1 sends a bad copy, node 2 a good one
    must_verify(n0, JOB, 50, 0, layouts[0], seed=50, what=" (node 1's copy bad, node 2's good)")
    same_as(local, originals[local], "node 0's copy")
    check(log_lines(n0, r"job %s step 50 rank 0: asking node 2 for another copy \(node 1's copy: "
                    r"shard big block 1 failed its CRC32C\)" % re.escape(JOB)),
          "node 0's log does not say it asked node 2 after node 1's bad copy:\n%s"
          % "\n".join(log_lines(n0, "copy")[-10:]))
    # node 1 was told, and repaired its replica from a good copy
    wait_until(lambda: status_object(n1, "copies").get("repaired") == 1, timeout=60,
               what=lambda: "node 1 to repair its replica: %r\n%s"
               % (status_object(n1, "copies"), "\n".join(log_lines(n1, "corrupt|copy")[-10:])))
    same_as(replica, originals[replica], "node 1's replica")
    log("   node 1's bad copy passed over for node 2's; both bad copies repaired")
    stop_clean(cl.nodes)


# --------------------------------------------------------------------------
# 4. the object store as the source


def case_store(ctx):
    rctx = start_store(ctx)
    ctx.cleanups.append(rctx.cleanup)  # runs first: the daemon before the gateway
    bucket, job = "heal", "heal.job-4"
    rctx.store.s3.create_bucket(bucket)
    d = rctx.daemon("n0", bucket, node=(0, 1), pool="64M", slot="4M",
                    flags=["--pool-memory-tier=no"]).start()
    d.node = 0
    spec = layout(0, big=3 * MiB)
    save_node(d, job, 40, [0], 1, {0: spec}, seed=40)
    wait_remote(d, job, 40)
    rank_dir = os.path.join(step_path(d.state_dir, job, 40), "rank-0")
    original = snapshot(rank_dir)
    flip_byte(os.path.join(rank_dir, "big"), 2 * MiB + 99)
    must_verify(d, job, 40, 0, spec, seed=40, what=" (healed from the object store)")
    same_as(rank_dir, original, "the local copy repaired from the object store")
    check(log_lines(d, r"node 0: job %s step 40 rank 0: the copy in the local tier was corrupt "
                    r"\(shard big block 2 failed its CRC32C\); repaired from the object store"
                    % re.escape(job)),
          "the log does not say the copy was repaired from the object store:\n%s"
          % "\n".join(log_lines(d, "corrupt|repair")[-10:]))
    check(copies(d) == {"bad": 0, "repaired": 1, "unrepairable": 0},
          "status after the repair: %r" % copies(d))
    log("   a flipped byte in the local copy: read right, repaired from the object store")
    stop_clean([d])


CASES = [
    (1, "a corrupt copy (local tier, replica area) is repaired from a good one", case_repair),
    (2, "no good copy: -EIO naming the copies, LATEST_RANK falls back", case_all_bad),
    (3, "ckptctl verify finds bad copies and --repair replaces them", case_verify),
    (4, "the object store as the good copy (one node, no neighbour)", case_store),
    (5, "three nodes: a bad copy on one neighbour, the good one from the next", case_next_neighbour),
]


def main():
    return run_cases(CASES, "CKPT_HEAL_CASES", "ckptd-heal-", (CKPTD, CKPTCTL, TESTRANK))


if __name__ == "__main__":
    sys.exit(main())
