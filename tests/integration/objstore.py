# SPDX-License-Identifier: MIT
"""The object store of the tests that need one (test_remote.py,
test_fallback.py, test_s3_client.py): a real radosgw started with
tests/s3/radosgw.sh, the independent stdlib client tests/s3/s3check.py on
it, and ckptd daemons with the object-store tier on pointed at it
(directly or through the fault-injecting proxy tests/s3/faultproxy.py).

A shared helper module, not a test: test modules import it (and harness.py),
never one another (STYLE.md "Python", tests/lint/test-imports.py).
"""
import os
import shutil
import subprocess
import sys
import time

from harness import SKIP, Daemon, SkipTest, check, free_ports, log, write_psk

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.environ.get("CKPT_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
S3DIR = os.path.join(SOURCE_ROOT, "tests", "s3")
RADOSGW_SH = os.path.join(S3DIR, "radosgw.sh")
sys.path.insert(0, S3DIR)
import s3check  # noqa: E402
from faultproxy import Proxy  # noqa: E402

WAIT_REMOTE_S = 240
CEPH_BINARIES = ("radosgw", "ceph-mon", "ceph-osd", "radosgw-admin")


def ceph_missing():
    """The Ceph binaries radosgw.sh start needs that are not installed."""
    return [b for b in CEPH_BINARIES if shutil.which(b) is None]


def radosgw_env(stdout):
    """{endpoint, access_key, secret_key, region, ...}: the KEY=VALUE words
    radosgw.sh start prints."""
    return dict(line.split("=", 1) for line in stdout.split() if "=" in line)


class Store:
    """The radosgw of this run, and an s3check client on it (direct, no
    proxy) for inspecting buckets."""

    def __init__(self, env):
        self.endpoint = env["endpoint"]
        self.port = int(self.endpoint.rsplit(":", 1)[1])
        self.access_key = env["access_key"]
        self.secret_key = env["secret_key"]
        self.region = env["region"]
        self.s3 = s3check.S3Client(self.endpoint, self.access_key, self.secret_key,
                                   self.region)

    def objects(self, bucket, prefix=""):
        """{key: size} under prefix."""
        return {k: size for k, size, _ in self.s3.list_objects(bucket, prefix=prefix)}

    def exists(self, bucket, key):
        return self.s3.request("HEAD", bucket, key).status == 200


def loopback_cluster(tmp, count):
    """(peers, psk file) of a cluster of count nodes on the loopback, for
    StoreCtx.daemon(node=(i, count), cluster=...)."""
    peers = ",".join("127.0.0.1:%d" % p for p in free_ports(count))
    return peers, write_psk(os.path.join(tmp, "cluster-psk-%d" % count))


class StoreCtx:
    """What one case with the store started: its daemons (killed by
    cleanup()) and fault-injecting proxies (stopped by it)."""

    def __init__(self, tmp, store):
        self.tmp = tmp
        self.store = store
        self.daemons = []
        self.proxies = []

    def proxy(self, policy=None):
        p = Proxy(self.store.port, policy=policy).start()
        self.proxies.append(p)
        return p

    def daemon(self, name, bucket, endpoint=None, flags=(), conf=None, creds="env",
               secret=None, state_dir=None, pool="256M", slot="16M", node=None, cluster=None):
        """A ckptd with the object-store tier on.  conf: a config file
        (then endpoint/bucket come from it); creds 'env' puts the keys in
        the daemon's environment, None leaves them out.  node: (index,
        count); with count > 1, cluster = (peers, psk file) of the nodes
        (Cluster.peers, write_psk()): the nodes agree on commits over the
        peer protocol, replication factor 1 (no neighbour copies)."""
        extra = []
        if conf:
            extra += ["--config", conf]
        else:
            extra += ["--remote-endpoint=" + (endpoint or self.store.endpoint),
                      "--remote-bucket=" + bucket, "--remote-region=" + self.store.region,
                      "--remote-addressing=path"]
        if node is not None:
            extra += ["--cluster-node-index=%d" % node[0], "--cluster-node-count=%d" % node[1]]
        if cluster is not None:
            extra += ["--cluster-peers=" + cluster[0], "--cluster-psk-file=" + cluster[1],
                      "--cluster-replication-factor=1"]
        extra += list(flags)
        d = Daemon(self.tmp, name=name, state_dir=state_dir, pool=pool, slot=slot, extra=extra)
        # nothing of the caller's AWS setup may leak in; HOME has no ~/.aws
        d.env = {k: v for k, v in d.env.items()
                 if not k.startswith("AWS_") and not k.startswith("SLURM_")}
        d.env["HOME"] = self.tmp
        if creds == "env":
            d.env["AWS_ACCESS_KEY_ID"] = self.store.access_key
            d.env["AWS_SECRET_ACCESS_KEY"] = secret or self.store.secret_key
        self.daemons.append(d)
        return d

    def cleanup(self):
        for d in self.daemons:
            if d.alive():
                d.kill()
        for p in self.proxies:
            p.stop()
        self.daemons, self.proxies = [], []


def step_prefix(prefix, job, step):
    """The key prefix of a step in the bucket (docs/object-layout.md)."""
    return ("%s/" % prefix if prefix else "") + "jobs/%s/steps/%020d/" % (job, step)


def wait_remote(d, job, step, timeout_s=WAIT_REMOTE_S):
    """Wait until daemon d says the step reached tier remote."""
    t0 = time.monotonic()
    d.rank("wait", "--job", job, "--step", step, "--tier", "remote",
           "--timeout", int(timeout_s * 1000), timeout=timeout_s + 60)
    log("  step %d reached tier remote after %.1f s" % (step, time.monotonic() - t0))


def start_store(ctx):
    """A radosgw for this case (stopped by ctx.cleanup()) and a StoreCtx on
    it; SkipTest without Ceph."""
    missing = ceph_missing()
    if missing:
        raise SkipTest("%s not installed (tests/s3/radosgw.sh install)" % ", ".join(missing))
    rgw_dir = os.path.join(ctx.tmp, "rgw")
    for attempt in (1, 2):
        r = subprocess.run([RADOSGW_SH, "start", rgw_dir], stdout=subprocess.PIPE,
                           text=True, timeout=300)
        ctx.cleanups.append(lambda: subprocess.run([RADOSGW_SH, "stop", rgw_dir]))
        if r.returncode == SKIP:
            raise SkipTest("radosgw.sh start: Ceph not installed")
        if r.returncode == 0:
            break
        # the bootstrap sometimes loses a mon command on a loaded machine
        log("   radosgw.sh start exited %d (attempt %d)" % (r.returncode, attempt))
    check(r.returncode == 0, "radosgw.sh start exited %d" % r.returncode)
    return StoreCtx(ctx.tmp, Store(radosgw_env(r.stdout)))
