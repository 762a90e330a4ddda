# SPDX-License-Identifier: MIT
"""dcp.py — what torch.distributed.checkpoint (torch 2.13) costs a trainer
through ckptd (ckptd.dcp.CkptdWriter / CkptdReader) next to DCP's own
FileSystemWriter with its best staging options, a memcpy of the same bytes,
dcp.save, torch.save + fsync and the other checkpoint libraries (issue 11,
"Benchmark").  bench/dcp.sh runs it against a real daemon; run it by hand as

    python3 bench/dcp.py --socket S --dir D [--runs N] [--size-mb M] ...

Every measurement runs in a fresh pair (--ranks) of trainer processes
(gloo over a TCP store on loopback) so that no staging cache, mapping or
allocator state of one method leaks into another's numbers; the methods of
one run are run one after the other and the runs repeat that sequence
(interleaved), and the table shows medians.

Each rank holds the same layout: --tensors DTensors sharded on dim 0 (fp32
and bf16, large and small; a few small ones replicated, which DCP writes
once), --size-mb MiB of local shards per rank.  A rank's blocking time is
from the call (after a barrier) until the trainer may change the state again;
a run's number is the slowest rank's.  Every method first saves once
untimed (slots mapped, staging buffers cached, background process spawned),
then the timed save.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import traceback

MiB = 1 << 20

# methods, in the order a run measures them
METHODS = [
    "memcpy",           # copy into preallocated, touched buffers; and into fresh memory
    "ckptd_async",      # dcp.async_save(CkptdWriter) + load through CkptdReader
    "fs_async_best",    # dcp.async_save(FileSystemWriter, DefaultStager shm + async, PROCESS) + load
    "fs_async_plain",   # dcp.async_save(FileSystemWriter) with DCP's defaults (thread)
    "ckptd_sync",       # dcp.save(CkptdWriter)
    "fs_sync",          # dcp.save(FileSystemWriter)
    "torch_save",       # torch.save of the rank's local tensors + fsync
    "ckptd_small",      # 5,000 small tensors through CkptdWriter (async_save)
    "fs_small",         # the same through FileSystemWriter, best options
    "torchsnapshot",    # torchsnapshot 0.1.0 Snapshot.async_take
    "flashpoint",       # ml-flashpoint 0.0.10 MemoryStorageWriter (DCP adapter)
    "nvrx",             # nvidia-resiliency-ext 0.7.0 async checkpoint
]


# ---- the state ---------------------------------------------------------------------------
def layout(size_bytes, tensors, seed=11):
    """[(name, dtype name, rows, cols, replicated)] of about size_bytes per rank.

    Shaped like a model plus its Adam state: ~70% of the tensors are large
    (1-16 MiB, fp32 and bf16), the rest small (biases and norms of 1-64 KiB,
    a tenth of those replicated).  Deterministic for a seed."""
    import random
    rnd = random.Random(seed)
    n_small = max(1, tensors * 3 // 10)
    n_large = max(1, tensors - n_small)
    small = []
    for i in range(n_small):
        cols = rnd.choice([256, 1024, 4096, 16384])
        dtype = "float32" if i % 3 else "bfloat16"
        small.append(("layers.%d.norm_%d.weight" % (i // 2, i % 2), dtype, 1, cols, i % 10 == 0))
    small_bytes = sum(c * (4 if d == "float32" else 2) for _, d, _, c, _ in small)
    budget = max(size_bytes - small_bytes, n_large * 4096)
    weights = [rnd.uniform(1.0, 16.0) for _ in range(n_large)]
    total_w = sum(weights)
    large = []
    for i, w in enumerate(weights):
        dtype = "bfloat16" if i % 4 == 3 else "float32"
        esize = 4 if dtype == "float32" else 2
        nbytes = int(budget * w / total_w)
        cols = 1024
        rows = max(1, nbytes // (esize * cols))
        kind = ("attention.wq", "attention.wk", "feed_forward.w1", "feed_forward.w2")[i % 4]
        group = ("model", "optim.exp_avg", "optim.exp_avg_sq")[i % 3]
        large.append(("%s.layers.%d.%s.weight" % (group, i // 4, kind), dtype, rows, cols, False))
    return large + small


def small_layout(count):
    """count small fp32 tensors of 256-4096 elements (an optimizer state's many pieces)."""
    import random
    rnd = random.Random(5)
    return [("optim.state.%d.%s" % (i // 2, ("exp_avg", "exp_avg_sq")[i % 2]), "float32", 1,
             rnd.choice([256, 512, 1024, 4096]), False) for i in range(count)]


def build_state(lay, rank, world, mesh):
    """{name: DTensor} of the layout, this rank's shards filled from a seed."""
    import zlib
    import torch
    from torch.distributed.tensor import DTensor, Replicate, Shard
    g = torch.Generator().manual_seed(1000 + rank)
    sd = {}
    for name, dtype, rows, cols, replicated in lay:
        if replicated:
            # the same values on every rank (DCP writes a replicated tensor once)
            g_rep = torch.Generator().manual_seed(zlib.crc32(name.encode()))
            local = torch.rand(rows, cols, generator=g_rep, dtype=torch.float32)
        else:
            local = torch.rand(rows, cols, generator=g, dtype=torch.float32)
        local = local.to(getattr(torch, dtype))
        sd[name] = DTensor.from_local(local, mesh, [Replicate() if replicated else Shard(0)],
                                      run_check=False)
    return sd


def local_tensors(sd):
    return {k: v.to_local() for k, v in sd.items()}


def local_bytes(sd):
    return sum(t.numel() * t.element_size() for t in local_tensors(sd).values())


# ---- memory sampling ---------------------------------------------------------------------
class RssSampler(threading.Thread):
    """Samples /proc/self/status (RssAnon, RssShmem, in KiB) every ~1 ms, and
    the size of ckptd's slot mappings (memfd:ckptd-slot in /proc/self/maps)
    whenever RssShmem moved: the daemon's pool, mapped into the trainer with
    MAP_POPULATE (libckpt), counts in the trainer's RssShmem in full while a
    connection has it mapped, though it is the daemon's memory, there before
    the save and after it."""

    def __init__(self, interval=0.001):
        super().__init__(daemon=True)
        self.interval = interval
        self.samples = []  # (monotonic, anon_kb, shmem_kb, pool_kb)
        self.stop_flag = threading.Event()

    @staticmethod
    def read():
        anon = shmem = 0
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    anon = int(line.split()[1])
                elif line.startswith("RssShmem:"):
                    shmem = int(line.split()[1])
        return anon, shmem

    @staticmethod
    def pool_kb():
        total = 0
        with open("/proc/self/maps") as f:
            for line in f:
                if "ckptd-slot" in line:
                    lo, hi = line.split(" ", 1)[0].split("-")
                    total += (int(hi, 16) - int(lo, 16)) >> 10
        return total

    def run(self):
        last_shmem, pool = -1, 0
        while not self.stop_flag.is_set():
            a, s = self.read()
            if abs(s - last_shmem) >= 1024:
                pool, last_shmem = self.pool_kb(), s
            self.samples.append((time.monotonic(), a, s, pool))
            time.sleep(self.interval)

    def peak(self, t0, t1, lag=0.25):
        """Over [t0, t1], in KiB: the peak of the trainer's own memory
        (anon + shmem - ckptd's pool mapping) with anon, shmem and pool at
        that moment, and the peak pool mapping.  An munmap takes the mapping
        out of /proc/self/maps before RssShmem has dropped (a 64 MiB slot
        takes a few ms, 17 of them tens of ms on a loaded machine), so a
        sample's pool is the largest seen in the
        `lag` seconds before it."""
        best, pool_peak = (0, 0, 0, 0), 0
        recent = []  # (t, pool) of the last `lag` seconds
        for t, a, s, p in self.samples:
            recent = [(u, q) for u, q in recent if u >= t - lag] + [(t, p)]
            if t0 <= t <= t1:
                pool = max(q for _, q in recent)
                pool_peak = max(pool_peak, p)
                own = a + max(s - pool, 0)
                if own > best[0]:
                    best = (own, a, s, pool)
        return best, pool_peak


def drop_caches():
    """Drop the page cache (root only); returns None or why not."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return None
    except OSError as e:
        return "cannot drop the page cache (%s): loads are warm" % e


# ---- one measurement in one rank -----------------------------------------------------------
class Ctx:
    def __init__(self, args, rank, world):
        self.args = args
        self.rank = rank
        self.world = world
        self.out = {}


def barrier():
    import torch.distributed as dist
    dist.barrier()


def wait_result(res):
    """The upload future of whatever async_save returned (Future or AsyncSaveResponse);
    waits for the staging part of an AsyncSaveResponse first.  Returns (staged time,
    upload future)."""
    staging = getattr(res, "staging_completion", None)
    if staging is not None:
        staging.result()
        return time.perf_counter(), res.upload_completion
    return time.perf_counter(), res


def _ckptd_path():
    """The tree's client/python when ckptd is not installed."""
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client", "python")
    if os.path.isdir(here) and here not in sys.path:
        sys.path.append(here)


def ckptd_writer(args, job):
    """The one place ckptd's writer is made (so plugging in ckptd.dcp is one line)."""
    _ckptd_path()
    from ckptd.dcp import CkptdWriter
    return CkptdWriter(job=job, socket_path=args.socket)


def ckptd_reader(args, job):
    _ckptd_path()
    from ckptd.dcp import CkptdReader
    return CkptdReader(job=job, socket_path=args.socket)


def ckptd_wait_local(args, job, step):
    _ckptd_path()
    import ckptd
    with ckptd.Client(args.socket) as c:
        c.wait(job, step, ckptd.LOCAL, 600000)


def fs_best_stager():
    """DCP's best staging on a CPU machine: shared memory + async staging
    (pinned memory and non-blocking copies need an accelerator: DefaultStager
    refuses non-blocking copies without one, StateDictStager drops pinning)."""
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    return DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=True,
                                        use_async_staging=True, use_non_blocking_copy=False))


