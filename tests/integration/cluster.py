# SPDX-License-Identifier: MIT
"""A cluster of real ckptd daemons on this machine, one per "node", for the
tests that replicate between them (test_replication.py, test_fallback.py):
the daemons, the placement rule they follow, saving a node's ranks, waiting
for replication, and reading a rank back bit-exact.

A shared helper module, not a test: test modules import it (and harness.py),
never one another (STYLE.md "Python", tests/lint/test-imports.py).
"""
import os
import re
import subprocess
import time

from harness import (Daemon, TestFailure, check, check_log_clean, cluster_flags, ctl_json,
                     free_ports, log_lines, shards_arg, wait_until, write_psk)

MiB = 1024 * 1024
REPL_TIMEOUT_S = 120


# --------------------------------------------------------------------------
# placement, from docs/replication.md (computed here from the rule as the
# documentation states it, not from the daemon's code)


def clique_targets(n, count, jump, factor):
    b = (n % jump) + (n // (jump * factor)) * jump * factor
    return [b + k * jump for k in range(factor) if b + k * jump != n]


def ring_targets(n, count, jump, factor):
    return [(n + k * jump) % count for k in range(1, factor)]


def targets_of(n, count, jump, factor, placement):
    if placement == "ring":
        return ring_targets(n, count, jump, factor)
    return clique_targets(n, count, jump, factor)


# --------------------------------------------------------------------------
# daemons, saves and checks


class NsDaemon(Daemon):
    """A ckptd run inside a network namespace (ip netns exec execs it, so
    the process is the daemon itself)."""

    def __init__(self, tmp, netns, **kw):
        super().__init__(tmp, **kw)
        self.netns = netns

    def args(self):
        return ["ip", "netns", "exec", self.netns] + super().args()


class Cluster:
    """N daemons of one cluster: node i saves ranks i*rpn .. i*rpn+rpn-1."""

    def __init__(self, ctx, count, factor, jump=1, placement="clique", ranks_per_node=2,
                 pool="64M", slot="4M", hosts=None, netns=None, prefix="n", extra=None):
        self.ctx = ctx
        self.count, self.factor, self.jump, self.placement = count, factor, jump, placement
        self.rpn = ranks_per_node
        self.psk = write_psk(os.path.join(ctx.tmp, "%s-psk" % prefix))
        if hosts is None:
            hosts = ["127.0.0.1"] * count
            ports = free_ports(count)
        else:
            ports = [17400] * count
        self.hosts, self.ports = hosts, ports
        self.peers = ",".join("%s:%d" % hp for hp in zip(hosts, ports))
        self.nodes = []
        for i in range(count):
            flags = self.flags(i) + list(extra or [])
            name = "%s%d" % (prefix, i)
            if netns:
                d = NsDaemon(ctx.tmp, netns[i], name=name, pool=pool, slot=slot, extra=flags)
            else:
                d = Daemon(ctx.tmp, name=name, pool=pool, slot=slot, extra=flags)
            d.node = i
            ctx.daemons.append(d)
            self.nodes.append(d)

    def flags(self, i, psk=None):
        f = cluster_flags(self.peers, self.count, i, self.factor, psk or self.psk,
                          jump=self.jump)
        if self.placement != "clique":
            f.append("--cluster-placement=" + self.placement)
        return f

    def start(self):
        for d in self.nodes:
            d.start(wait=False)
        for d in self.nodes:
            d.wait_ready(60)
        return self

    @property
    def world(self):
        return self.count * self.rpn

    def ranks_of(self, n):
        return list(range(n * self.rpn, (n + 1) * self.rpn))

    def node_of(self, r):
        return r // self.rpn

    def targets(self, n):
        return targets_of(n, self.count, self.jump, self.factor, self.placement)

    def wait_control_links(self, nodes=None, timeout=30):
        """Every node (or those given) but node 0 has authenticated its
        link to node 0, the coordinator of commits, at least `n` times:
        a save begun before that is not checked against the cluster's
        world_size (docs/commit.md).  nodes: {node: n}, default 1 each."""
        want = nodes or {d.node: 1 for d in self.nodes if d.node != 0}
        for n, times in want.items():
            d = self.nodes[n]
            wait_until(lambda: len(log_lines(d, r"peers: link to node 0 \(.*\) authenticated"))
                       >= times, timeout=timeout, interval=0.05,
                       what="node %d's link to node 0 (the coordinator)" % n)


def layout(r, big=0):
    """Shards of rank r: an empty one, a few KiB, and on every third rank
    a MiB or two; `big` adds a shard of that many bytes."""
    spec = [("empty", 0), ("opt.state", 4096 * (1 + r % 3) + 17 * r + 5)]
    if r % 3 == 0:
        spec.append(("model.weights", MiB * (1 + r % 2) + 4099 * r + 1))
    if big:
        spec.append(("big", big))
    return spec


def wait_replicated(d, job, step, timeout_s=REPL_TIMEOUT_S):
    t0 = time.monotonic()
    p = d.rank("wait", "--job", job, "--step", step, "--tier", "replicated",
               "--timeout", int(timeout_s * 1000), timeout=timeout_s + 60, check_rc=False)
    if p.returncode != 0:
        raise TestFailure("node %d: wait --tier replicated of step %d failed (%d): %s\n"
                          "--- its log ---\n%s" % (d.node, step, p.returncode,
                                                   p.stderr.strip(), d.read_log()[-4000:]))
    return time.monotonic() - t0


def wait_not_replicated(d, job, step, ms=1500):
    """wait --tier replicated must time out (ETIMEDOUT), not succeed or fail otherwise."""
    p = d.rank("wait", "--job", job, "--step", step, "--tier", "replicated",
               "--timeout", ms, check_rc=False)
    check(p.returncode == 1 and "ETIMEDOUT" in p.stderr,
          "node %d: wait --tier replicated of step %d should time out with ETIMEDOUT, "
          "got exit %d: %s%s" % (d.node, step, p.returncode, p.stdout, p.stderr.strip()))


def verify_rank(d, job, step, r, spec, seed=0):
    """A bit-exact read of rank r through daemon d; returns the failure text or None."""
    p = d.rank("verify", "--job", job, "--step", step, "--rank", r, "--shards",
               shards_arg(spec), "--seed", seed, check_rc=False)
    if p.returncode == 0:
        return None
    return "exit %d: %s%s" % (p.returncode, p.stdout, p.stderr.strip())


def must_verify(d, job, step, r, spec, seed=0, what=""):
    err = verify_rank(d, job, step, r, spec, seed)
    check(err is None, "verify of job %s step %d rank %d through node %d%s failed: %s\n"
          "--- its log ---\n%s" % (job, step, r, d.node, what, err, d.read_log()[-3000:]))


def replica_step_path(state_dir, src, job, step):
    return os.path.join(state_dir, "replica", "node-%d" % src, "jobs", job, "%020d" % step)


def rank_dirs(path):
    """({rank numbers of rank-N dirs}, [other dot/tmp entries]) in a step dir."""
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return set(), []
    ranks, odd = set(), []
    for n in names:
        m = re.fullmatch(r"rank-(\d+)", n)
        if m:
            ranks.add(int(m.group(1)))
        elif n.startswith(".") or "tmp" in n:
            odd.append(n)
    return ranks, odd


def ip(*args, check_rc=True):
    """Run ip(8) ARGS (network namespaces, veth, links up and down)."""
    p = subprocess.run(["ip"] + list(args), capture_output=True, text=True, timeout=30)
    if check_rc and p.returncode != 0:
        raise TestFailure("ip %s failed (%d): %s" % (" ".join(args), p.returncode, p.stderr))
    return p


def status_object(d, key):
    """The object `key` of d's `ckptctl --json status`."""
    doc = ctl_json(d, "status")
    obj = doc.get(key)
    check(isinstance(obj, dict), "node %d: --json status has no \"%s\" object: %r"
          % (d.node, key, doc))
    return obj


def repl_status(d):
    return status_object(d, "replication")


# --------------------------------------------------------------------------
# the copies of a rank on disk (test_heal.py, test_heal_remote.py)


def stop_clean(nodes):
    for d in nodes:
        check_log_clean(d)
        rc = d.stop()
        check(rc == 0, "node %d exited %s on SIGTERM:\n%s" % (d.node, rc, d.read_log()[-3000:]))
        check_log_clean(d)


def snapshot(rank_dir):
    """{file name: bytes} of a rank directory."""
    out = {}
    for n in sorted(os.listdir(rank_dir)):
        with open(os.path.join(rank_dir, n), "rb") as f:
            out[n] = f.read()
    return out


def same_as(rank_dir, want, what):
    got = snapshot(rank_dir)
    check(set(got) == set(want), "%s: files %s after the repair, expected %s"
          % (what, sorted(got), sorted(want)))
    for n in want:
        check(got[n] == want[n], "%s: %s differs from the original after the repair (%d bytes, "
              "expected %d)" % (what, n, len(got[n]), len(want[n])))
