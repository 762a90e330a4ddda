# SPDX-License-Identifier: MIT
"""torch.distributed.checkpoint through ckptd (ckptd.dcp) with real daemons
and real torch.distributed processes (gloo on loopback, one process per
rank, tests/integration/dcp_ranks.py):

1. resharding: dcp.async_save from 4 ranks, dcp.load on 2 and 3 ranks;
   a dcp.save (sync) loads too, and so does an async_save(no_dist=True)
   that ran beside the trainer's own all_reduces on the default group.  Every tensor (fp32, bf16, int64, bool,
   sharded on dim 0 or 1, a key no ckptd name allows) and every non-tensor
   item equals what was saved.
2. crash after staging: every rank is SIGKILLed right after async_save
   returns; the daemon commits the step on its own and it loads.
3. across nodes: two daemons (node_count 2, replication factor 2), ranks
   split over them; node 1 is killed and its state directory wiped between
   save and load; the load succeeds through the neighbour tier.
5. the object store (a real radosgw; skipped without Ceph): the only
   node's state directory is wiped after the flush; the load succeeds
   through the store.
4. bad input: an unknown job, a step never saved, a checkpoint_id that is
   not ckptd's, a corrupt dcp-data shard: a clear exception, never wrong
   tensors.

Skips (77) when torch is not importable.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
SOURCE = os.environ.get("CKPT_SOURCE_ROOT", ".")
sys.path.insert(0, os.path.join(SOURCE, "client", "python"))
from cluster import Cluster, wait_replicated  # noqa: E402
from objstore import start_store, wait_remote  # noqa: E402
from harness import (Daemon, SkipTest, TestFailure, check, free_ports, log,  # noqa: E402
                     run_cases, step_path, wait_until)

RANKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dcp_ranks.py")


def have_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed.checkpoint  # noqa: F401
    except ImportError as e:
        raise SkipTest("torch is not importable here (%s): install torch==2.13.0" % e)


def env_for(sock):
    e = dict(os.environ)
    e["CKPT_SOCKET"] = sock
    e["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(SOURCE, "client", "python")] +
        [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def ranks(mode, world, sockets, job, step=None, extra=(), expect_rc=0, timeout=240):
    """Run `world` rank processes of dcp_ranks.py; sockets[r] is rank r's
    daemon.  Returns their outputs; fails unless every one exits
    expect_rc (None: do not check)."""
    port = free_ports(1)[0]
    procs = []
    for r in range(world):
        args = [sys.executable, RANKS, mode, "--rank", str(r), "--world", str(world),
                "--port", str(port), "--job", job] + (["--step", str(step)] if step is not None
                                                       else []) + list(extra)
        procs.append(subprocess.Popen(args, env=env_for(sockets[r]), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    deadline = time.monotonic() + timeout
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise TestFailure("%s rank %d of %d did not finish in %d s" % (mode, r, world,
                                                                         timeout))
        outs.append(out)
        if expect_rc is not None and p.returncode != expect_rc:
            for q in procs:
                q.kill()
            raise TestFailure("%s rank %d of %d exited %s, expected %d:\n%s"
                              % (mode, r, world, p.returncode, expect_rc, out[-4000:]))
    return outs


def loads_ok(world, sockets, job, step=None, seed=None):
    outs = ranks("load", world, sockets, job, step,
                 extra=["--seed", str(seed if seed is not None else step)])
    for r, out in enumerate(outs):
        check("loaded ok" in out, "load rank %d of %d: %s" % (r, world, out[-2000:]))


def committed(d, job, step):
    p = d.ctl("--json", "latest", job, check_rc=False)
    return p.returncode == 0 and json.loads(p.stdout).get("step") == step


def case_reshard(ctx):
    have_torch()
    d = Daemon(ctx.tmp, pool="256M", slot="4M").start()
    ctx.daemons.append(d)
    ranks("save", 4, [d.socket] * 4, "rs", 100)
    check(committed(d, "rs", 100), "step 100 is not committed after async_save's future")
    # (a load on as many ranks as saved is in every other case)
    for world in (2, 3):
        loads_ok(world, [d.socket] * world, "rs", 100)
        log("   saved by 4 ranks, loaded on %d: every tensor equal" % world)
    ranks("save", 2, [d.socket] * 2, "rs", 200, extra=["--sync"])
    loads_ok(2, [d.socket] * 2, "rs", seed=200)  # no checkpoint_id: the newest, 200
    log("   dcp.save (sync) from 2 ranks, loaded as the newest step")
    ranks("save", 2, [d.socket] * 2, "rs", 300, extra=["--no-dist"])
    check(committed(d, "rs", 300), "step 300 (no_dist) is not committed after its future")
    loads_ok(2, [d.socket] * 2, "rs", 300)
    log("   async_save(no_dist=True) beside the trainer's own all_reduces: committed, loads")


def case_crash_after_stage(ctx):
    have_torch()
    d = Daemon(ctx.tmp, pool="256M", slot="4M").start()
    ctx.daemons.append(d)
    outs = ranks("save", 2, [d.socket] * 2, "crash", 7, extra=["--kill-after-stage"],
                 expect_rc=-signal.SIGKILL)
    for r, out in enumerate(outs):
        check("staged" in out and "saved" not in out.split("staged", 1)[1],
              "rank %d: expected to die right after staging: %s" % (r, out[-2000:]))
    wait_until(lambda: committed(d, "crash", 7), timeout=30,
               what="step 7 to be committed with every rank SIGKILLed after staging")
    loads_ok(2, [d.socket] * 2, "crash", 7)
    log("   every rank SIGKILLed after async_save returned: step 7 committed and loads")
    # one writer across a daemon restart: its kept connection is gone, the
    # next save opens a new one
    code = ("import sys, torch, torch.distributed.checkpoint as dcp\n"
            "from ckptd.dcp import CkptdWriter\n"
            "w = CkptdWriter(job='again')\n"
            "for step in (1, 2):\n"
            "    sd = {'t': torch.full((1000,), float(step))}\n"
            "    dcp.async_save(sd, storage_writer=w, checkpoint_id='ckptd://again/%d' % step,\n"
            "                   no_dist=True).result()\n"
            "    print('saved', step, flush=True)\n"
            "    sys.stdin.readline()\n")
    p = subprocess.Popen([sys.executable, "-c", code], env=env_for(d.socket), text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen = []
    for line in p.stdout:  # warnings may come first
        seen.append(line)
        if line.strip() == "saved 1":
            break
    check(seen and seen[-1].strip() == "saved 1",
          "the first save of the writer failed:\n%s" % "".join(seen)[-3000:])
    check(d.stop() == 0, "ckptd did not stop cleanly")
    d.start()
    p.stdin.write("\n")
    p.stdin.flush()
    out, _ = p.communicate(input="\n", timeout=120)
    check(p.returncode == 0 and "saved 2" in out,
          "the writer's save after a daemon restart: rc %s\n%s" % (p.returncode, out[-3000:]))
    check(committed(d, "again", 2), "step 2 of the restarted daemon is not committed")
    log("   one CkptdWriter across a daemon restart: its next save reconnects")


def case_across_nodes(ctx):
    have_torch()
    cl = Cluster(ctx, 2, 2, ranks_per_node=2, pool="256M", slot="4M", prefix="x").start()
    cl.wait_control_links()
    socks = [cl.nodes[cl.node_of(r)].socket for r in range(cl.world)]
    ranks("save", cl.world, socks, "xn", 30)
    for d in cl.nodes:
        check(committed(d, "xn", 30), "node %d: step 30 is not committed" % d.node)
        wait_replicated(d, "xn", 30)
    lost = cl.nodes[1]
    lost.kill(signal.SIGKILL)
    shutil.rmtree(lost.state_dir)
    repl = Daemon(ctx.tmp, name="x1-new", pool="256M", slot="4M", extra=cl.flags(1))
    repl.node = 1
    ctx.daemons.append(repl)
    cl.nodes[1] = repl
    repl.start(timeout=60)
    log("   node 1 killed, its state directory wiped, a replacement started")
    socks = [cl.nodes[cl.node_of(r)].socket for r in range(cl.world)]
    loads_ok(cl.world, socks, "xn", 30)
    loads_ok(2, [cl.nodes[1].socket] * 2, "xn", 30)
    log("   the checkpoint loads on 4 ranks over both nodes and on 2 ranks of node 1")


def case_object_store(ctx):
    have_torch()
    sc = start_store(ctx)
    ctx.cleanups.append(sc.cleanup)
    sc.store.s3.create_bucket("dcp")
    d = sc.daemon("s0", "dcp", pool="256M", slot="4M").start()
    ranks("save", 2, [d.socket] * 2, "st", 50)
    wait_remote(d, "st", 50)
    d.kill(signal.SIGKILL)
    shutil.rmtree(d.state_dir)
    fresh = sc.daemon("s0-new", "dcp", pool="256M", slot="4M").start()
    ctx.daemons.append(fresh)
    log("   the node's state directory wiped, a fresh daemon on the same bucket")
    loads_ok(2, [fresh.socket] * 2, "st", 50)
    log("   the checkpoint loads through the object store")


def load_error(sock, job, checkpoint_id):
    """Load in one process without a process group; the exception text."""
    code = (
        "import sys, torch, torch.distributed.checkpoint as dcp\n"
        "from ckptd.dcp import CkptdReader\n"
        "sd = {'model': {'emb': torch.zeros(96, 16)}}\n"
        "try:\n"
        "    dcp.load(sd, storage_reader=CkptdReader(job=%r), checkpoint_id=%r, no_dist=True)\n"
        "except BaseException as e:  # DCP's CheckpointException is one\n"
        "    print('RAISED %%s: %%s' %% (type(e).__name__, e)); sys.exit(3)\n"
        "print('LOADED', sd['model']['emb'].sum().item())\n" % (job, checkpoint_id))
    p = subprocess.run([sys.executable, "-c", code], env=env_for(sock), capture_output=True,
                       text=True, timeout=120)
    check(p.returncode == 3, "load of %r %r: expected an exception, got rc %d:\n%s%s"
          % (job, checkpoint_id, p.returncode, p.stdout[-2000:], p.stderr[-2000:]))
    return p.stdout


def case_bad_input(ctx):
    have_torch()
    # the corrupt shard is on disk: the memory tier would serve its saved bytes
    d = Daemon(ctx.tmp, pool="256M", slot="4M", extra=["--pool-memory-tier=no"]).start()
    ctx.daemons.append(d)
    ranks("save", 2, [d.socket] * 2, "bad", 5)
    out = load_error(d.socket, "nojob", "ckptd://nojob/5")
    check("job 'nojob'" in out and "step 5" in out, "unknown job: %s" % out)
    out = load_error(d.socket, "bad", "ckptd://bad/6")
    check("step 6" in out and "job 'bad'" in out, "a step never saved: %s" % out)
    out = load_error(d.socket, "bad", "/checkpoints/llama/latest")
    check("RAISED ValueError" in out and "is not ckptd's" in out, "foreign id: %s" % out)
    out = load_error(d.socket, "bad", "ckptd://other/5")
    check("RAISED ValueError" in out and "names job 'other'" in out, "another job: %s" % out)
    # flip one byte of rank 1's dcp-data on disk: the load must fail, not
    # hand back a tensor with one wrong element
    data = os.path.join(step_path(d.state_dir, "bad", 5), "rank-1", "dcp-data")
    with open(data, "r+b") as f:
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 0x40]))
    outs = ranks("load", 2, [d.socket] * 2, "bad", 5, expect_rc=None)
    joined = "\n".join(outs)
    check("loaded ok" not in joined and "differs" not in joined,
          "a load of a corrupt shard returned tensors:\n%s" % joined[-3000:])
    check("CRC32C" in joined or "CorruptError" in joined,
          "a load of a corrupt shard does not say the data is corrupt:\n%s" % joined[-3000:])
    log("   unknown job, unknown step, foreign and mismatched ids, a flipped byte: each "
        "raises, no tensor returned")


CASES = [
    (1, "resharding: 4 ranks save, 2 and 3 load; sync and no_dist saves", case_reshard),
    (2, "every rank SIGKILLed right after async_save: committed and loads",
     case_crash_after_stage),
    (3, "two nodes, node 1 wiped between save and load: loads through the neighbour",
     case_across_nodes),
    (4, "bad input: unknown job or step, foreign id, corrupt shard", case_bad_input),
    (5, "object store: the node's state wiped after the flush; loads from radosgw",
     case_object_store),
]


def main():
    if os.environ.get("CKPT_SANITIZE", "none") != "none":
        log("SKIP: a sanitizer-instrumented libckpt.so cannot be loaded into python")
        return 77
    return run_cases(CASES, "CKPT_DCP_CASES", "ckptd-dcp-")


if __name__ == "__main__":
    sys.exit(main())