def timed_saves(ctx, sd, save_once, sampler, nbytes):
    """Warm-up save then the timed save; save_once(step) returns (t_returned,
    t_unblocked, durable_fn).  Each run has steps of its own (ckptd refuses to
    save a committed step again): 10 * run + 1 and + 2."""
    out = ctx.out
    first = 10 * ctx.args.run + 1
    for step in (first, first + 1):
        barrier()
        if step == first + 1:
            base_anon, base_shmem = RssSampler.read()
        t0 = time.perf_counter()
        m0 = time.monotonic()
        t_ret, t_unblocked, durable = save_once(step)
        durable()
        t_dur = time.perf_counter()
        m1 = time.monotonic()
        if step == first + 1:
            out["return_s"] = t_ret - t0
            out["blocking_s"] = t_unblocked - t0
            out["durable_s"] = t_dur - t0
            if sampler is not None:
                (own, anon, shmem, pool), pool_peak = sampler.peak(m0, m1)
                # extra over the process before it ever saved (a staging cache
                # kept from the warm-up save counts), at the peak of the
                # trainer's own memory; ckptd's pool mapping is shown apart
                out["extra_own_kb"] = own - sum(ctx.rss_before_first)
                out["extra_anon_kb"] = anon - ctx.rss_before_first[0]
                out["extra_shmem_kb"] = shmem - pool - ctx.rss_before_first[1]
                out["rss_pool_kb"] = pool_peak
                out["extra_during_kb"] = own - base_anon - base_shmem
            out["bytes"] = nbytes


