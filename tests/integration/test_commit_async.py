#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Commit requests that outlive the trainer (issue 11, ckpt_commit_async):
"a trainer that crashes after staging loses nothing".  Each rank's stage
ends with COMMIT_ASYNC and the trainer exits; the daemons commit the step
by themselves once the last rank lands, whoever is still connected.

  1. one node, world 2: rank 0 saves, asks (ckpt_commit_async) and exits;
     the step is not committed while rank 1 is missing; rank 1 saves later
     from a new process and exits without any commit call; the step
     commits: a third connection's ckpt_wait(COMMITTED) returns, `ckptctl
     latest` names it, both ranks read back bit-exact, the log says who
     asked;
  2. the request is durable: the daemon is SIGKILLed right after the reply
     (rank 1 not saved yet) and restarted; it takes the request up again,
     rank 1 saves, the step commits;
  3. two daemons of one cluster (node_count 2), a rank on each: each saves,
     asks and exits at once; the step is committed on both nodes and reads
     back bit-exact through each;
  4. the exact errors: an unknown job and a step with no save here
     (ENOENT), another uid's job (EACCES; as root only: it runs the client
     as nobody), a rank whose save failed here (a torn shard: EPROTO), a
     timeout_ms other than 0 on the wire (EINVAL) and the request in a
     version-3 header (EBADMSG); a committed step is answered 0;
  5. retention (keep 1): a pending request on a step newer than the newest
     committed one keeps it through retention runs (a restart runs one)
     until it commits; a pending request on a step that became older than
     a newer committed one goes with the step;
  6. two nodes again: node 1's rank asks, both nodes are SIGKILLed and
     restarted, then node 0's rank saves; and node 1's rank asks, node 0 (the
     coordinator) is SIGKILLed and restarted, then its rank saves: the step
     commits on both nodes each time.

Cases can be chosen with CKPT_CA_CASES=2,3 (by number) when run by hand.
"""
import os
import signal
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (Daemon, check, check_log_clean, expect_error, expect_ok,  # noqa: E402
                     log, log_lines, raw, run_cases, shards_arg, step_path, wait_until,
                     wire_name, wire_packet)
from cluster import Cluster  # noqa: E402

MiB = 1024 * 1024
WORLD = 2
CKPT_MSG_COMMIT_ASYNC = 21
NOBODY = 65534


def layout(r):
    """A shard over a slot (4 MiB) and across blocks, a small one, an empty one."""
    return [("model", 5 * MiB + 4099 * r + 3), ("opt", 777 + r), ("empty", 0)]


def save(d, job, step, rank, world=WORLD, seed=0, ask=False, wait_local=False):
    """One rank saves (a process of its own); with ask it ends with
    ckpt_commit_async and exits at once."""
    args = ["save", "--job", job, "--step", step, "--rank", rank, "--world", world,
            "--seed", seed, "--shards", shards_arg(layout(rank))]
    if rank % 2:
        args.append("--zero-copy")
    if wait_local:
        args.append("--wait-local")
    if ask:
        args.append("--commit-async")
    p = d.rank(*args)
    if ask:
        check("asked" in p.stdout.split(), "rank %d of step %d: commit_async did not say it "
              "asked: %r" % (rank, step, p.stdout))
    return p


def committed_now(d, job, step):
    """ckpt_wait(COMMITTED) with timeout 0: just checks."""
    p = d.rank("wait", "--job", job, "--step", step, "--tier", "committed", "--timeout", 0,
               check_rc=False)
    if p.returncode == 0:
        return True
    check("ETIMEDOUT" in p.stderr, "wait committed (check only) of step %d: %s"
          % (step, p.stderr.strip()))
    return False


def ctl_latest(d, job):
    p = d.ctl("latest", job, check_rc=False)
    if p.returncode != 0:
        return None
    # "job J: newest committed step S (world size W)"
    words = p.stdout.split()
    return int(words[words.index("step") + 1])


def verify(d, job, step, ranks, seed=0):
    for r in ranks:
        d.rank("verify", "--job", job, "--step", step, "--rank", r, "--seed", seed,
               "--shards", shards_arg(layout(r)))
        d.rank("verify", "--job", job, "--step", step, "--rank", r, "--seed", seed, "--map",
               "--shards", shards_arg(layout(r)))


def ask_raw(d, job, step, timeout_ms=0, version=4):
    """COMMIT_ASYNC encoded here: values libckpt never sends."""
    pkt = wire_packet(CKPT_MSG_COMMIT_ASYNC, wire_name(job) + struct.pack("<QI", step, timeout_ms),
                      version=version)
    return raw(d, "send-hex", pkt.hex())


def committed_everywhere(cl, job, step, what):
    """Every node of cl calls step committed (soon), and each reads its rank
    back bit-exact (node n saves rank n)."""
    for d in cl.nodes:
        wait_until(lambda: committed_now(d, job, step), timeout=60,
                   what="node %d: step %d committed (%s)" % (d.node, step, what))
        verify(d, job, step, [d.node], seed=step)


def stop_clean(d):
    check_log_clean(d)
    rc = d.stop()
    check(rc == 0, "ckptd exited %s on SIGTERM:\n%s" % (rc, d.read_log()[-3000:]))


# --------------------------------------------------------------------------


def case_single_node(ctx):
    d = Daemon(ctx.tmp, pool="64M", slot="4M").start()
    ctx.daemons.append(d)
    job, step = "ca.one", 10
    save(d, job, step, 0, seed=step, ask=True)
    time.sleep(0.5)  # rank 0 lands; nothing may commit yet
    check(not committed_now(d, job, step), "step %d committed with rank 1 never saved" % step)
    check(ctl_latest(d, job) is None, "ckptctl latest names a step with rank 1 missing")
    check(log_lines(d, r"job %s step %d: commit asked by ckpt_commit_async" % (job, step)),
          "the daemon did not log the commit request")

    # a third connection waits for the commit itself
    waiter = d.rank_async("wait", "--job", job, "--step", step, "--tier", "committed",
                          "--timeout", 60000)
    time.sleep(0.2)
    save(d, job, step, 1, seed=step)  # a new process, no commit call, exits
    out, err = waiter.communicate(timeout=90)
    check(waiter.returncode == 0, "ckpt_wait(COMMITTED) from a third connection failed (%d): %s"
          % (waiter.returncode, err.strip()))
    check(ctl_latest(d, job) == step, "ckptctl latest after rank 1 saved: %r" % ctl_latest(d, job))
    verify(d, job, step, range(WORLD), seed=step)
    check(log_lines(d, r"job %s step %d: committed \(2 ranks, asked by ckpt_commit_async\)"
                    % (job, step)), "the daemon did not log the commit as asked by "
          "ckpt_commit_async:\n" + d.read_log()[-2000:])
    # asking again once committed: 0
    p = d.rank("commit-async", "--job", job, "--step", step)
    check("asked" in p.stdout, "commit_async of a committed step: %r" % p.stdout)
    log("   rank 0 asked and exited, rank 1 saved later without a commit: committed, "
        "bit-exact")

    # every rank asks, no barrier: one commit
    step += 1
    save(d, job, step, 1, seed=step, ask=True)
    save(d, job, step, 0, seed=step, ask=True)
    wait_until(lambda: committed_now(d, job, step), timeout=30, what="step %d committed" % step)
    verify(d, job, step, range(WORLD), seed=step)
    stop_clean(d)


def case_restart(ctx):
    d = Daemon(ctx.tmp, name="r1", pool="64M", slot="4M").start()
    ctx.daemons.append(d)
    job, step = "ca.restart", 20
    # rank 0 on disk before the kill: the request is what is being tested
    save(d, job, step, 0, seed=step, ask=True, wait_local=True)
    d.kill(signal.SIGKILL)  # at once after the reply
    d2 = Daemon(ctx.tmp, name="r2", state_dir=d.state_dir, pool="64M", slot="4M").start()
    ctx.daemons.append(d2)
    check(log_lines(d2, r"job %s step %d: commit asked by ckpt_commit_async before the restart"
                    % (job, step)), "the restarted daemon did not take up the request:\n"
          + d2.read_log()[-2000:])
    check(not committed_now(d2, job, step), "step %d committed after the restart with rank 1 "
          "never saved" % step)
    save(d2, job, step, 1, seed=step)
    wait_until(lambda: committed_now(d2, job, step), timeout=30,
               what="step %d committed after rank 1 saved (request from before the kill)" % step)
    check(ctl_latest(d2, job) == step, "ckptctl latest: %r" % ctl_latest(d2, job))
    verify(d2, job, step, range(WORLD), seed=step)

    # every rank on disk before the kill, nobody asked but rank 1, killed
    # right after: the restart commits it at once
    step += 1
    save(d2, job, step, 0, seed=step, wait_local=True)
    save(d2, job, step, 1, seed=step, ask=True, wait_local=True)
    # (it may commit before the kill; then the restart has nothing to do)
    d2.kill(signal.SIGKILL)
    d3 = Daemon(ctx.tmp, name="r3", state_dir=d.state_dir, pool="64M", slot="4M").start()
    ctx.daemons.append(d3)
    wait_until(lambda: committed_now(d3, job, step), timeout=30,
               what="step %d committed after the restart" % step)
    verify(d3, job, step, range(WORLD), seed=step)
    check(d3.catalog_integrity() == "ok", "catalog integrity check failed")
    stop_clean(d3)
    log("   the request survived a SIGKILL right after its reply; the step committed once "
        "rank 1 saved")


def case_cluster(ctx):
    cl = Cluster(ctx, 2, 1, ranks_per_node=1, prefix="ca").start()
    cl.wait_control_links()
    job = "ca.cluster"
    for step, order in ((30, (0, 1)), (31, (1, 0))):
        for n in order:  # each rank saves on its node, asks, exits at once
            save(cl.nodes[n], job, step, n, seed=step, ask=True)
        committed_everywhere(cl, job, step, "each rank asked")
        for d in cl.nodes:
            check(ctl_latest(d, job) == step, "node %d: ckptctl latest %r, expected %d"
                  % (d.node, ctl_latest(d, job), step))
        log("   step %d: ranks saved on nodes %s, each asked and exited: committed on both"
            % (step, order))

    # only node 1's rank asks, node 0's rank saves later and exits
    step = 32
    save(cl.nodes[1], job, step, 1, seed=step, ask=True)
    time.sleep(0.5)
    check(not committed_now(cl.nodes[1], job, step), "step %d committed on node 1 with rank 0 "
          "never saved" % step)
    save(cl.nodes[0], job, step, 0, seed=step)
    committed_everywhere(cl, job, step, "only node 1's rank asked")
    for d in cl.nodes:
        stop_clean(d)


def case_errors(ctx):
    root = os.geteuid() == 0
    if root:  # another uid must reach the socket
        for path in (os.path.dirname(ctx.tmp), ctx.tmp):
            os.chmod(path, 0o755)
    d = Daemon(ctx.tmp, pool="64M", slot="4M", extra=["--socket-mode", "0666"]).start()
    ctx.daemons.append(d)
    job = "ca.errors"

    p = d.rank("commit-async", "--job", "ca.nosuchjob", "--step", 1, check_rc=False)
    check(p.returncode == 1 and "ENOENT" in p.stderr and "no job named 'ca.nosuchjob'" in p.stderr,
          "commit_async of an unknown job: %r" % p.stderr.strip())

    save(d, job, 1, 0, world=1, wait_local=True)
    p = d.rank("commit-async", "--job", job, "--step", 2, check_rc=False)
    check(p.returncode == 1 and "ENOENT" in p.stderr and
          "no save of step 2 of job 'ca.errors' to commit" in p.stderr,
          "commit_async of a step never saved here: %r" % p.stderr.strip())

    if root:
        p = d.rank("commit-async", "--job", job, "--step", 1, check_rc=False, user=NOBODY)
        check(p.returncode == 1 and "EACCES" in p.stderr and
              "job 'ca.errors' belongs to another user" in p.stderr,
              "commit_async of another uid's job: %r" % p.stderr.strip())
    else:
        log("   (not root: the EACCES check of another uid's job is left out)")

    # a torn shard: the save of rank 0 of step 3 fails once checked
    p = d.rank("save", "--job", job, "--step", 3, "--rank", 0, "--world", 2, "--torn",
               "--shards", shards_arg([("t", 3 * MiB)]), check_rc=False)
    check(p.returncode == 1 and "EBADMSG" in p.stderr, "torn save: %r" % p.stderr.strip())
    p = d.rank("commit-async", "--job", job, "--step", 3, check_rc=False)
    check(p.returncode == 1 and "EPROTO" in p.stderr and
          "cannot commit step 3 of job 'ca.errors'" in p.stderr,
          "commit_async of a step whose rank failed: %r" % p.stderr.strip())

    # on the wire: timeout_ms is reserved (0), and the type is version 4's
    expect_ok(ask_raw(d, job, 1), what="COMMIT_ASYNC timeout 0 of an uncommitted step")
    expect_error(ask_raw(d, job, 1, timeout_ms=5000), "EINVAL", -22, "invalid value",
                 what="COMMIT_ASYNC with timeout_ms 5000")
    expect_error(ask_raw(d, job, 1, version=3), "EBADMSG", -74, "malformed",
                 what="COMMIT_ASYNC in a version-3 header")
    # step 1 (world 1, asked on the wire just now) committed by itself
    wait_until(lambda: committed_now(d, job, 1), timeout=30, what="step 1 committed")
    p = d.rank("commit-async", "--job", job, "--step", 1)
    check("asked" in p.stdout, "commit_async of a committed step: %r" % p.stdout)
    check(d.alive(), "ckptd died")
    log("   ENOENT (no job, no save here), %sEPROTO (torn rank), EINVAL (timeout_ms 5000), "
        "EBADMSG (version 3)" % ("EACCES (uid %d), " % NOBODY if root else ""))


def case_retention(ctx):
    d = Daemon(ctx.tmp, name="k1", pool="64M", slot="4M", extra=["--local-keep", "1"]).start()
    ctx.daemons.append(d)
    job = "ca.keep"
    for r in range(WORLD):
        save(d, job, 1, r, seed=1, wait_local=True)
    d.rank("commit", "--job", job, "--step", 1)
    save(d, job, 2, 0, seed=2, ask=True, wait_local=True)
    # a commit of another job and a restart both run retention over the steps
    save(d, "ca.other", 1, 0, world=1)
    d.rank("commit", "--job", "ca.other", "--step", 1)
    check(d.stop() == 0, "unclean exit")
    d = Daemon(ctx.tmp, name="k2", state_dir=d.state_dir, pool="64M", slot="4M",
               extra=["--local-keep", "1"]).start()
    ctx.daemons.append(d)
    check(os.path.isdir(step_path(d.state_dir, job, 2)),
          "retention removed step 2, which has a pending commit request")
    save(d, job, 2, 1, seed=2)
    wait_until(lambda: committed_now(d, job, 2), timeout=30, what="step 2 committed")
    verify(d, job, 2, range(WORLD), seed=2)
    wait_until(lambda: not os.path.isdir(step_path(d.state_dir, job, 1)), timeout=10,
               what="retention (keep 1) to remove step 1 once step 2 committed")
    log("   a pending request kept step 2 through retention until it committed")

    # a newer step commits first: the older one, still asked for, goes with
    # its request (the trainer moved on), and a restart does not bring it back
    save(d, job, 3, 0, seed=3, ask=True, wait_local=True)
    for r in range(WORLD):
        save(d, job, 4, r, seed=4, wait_local=True)
    d.rank("commit", "--job", job, "--step", 4)
    wait_until(lambda: not os.path.isdir(step_path(d.state_dir, job, 3)), timeout=10,
               what="retention to remove step 3 (older than the committed step 4)")
    check(log_lines(d, r"job %s step 3: removed by retention .*its commit request" % job),
          "the removal of step 3 does not say its commit request went with it")
    check(d.stop() == 0, "unclean exit")
    d = Daemon(ctx.tmp, name="k3", state_dir=d.state_dir, pool="64M", slot="4M",
               extra=["--local-keep", "1"]).start()
    ctx.daemons.append(d)
    check(not log_lines(d, r"commit asked by ckpt_commit_async before the restart"),
          "a request of a removed step was taken up again")
    check(ctl_latest(d, job) == 4, "latest: %r" % ctl_latest(d, job))
    stop_clean(d)


def case_cluster_restart(ctx):
    cl = Cluster(ctx, 2, 1, ranks_per_node=1, prefix="cr").start()
    cl.wait_control_links()
    job = "ca.cluster-restart"
    # a. node 1's rank asks and exits; both nodes are killed and come back
    #    (node 0 forgot the ask with its table: only node 1's catalog has
    #    the request, and its sync to node 0 carries it); then node 0's
    #    rank saves, without asking
    step = 40
    save(cl.nodes[1], job, step, 1, seed=step, ask=True, wait_local=True)
    for d in cl.nodes:
        d.kill(signal.SIGKILL)
    for d in cl.nodes:
        d.start(timeout=60)
    cl.wait_control_links({1: 2})
    save(cl.nodes[0], job, step, 0, seed=step)
    committed_everywhere(cl, job, step, "both nodes restarted after node 1 asked")
    log("   step %d: node 1 asked, both nodes were SIGKILLed and restarted; committed on both "
        "once rank 0 saved" % step)
    # b. node 1's rank asks; node 0, the coordinator, is killed and comes
    #    back with an empty table; node 0's rank saves then
    step = 41
    save(cl.nodes[1], job, step, 1, seed=step, ask=True, wait_local=True)
    cl.nodes[0].kill(signal.SIGKILL)
    cl.nodes[0].start(timeout=60)
    cl.wait_control_links({1: 3})
    save(cl.nodes[0], job, step, 0, seed=step)
    committed_everywhere(cl, job, step, "node 0 restarted after node 1 asked")
    log("   step %d: node 0 (the coordinator) restarted after node 1 asked; committed on both"
        % step)
    for d in cl.nodes:
        stop_clean(d)


CASES = [
    (1, "one node: rank 0 asks and exits, rank 1 saves later, the step commits",
     case_single_node),
    (2, "the request survives a SIGKILL of the daemon", case_restart),
    (3, "two nodes: each rank saves, asks and exits; committed on both", case_cluster),
    (4, "exact errors", case_errors),
    (5, "retention keeps a step with a pending request until it commits", case_retention),
    (6, "two nodes: both, then the coordinator alone, SIGKILLed and restarted after an ask",
     case_cluster_restart),
]


def main():
    return run_cases(CASES, "CKPT_CA_CASES", "ckptd-ca-")


if __name__ == "__main__":
    sys.exit(main())
