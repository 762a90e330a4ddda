# SPDX-License-Identifier: MIT
"""train.py — a small data-parallel trainer that checkpoints through ckptd
with torch.distributed.checkpoint (DCP), in the shape of torchtitan's
CheckpointManager.

    torchrun --standalone --nproc-per-node 2 train.py --job demo --steps 40
    python3 train.py --nproc 2 --job demo --steps 40        # spawns the ranks itself

What it shows:

- parameters sharded with FSDP2 (torch.distributed.fsdp.fully_shard) over a
  CPU device mesh on gloo: every parameter and optimizer state is a DTensor
  holding this rank's shard;
- a deterministic synthetic dataset (seeded) read by a loader whose position
  is part of the checkpoint;
- every --ckpt-every steps, dcp.async_save of model + optimizer
  (torch.distributed.checkpoint.state_dict.get_state_dict) plus train_state
  {step}, this rank's RNG states and its loader position as non-tensor items;
  the previous save's future is waited for before the next save is begun;
- at start, resuming from the newest committed step (CkptdReader with
  checkpoint_id None), so a job killed at any point continues where its last
  checkpoint left it, with the same losses as a run never interrupted;
- rank 0 prints one line per step, `step N loss <float.hex()>`, the mean
  loss over the ranks, exact to the bit (tests compare these lines).

--backend fs writes through DCP's own FileSystemWriter into --dir instead
(step-N directories), for comparison.  Keeping the newest k checkpoints is
ckptd's retention (ckptd --local-keep k); with --backend fs this script
removes older step directories itself (--keep).
"""
import argparse
import os
import pickle
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

IN_FEATURES = 32
HIDDEN = 64


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---- data ---------------------------------------------------------------------------------
class SyntheticLoader:
    """A seeded regression data set of `samples` rows, read in global batches of
    `batch` rows, shuffled again every epoch; each rank takes its slice of every
    batch.  The position (epoch, batch index) is all the state there is: the same
    position gives the same batches, on any run."""

    def __init__(self, seed, samples, batch, rank, world):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(samples, IN_FEATURES, generator=g)
        w = torch.randn(IN_FEATURES, 1, generator=g)
        self.y = torch.tanh(self.x @ w) + 0.1 * torch.randn(samples, 1, generator=g)
        self.seed, self.batch, self.rank, self.world = seed, batch, rank, world
        self.epoch, self.index = 0, 0

    def _order(self):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return torch.randperm(len(self.x), generator=g)

    def next(self):
        per_epoch = len(self.x) // self.batch
        if self.index >= per_epoch:
            self.epoch, self.index = self.epoch + 1, 0
        rows = self._order()[self.index * self.batch:(self.index + 1) * self.batch]
        self.index += 1
        mine = rows[self.rank::self.world]
        return self.x[mine], self.y[mine]

    def state_dict(self):
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, sd):
        self.epoch, self.index = int(sd["epoch"]), int(sd["index"])


# ---- model ----------------------------------------------------------------------------------
def build_model(mesh, seed):
    """An MLP with dropout (so that the RNG state matters to exact resume),
    sharded layer by layer with FSDP2."""
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)  # the same initial weights on every rank
    model = torch.nn.Sequential(
        torch.nn.Linear(IN_FEATURES, HIDDEN), torch.nn.GELU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, HIDDEN), torch.nn.GELU(), torch.nn.Dropout(0.1),
        torch.nn.Linear(HIDDEN, 1))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