def m_memcpy(ctx, sd):
    import torch
    src = list(local_tensors(sd).values())
    nbytes = sum(t.numel() * t.element_size() for t in src)
    barrier()
    t0 = time.perf_counter()
    fresh = [t.clone() for t in src]
    ctx.out["memcpy_fresh_s"] = time.perf_counter() - t0
    del fresh
    dst = [torch.empty_like(t) for t in src]
    for d in dst:
        d.zero_()
    for rep in range(2):
        barrier()
        t0 = time.perf_counter()
        for d, s in zip(dst, src):
            d.copy_(s)
        ctx.out["memcpy_s"] = time.perf_counter() - t0
    ctx.out["bytes"] = nbytes


def _load_and_check(ctx, sd, reader_fn, checkpoint_id, prefix):
    """Page cache dropped, dcp.load into zeroed DTensors of the same layout, timed;
    then every tensor compared with the saved one (untimed)."""
    import torch
    import torch.distributed.checkpoint as dcp
    dest = {k: v.detach().clone() for k, v in sd.items()}
    for v in dest.values():
        v.to_local().zero_()
    barrier()
    if ctx.rank == 0:
        why = drop_caches()
        ctx.out["cache_note"] = why or "dropped"
    barrier()
    t0 = time.perf_counter()
    dcp.load(dest, storage_reader=reader_fn(), checkpoint_id=checkpoint_id)
    ctx.out[prefix + "load_s"] = time.perf_counter() - t0
    bad = [k for k in sd if not torch.equal(dest[k].to_local(), sd[k].to_local())]
    if bad:
        ctx.out[prefix + "load_error"] = ("%d tensors loaded differ from the saved ones, first %s"
                                          % (len(bad), bad[0]))
        del ctx.out[prefix + "load_s"]


def _async_method(ctx, sd, writer_fn, kind, stager=None, proc=False, load_reader=None,
                  sampler=None, job=None):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    args = ctx.args

    def cid(step):
        return ("ckptd://%s/%d" % (job, step)) if kind == "ckptd" else \
            os.path.join(args.dir, "dcp-%s" % job, "step-%d" % step)

    def save_once(step):
        kw = {}
        if stager is not None:
            kw["async_stager"] = stager
        if proc:
            kw["async_checkpointer_type"] = AsyncCheckpointerType.PROCESS
        res = dcp.async_save(sd, storage_writer=writer_fn(cid(step)), checkpoint_id=cid(step), **kw)
        t_ret = time.perf_counter()
        t_unblocked, fut = wait_result(res)

        def durable():
            fut.result()
            if kind == "ckptd":
                ckptd_wait_local(args, job, step)
        return t_ret, t_unblocked, durable

    timed_saves(ctx, sd, save_once, sampler, local_bytes(sd))
    if load_reader is not None:
        try:
            last = cid(10 * args.run + 2)
            _load_and_check(ctx, sd, lambda: load_reader(last), last, "")
        except Exception as e:  # noqa: BLE001 -- the save's numbers stand; the load's error is shown
            traceback.print_exc()
            ctx.out["load_error"] = "%s: %s" % (type(e).__name__, e)


def _sync_method(ctx, sd, writer_fn, kind, job):
    import torch.distributed.checkpoint as dcp
    args = ctx.args

    def save_once(step):
        c = ("ckptd://%s/%d" % (job, step)) if kind == "ckptd" else \
            os.path.join(args.dir, "dcp-%s" % job, "step-%d" % step)
        dcp.save(sd, storage_writer=writer_fn(c), checkpoint_id=c)
        t = time.perf_counter()
        return t, t, lambda: ckptd_wait_local(args, job, step) if kind == "ckptd" else None
    timed_saves(ctx, sd, save_once, None, local_bytes(sd))