# ---- checkpointing ----------------------------------------------------------------------------
class CheckpointManager:
    """torchtitan's CheckpointManager, reduced to what this trainer needs:
    save(step) every `every` steps with dcp.async_save, waiting for the previous
    save first; load() of the newest committed step at start; close() waits for
    the last save."""

    def __init__(self, args, model, optimizer, loader, rank):
        self.args, self.model, self.optimizer, self.loader, self.rank = \
            args, model, optimizer, loader, rank
        self.every = args.ckpt_every
        # async_save plans and finishes in a background thread with collectives
        # of its own; on the training's group they would interleave with
        # FSDP's all-gathers and hang both (torchtitan, too, gives async
        # checkpointing a gloo group of its own)
        self.pg = dist.new_group(backend="gloo")
        self.future = None
        self.pending_step = None
        self.writer = None

    # The non-tensor items are this rank's own (RNG, loader position): their
    # keys carry the rank, or DCP would keep one rank's copy of a key that every
    # rank saves (it deduplicates equal keys across ranks).
    def _state_dict(self, step):
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        return {
            "model": model_sd,
            "optim": optim_sd,
            "train_state": {"step": step},
            "rng.rank%d" % self.rank: {
                "torch": torch.get_rng_state(),
                "python": pickle.dumps(random.getstate()),
            },
            "dataloader.rank%d" % self.rank: self.loader.state_dict(),
        }

    def _checkpoint_id(self, step):
        if self.args.backend == "ckptd":
            return "ckptd://%s/%d" % (self.args.job, step)
        return os.path.join(self.args.dir, self.args.job, "step-%d" % step)

    def save(self, step, force=False):
        if not force and step % self.every != 0:
            return
        self.wait()
        sd = self._state_dict(step)
        cid = self._checkpoint_id(step)
        if self.args.backend == "ckptd":
            if self.writer is None:  # one writer per trainer process
                from ckptd.dcp import CkptdWriter
                self.writer = CkptdWriter(job=self.args.job, socket_path=self.args.socket)
            writer = self.writer
        else:
            from torch.distributed.checkpoint import FileSystemWriter
            writer = FileSystemWriter(cid, sync_files=True)
        self.future = dcp.async_save(sd, storage_writer=writer, checkpoint_id=cid,
                                     process_group=self.pg)
        self.pending_step = step

    def wait(self):
        """The previous save's future (its commit, for ckptd), then retention."""
        if self.future is None:
            return
        fut = getattr(self.future, "upload_completion", self.future)
        fut.result()
        self.future = None
        if self.args.backend == "fs" and self.rank == 0:
            self._fs_retention()
        if self.rank == 0:
            log("checkpoint: step %d saved" % self.pending_step)

    def _fs_steps(self):
        """Complete step-N directories under --dir/JOB (DCP writes .metadata last)."""
        root = os.path.join(self.args.dir, self.args.job)
        steps = []
        if os.path.isdir(root):
            for name in os.listdir(root):
                m = re.fullmatch(r"step-(\d+)", name)
                if m and os.path.exists(os.path.join(root, name, ".metadata")):
                    steps.append(int(m.group(1)))
        return sorted(steps)

    def _fs_retention(self):
        for step in self._fs_steps()[:-self.args.keep]:
            shutil.rmtree(os.path.join(self.args.dir, self.args.job, "step-%d" % step),
                          ignore_errors=True)

    def load(self):
        """Restores the newest committed step; returns its step number, or 0 when
        there is none (a fresh start)."""
        if self.args.backend == "ckptd":
            import ckptd
            try:
                with ckptd.Client(self.args.socket) as c:
                    c.latest(self.args.job)
            except FileNotFoundError:  # no committed step of the job: a fresh start
                return 0
            from ckptd.dcp import CkptdReader
            reader, cid = CkptdReader(job=self.args.job, socket_path=self.args.socket), None
        else:
            # every rank must agree on the step: rank 0 looks, the others hear
            found = [self._fs_steps()[-1] if self._fs_steps() else 0]
            dist.broadcast_object_list(found, src=0)
            if found[0] == 0:
                return 0
            from torch.distributed.checkpoint import FileSystemReader
            cid = self._checkpoint_id(found[0])
            reader = FileSystemReader(cid)
        sd = self._state_dict(0)
        dcp.load(sd, storage_reader=reader, checkpoint_id=cid, process_group=self.pg)
        set_state_dict(self.model, self.optimizer, model_state_dict=sd["model"],
                       optim_state_dict=sd["optim"])
        rng = sd["rng.rank%d" % self.rank]
        torch.set_rng_state(rng["torch"])
        random.setstate(pickle.loads(rng["python"]))
        self.loader.load_state_dict(sd["dataloader.rank%d" % self.rank])
        return int(sd["train_state"]["step"])

    def close(self):
        self.wait()


# ---- training --------------------------------------------------------------------------------
def train(args):
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    # a rank that died leaves the others in a collective: give up after a minute
    dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout))
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (world,))
    model = build_model(mesh, args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loader = SyntheticLoader(args.seed, args.samples, args.batch, rank, world)
    # each rank's own stream for dropout; restored from the checkpoint on resume
    torch.manual_seed(args.seed * 31 + rank)
    random.seed(args.seed * 31 + rank)
    ckpt = CheckpointManager(args, model, optimizer, loader, rank)
    start = ckpt.load()
    if rank == 0:
        log("resumed from step %d" % start if start else "fresh start")
    for step in range(start + 1, args.steps + 1):
        x, y = loader.next()
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        if rank == 0:
            print("step %d loss %s" % (step, float(mean).hex()), flush=True)
        ckpt.save(step)
        if args.crash_at == step and rank == args.crash_rank:
            # the test's crash: right after this step's save was handed over
            os.kill(os.getpid(), signal.SIGKILL)
        if args.step_sleep:
            time.sleep(args.step_sleep)
    ckpt.close()
    dist.barrier()
    dist.destroy_process_group()


def spawn(args):
    """--nproc N: start N ranks of this script the way torchrun would (RANK,
    WORLD_SIZE, MASTER_ADDR/PORT); when one exits with an error, stop the
    others and exit with its status."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    argv = [a for a in sys.argv[1:]]
    i = argv.index("--nproc")
    del argv[i:i + 2]
    procs = []
    for r in range(args.nproc):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(args.nproc),
                   LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=env))
    status = 0
    live = list(procs)
    while live:
        for p in list(live):
            rc = p.poll()
            if rc is None:
                continue
            live.remove(p)
            if rc != 0 and status == 0:
                status = rc if rc > 0 else 128 - rc
                for q in live:
                    q.kill()
        time.sleep(0.05)
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", default="train-example")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--ckpt-every", type=int, default=5)
    ap.add_argument("--socket", default=os.environ.get("CKPT_SOCKET"),
                    help="ckptd's socket (default $CKPT_SOCKET, then the daemon's default)")
    ap.add_argument("--backend", choices=("ckptd", "fs"), default="ckptd")
    ap.add_argument("--dir", default="/tmp/train-example",
                    help="--backend fs: where DCP's step-N directories go")
    ap.add_argument("--keep", type=int, default=2, help="--backend fs: newest checkpoints kept")
    ap.add_argument("--nproc", type=int, default=0, help="spawn this many ranks (instead of torchrun)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--samples", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64, help="global batch (rows over all ranks)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--pg-timeout", type=int, default=60, help="seconds a collective may wait")
    ap.add_argument("--crash-at", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--crash-rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--step-sleep", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.nproc:
        sys.exit(spawn(args))
    if "RANK" not in os.environ:
        ap.error("run under torchrun, or give --nproc N")
    train(args)


if __name__ == "__main__":
    main()