def run_method(ctx, method, sampler):
    """Build the state and measure method in this rank; fills ctx.out."""
    import torch
    import torch.distributed as dist
    from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
    from torch.distributed.device_mesh import init_device_mesh
    args = ctx.args
    mesh = init_device_mesh("cpu", (ctx.world,))
    if method in ("ckptd_small", "fs_small"):
        lay = small_layout(args.small_tensors)
    else:
        lay = layout(args.size_mb * MiB, args.tensors)
    sd = build_state(lay, ctx.rank, ctx.world, mesh)
    ctx.out["tensors"] = len(sd)
    ctx.rss_before_first = RssSampler.read()
    job = "%s-%s" % (args.job, method)

    def fs_writer(path):
        return FileSystemWriter(path, sync_files=True)

    writers = []

    def ck_writer(_cid):
        # one CkptdWriter per trainer process, as ckptd.dcp suggests
        if not writers:
            writers.append(ckptd_writer(args, job))
        return writers[0]

    if method == "memcpy":
        m_memcpy(ctx, sd)
    elif method == "ckptd_async":
        _async_method(ctx, sd, ck_writer, "ckptd", load_reader=lambda _c: ckptd_reader(args, job),
                      sampler=sampler, job=job)
    elif method == "fs_async_best":
        stager = fs_best_stager()
        try:
            _async_method(ctx, sd, fs_writer, "fs", stager=stager, proc=True,
                          load_reader=FileSystemReader, sampler=sampler, job=job)
        finally:
            stager.close()
    elif method == "fs_async_plain":
        _async_method(ctx, sd, fs_writer, "fs", sampler=sampler, job=job)
    elif method == "ckptd_sync":
        _sync_method(ctx, sd, ck_writer, "ckptd", job)
    elif method == "fs_sync":
        _sync_method(ctx, sd, fs_writer, "fs", job)
    elif method == "torch_save":
        m_torch_save(ctx, sd, sampler)
    elif method == "ckptd_small":
        _async_method(ctx, sd, ck_writer, "ckptd", sampler=sampler, job=job)
    elif method == "fs_small":
        stager = fs_best_stager()
        try:
            _async_method(ctx, sd, fs_writer, "fs", stager=stager, proc=True, sampler=sampler, job=job)
        finally:
            stager.close()
    elif method == "torchsnapshot":
        m_torchsnapshot(ctx, sd, sampler)
    elif method == "flashpoint":
        m_flashpoint(ctx, sd, sampler)
    elif method == "nvrx":
        m_nvrx(ctx, sd, sampler)
    else:
        raise ValueError("unknown method %s" % method)
    dist.barrier()


def m_torch_save(ctx, sd, sampler):
    import torch
    loc = local_tensors(sd)
    d = os.path.join(ctx.args.dir, "torch-save")
    os.makedirs(d, exist_ok=True)

    def save_once(step):
        path = os.path.join(d, "step-%d-rank-%d.pt" % (step, ctx.rank))
        with open(path, "wb") as f:
            torch.save(loc, f)
            f.flush()
            os.fsync(f.fileno())
        t = time.perf_counter()
        return t, t, lambda: None
    timed_saves(ctx, sd, save_once, sampler, local_bytes(sd))


def import_other(module, spec):
    """Imports another library's module; when it is missing, the error says why
    bench/dcp.sh could not install it ($DCP_BENCH_INSTALL_NOTES)."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError as e:
        why = ""
        notes = os.environ.get("DCP_BENCH_INSTALL_NOTES")
        if notes and os.path.exists(notes):
            for line in open(notes):
                if line.startswith(spec + ":"):
                    why = line.strip()
        raise RuntimeError("%s (%s)" % (why, e) if why else str(e)) from e


def m_torchsnapshot(ctx, sd, sampler):
    """torchsnapshot 0.1.0: Snapshot.async_take of the rank's local tensors (it
    predates DTensor); blocking until async_take returns, durable at wait()."""
    torchsnapshot = import_other("torchsnapshot", "torchsnapshot==0.1.0")
    loc = local_tensors(sd)
    app_state = {"state": torchsnapshot.StateDict(**loc)}
    d = os.path.join(ctx.args.dir, "torchsnapshot")

    def save_once(step):
        pending = torchsnapshot.Snapshot.async_take(path=os.path.join(d, "step-%d" % step),
                                                    app_state=app_state)
        t = time.perf_counter()
        return t, t, pending.wait
    timed_saves(ctx, sd, save_once, sampler, local_bytes(sd))


def m_flashpoint(ctx, sd, sampler):
    """ml-flashpoint 0.0.10's DCP adapter (MemoryStorageWriter), when it imports."""
    import_other("ml_flashpoint.adapter.pytorch.memory_storage_writer", "ml-flashpoint==0.0.10")
    raise RuntimeError("ml-flashpoint imported, but its DCP adapter needs a replication "
                       "manager and a /tmp-backed object store set up per node; not wired here")


def m_nvrx(ctx, sd, sampler):
    """nvidia-resiliency-ext 0.7.0's async checkpointing, when it imports."""
    import_other("nvidia_resiliency_ext.checkpointing.async_ckpt.core", "nvidia-resiliency-ext==0.7.0")
    raise RuntimeError("nvidia-resiliency-ext imported but is not wired into this bench")


def worker_main(args):
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(args.port)
    rank, world = args.rank, args.ranks
    import torch
    torch.set_num_threads(1)
    sampler = RssSampler()
    sampler.start()
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method="tcp://127.0.0.1:%d" % args.port)
    ctx = Ctx(args, rank, world)
    ok = True
    try:
        run_method(ctx, args.worker, sampler)
    except BaseException as e:  # noqa: BLE001 -- reported to the parent, which prints it
        ok = False
        ctx.out["error"] = "%s: %s" % (type(e).__name__, e)
        traceback.print_exc()
    sampler.stop_flag.set()
    print("RESULT " + json.dumps(ctx.out), flush=True)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass
    # a failed method may leave a background process or thread; do not hang on it
    os._exit(0 if ok else 3)


# ---- the parent ----------------------------------------------------------------------------
def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def run_pair(args, method, run, logf):
    """Runs method in args.ranks fresh processes; returns [per-rank dict]."""
    port = free_port()
    procs = []
    for r in range(args.ranks):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", method, "--rank", str(r),
               "--port", str(port), "--run", str(run)] + args.passthrough
        env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), PYTHONWARNINGS="ignore")
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, env=env))
    outs = []
    for r, p in enumerate(procs):
        try:
            text, _ = p.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            text = (p.communicate()[0] or "") + "\n(timed out after %d s)" % args.timeout
        logf.write("==== %s rank %d (exit %s)\n%s\n" % (method, r, p.returncode, text))
        res = None
        for line in text.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
        if res is None:
            tail = [ln for ln in text.splitlines() if ln.strip()][-1:] or ["no output"]
            res = {"error": "rank %d exited %s without a result: %s" % (r, p.returncode, tail[0])}
        outs.append(res)
    logf.flush()
    return outs


def combine(outs):
    """One run's numbers: times are the slowest rank's, memory the largest rank's,
    bytes the sum; an error of any rank wins."""
    errs = [o["error"] for o in outs if "error" in o]
    if errs:
        return {"error": errs[0]}
    d = {}
    for k in sorted({k for o in outs for k in o}):
        vals = [o[k] for o in outs if k in o]
        if k == "bytes":
            d[k] = sum(vals)
        elif all(isinstance(v, (int, float)) for v in vals):
            d[k] = max(vals)
        else:
            d[k] = vals[0]
    return d


# (path, method, key, baseline method, key, target) of the table's time ratios
TIME_RATIOS = [
    ("async_save blocking: CkptdWriter ÷ FileSystemWriter best (shm + async staging, PROCESS)",
     "ckptd_async", "blocking_s", "fs_async_best", "blocking_s", "≤ 0.5"),
    ("async_save blocking: CkptdWriter ÷ memcpy into preallocated, touched buffers",
     "ckptd_async", "blocking_s", "memcpy", "memcpy_s", "≤ 1.2"),
    ("async_save blocking: CkptdWriter ÷ memcpy into fresh memory (clone)",
     "ckptd_async", "blocking_s", "memcpy", "memcpy_fresh_s", "(info)"),
    ("async_save blocking: FileSystemWriter best ÷ memcpy (preallocated)",
     "fs_async_best", "blocking_s", "memcpy", "memcpy_s", "(info)"),
    ("async_save blocking: CkptdWriter ÷ FileSystemWriter, DCP defaults (thread)",
     "ckptd_async", "blocking_s", "fs_async_plain", "blocking_s", "(info)"),
    ("dcp.save (sync): CkptdWriter ÷ FileSystemWriter",
     "ckptd_sync", "blocking_s", "fs_sync", "blocking_s", "(info)"),
    ("CkptdWriter async blocking ÷ torch.save + fsync",
     "ckptd_async", "blocking_s", "torch_save", "blocking_s", "(info)"),
    ("call → durable: CkptdWriter (tier LOCAL) ÷ FileSystemWriter best (future done)",
     "ckptd_async", "durable_s", "fs_async_best", "durable_s", "(info)"),
]


def med(runs, method, key):
    vals = [r[method][key] for r in runs if method in r and key in r[method]]
    return statistics.median(vals) if vals else None


def error_of(runs, method):
    for r in runs:
        if method in r and "error" in r[method]:
            return r[method]["error"]
    return None


def report(args, runs, meta):
    """The table: path, ckptd, baseline, ratio, target."""
    rows = []
    state_mib = args.size_mb

    def t(method, key):
        return med(runs, method, key)

    def fmt_s(v):
        return "—" if v is None else "%.3f s" % v

    def ratio(a, b):
        return "—" if a is None or b is None or b == 0 else "%.2f" % (a / b)

    def err(method, key="error"):
        for r in runs:
            if method in r and key in r[method]:
                return r[method][key][:400]
        return None

    def row(path, a_m, a_k, b_m, b_k, target, a_fmt=fmt_s, b_fmt=fmt_s):
        a = t(a_m, a_k) if a_m else None
        b = t(b_m, b_k) if b_m else None
        a_txt = a_fmt(a) if err(a_m) is None else "error: " + err(a_m)
        b_txt = b_fmt(b) if b_m is None or err(b_m) is None else "error: " + err(b_m)
        rows.append((path, a_txt, b_txt, ratio(a, b), target))

    for path, a_m, a_k, b_m, b_k, target in TIME_RATIOS:
        row(path, a_m, a_k, b_m, b_k, target)

    def fmt_rss(v):
        return "—" if v is None else "%.0f MiB" % (v / 1024)
    for m, label in (("ckptd_async", "CkptdWriter"), ("fs_async_best", "FileSystemWriter best"),
                     ("fs_async_plain", "FileSystemWriter defaults")):
        own = t(m, "extra_own_kb")
        e = err(m)
        rows.append(("extra peak RSS (anon + shmem, less ckptd's pool mapping) ÷ state: %s" % label,
                     ("error: " + e) if e else fmt_rss(own), "%d MiB" % state_mib,
                     "—" if own is None else "%.3f" % (own / 1024 / state_mib), "≤ 0.05"))
        rows.append(("  at that peak anon / shmem (less pool); peak of ckptd's pool mapped (info): %s" % label,
                     "%s / %s / %s" % (fmt_rss(t(m, "extra_anon_kb")), fmt_rss(t(m, "extra_shmem_kb")),
                                       fmt_rss(t(m, "rss_pool_kb"))), "—", "—", "(info)"))
    a, b = t("ckptd_async", "load_s"), t("fs_async_best", "load_s")
    ea = err("ckptd_async") or err("ckptd_async", "load_error")
    eb = err("fs_async_best") or err("fs_async_best", "load_error")
    rows.append(("load (page cache dropped; dcp.load, checked): CkptdReader ÷ FileSystemReader",
                 ("error: " + ea) if ea else fmt_s(a), ("error: " + eb) if eb else fmt_s(b),
                 ratio(a, b), "≤ 1.0"))
    row("%d small tensors, async_save blocking: CkptdWriter ÷ FileSystemWriter best"
        % args.small_tensors, "ckptd_small", "blocking_s", "fs_small", "blocking_s", "≤ 1.0")
    for m, label in (("torchsnapshot", "torchsnapshot 0.1.0 async_take"),
                     ("flashpoint", "ml-flashpoint 0.0.10 DCP adapter"),
                     ("nvrx", "nvidia-resiliency-ext 0.7.0 async")):
        if not any(m in r for r in runs):
            continue
        e = err(m)
        if e:
            rows.append(("other: %s" % label, "error: " + e, "—", "—", "(info)"))
            continue
        rows.append(("other: %s, blocking / durable" % label,
                     "%s / %s" % (fmt_s(t(m, "blocking_s")), fmt_s(t(m, "durable_s"))),
                     "ckptd %s / %s" % (fmt_s(t("ckptd_async", "blocking_s")),
                                        fmt_s(t("ckptd_async", "durable_s"))),
                     ratio(t("ckptd_async", "blocking_s"), t(m, "blocking_s")), "(info)"))
    lines = ["| path | ckptd | baseline | ratio | target |", "|---|---|---|---|---|"]
    lines += ["| %s |" % " | ".join(r) for r in rows]
    return "\n".join(lines)


def parent_main(args):
    methods = [m for m in METHODS if m in args.methods]
    os.makedirs(args.results, exist_ok=True)
    runs = []
    meta = {"cache_note": None}
    with open(os.path.join(args.results, "workers.log"), "a") as logf:
        for run in range(1, args.runs + 1):
            res = {}
            for m in methods:
                print("dcp.py: run %d/%d: %s" % (run, args.runs, m), file=sys.stderr, flush=True)
                res[m] = combine(run_pair(args, m, run, logf))
                if "error" in res[m]:
                    print("dcp.py:   %s: %s" % (m, res[m]["error"]), file=sys.stderr, flush=True)
                if res[m].get("cache_note"):
                    meta["cache_note"] = res[m]["cache_note"]
                # DCP's files of this measurement go; ckptd keeps its newest (--local-keep)
                subprocess.run(["rm", "-rf", os.path.join(args.dir, "dcp-%s-%s" % (args.job, m)),
                                os.path.join(args.dir, "torch-save"),
                                os.path.join(args.dir, "torchsnapshot")])
            with open(os.path.join(args.results, "run-%d.json" % run), "w") as f:
                json.dump(res, f, indent=1)
            runs.append(res)
    table = report(args, runs, meta)
    per_run = ["", "Per run (slowest rank; seconds):", "",
               "| run | method | call returned | blocking | durable | load | memcpy | memcpy fresh |",
               "|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs, 1):
        for m, d in r.items():
            if "error" in d:
                continue
            per_run.append("| %d | %s | %s | %s | %s | %s | %s | %s |" % tuple(
                [i, m] + ["%.3f" % d[k] if k in d else "" for k in
                          ("return_s", "blocking_s", "durable_s", "load_s", "memcpy_s",
                           "memcpy_fresh_s")]))
    text = table + "\n" + "\n".join(per_run) + "\n"
    if meta["cache_note"] and meta["cache_note"] != "dropped":
        text += "\nLoad: %s\n" % meta["cache_note"]
    with open(os.path.join(args.results, "table.md"), "w") as f:
        f.write(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=1024, help="MiB of local shards per rank")
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--small-tensors", type=int, default=5000)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--dir", required=True, help="scratch dir for DCP's files (ckptd's filesystem)")
    ap.add_argument("--socket", default=os.environ.get("CKPT_SOCKET"))
    ap.add_argument("--job", default="bdcp")
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--results", default=None)
    ap.add_argument("--timeout", type=int, default=900, help="seconds per measurement")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--run", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in args.methods if m not in METHODS]
    if unknown:
        ap.error("unknown methods: %s (known: %s)" % (", ".join(unknown), ", ".join(METHODS)))
    args.passthrough = ["--size-mb", str(args.size_mb), "--tensors", str(args.tensors),
                        "--small-tensors", str(args.small_tensors), "--ranks", str(args.ranks),
                        "--dir", args.dir, "--job", args.job]
    if args.socket:
        args.passthrough += ["--socket", args.socket]
    if args.worker:
        worker_main(args)
    else:
        args.results = args.results or os.path.join(args.dir, "results")
        parent_main(args)


if __name__ == "__main__":
    main()
