# SPDX-License-Identifier: MIT
"""One rank of a torch.distributed job that saves or loads a DCP checkpoint
through ckptd (ckptd.dcp), for test_dcp.py: run as a script, one process per
rank (gloo over TCP on loopback), so a test can SIGKILL ranks.

The state dict depends only on --seed, never on the world size, so a
checkpoint saved by 4 ranks can be checked when 2 or 3 load it: DTensors
sharded on dim 0 and dim 1 of a 1-D mesh, fp32, bf16, int64 and bool; a
plain replicated tensor; nested dicts; non-tensor items; keys with
characters no ckptd name allows.

    dcp_ranks.py save --rank R --world W --port P --job J --step S [--sync]
                      [--no-dist] [--kill-after-stage]
    dcp_ranks.py load --rank R --world W --port P --job J [--step S]

$CKPT_SOCKET names the rank's daemon.  Prints "staged <seconds>" after the
save call returns and "saved" / "loaded ok" at the end; a load whose
tensors differ exits 1 naming the first key that differs.
"""
import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

from ckptd.dcp import CkptdReader, CkptdWriter

WEIRD = "layers/0: attn.wq ü \\ 'x'"  # a state_dict key no ckptd name could be


def expected(seed):
    """The full (unsharded) tensors and the non-tensor items of the state."""
    g = torch.Generator().manual_seed(seed)
    t = {
        "model.emb": torch.randn(96, 16, generator=g),
        "model.w_bf16": torch.randn(40, 24, generator=g).to(torch.bfloat16),
        "model.cols": torch.randn(6, 48, generator=g),          # sharded on dim 1
        "model.idx": torch.randint(-2**40, 2**40, (33,), generator=g, dtype=torch.int64),
        "model.mask": torch.rand(17, 5, generator=g) > 0.5,
        WEIRD: torch.randn(12, 3, generator=g),
        "opt.step": torch.tensor(float(seed)),                  # a 0-d replicated tensor
        "opt.exp_avg": torch.randn(96, 16, generator=g),
    }
    items = {"train_state": {"step": seed, "tokens": seed * 4096},
             "dataloader": {"epoch": 3, "offset": seed * 7, "files": ["a", "b"]},
             "rng": torch.Generator().manual_seed(seed + 1).get_state()}
    return t, items


def sharded(full, mesh, zero=False):
    out = {}
    for k, v in full.items():
        src = torch.zeros_like(v) if zero else v
        if v.dim() == 0:
            out[k] = src.clone()
        else:
            out[k] = distribute_tensor(src, mesh, [Shard(1) if k == "model.cols" else Shard(0)])
    return out


def nest(flat, items):
    """{'model': {...}, 'opt': {...}, WEIRD: t, 'extra': items}: nested, as
    DCP flattens it."""
    sd = {"model": {}, "opt": {}, "extra": dict(items)}
    for k, v in flat.items():
        if k == WEIRD:
            sd[k] = v
        else:
            top, name = k.split(".", 1)
            sd[top][name] = v
    return sd


def flatten(sd):
    flat = {WEIRD: sd[WEIRD]}
    for top in ("model", "opt"):
        for name, v in sd[top].items():
            flat[top + "." + name] = v
    return flat, sd["extra"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["save", "load"])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--step", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--sync", action="store_true", help="dcp.save instead of async_save")
    ap.add_argument("--no-dist", action="store_true",
                    help="async_save(no_dist=True), training collectives on the default "
                    "group while it runs")
    ap.add_argument("--kill-after-stage", action="store_true",
                    help="SIGKILL this process as soon as async_save returns")
    a = ap.parse_args()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % a.port, rank=a.rank,
                            world_size=a.world)
    mesh = init_device_mesh("cpu", (a.world,))
    seed = a.seed if a.seed is not None else a.step
    full, items = expected(seed)
    if a.mode == "save":
        sd = nest(sharded(full, mesh), items)
        cid = "ckptd://%s/%d" % (a.job, a.step)
        t0 = time.monotonic()
        if a.sync:
            dcp.save(sd, storage_writer=CkptdWriter(job=a.job), checkpoint_id=cid)
            print("staged %.4f" % (time.monotonic() - t0), flush=True)
        else:
            fut = dcp.async_save(sd, storage_writer=CkptdWriter(job=a.job), checkpoint_id=cid,
                                 no_dist=a.no_dist)
            print("staged %.4f" % (time.monotonic() - t0), flush=True)
            if a.kill_after_stage:
                os.kill(os.getpid(), signal.SIGKILL)
            if a.no_dist:
                # the trainer's own collectives on the default group while
                # the save completes: DCP's background must not join them
                for i in range(50):
                    x = torch.full((4,), float(i + a.rank))
                    dist.all_reduce(x)
                    if x[0].item() != sum(i + r for r in range(a.world)):
                        print("all_reduce %d went wrong: %r" % (i, x), flush=True)
                        return 1
            fut.result()
        print("saved", flush=True)
    else:
        sd = nest(sharded(full, mesh, zero=True),
                  {"train_state": {"step": -1, "tokens": -1},
                   "dataloader": {"epoch": -1, "offset": -1, "files": []},
                   "rng": torch.zeros_like(items["rng"])})
        cid = None if a.step is None else "ckptd://%s/%d" % (a.job, a.step)
        dcp.load(sd, storage_reader=CkptdReader(job=a.job), checkpoint_id=cid)
        flat, extra = flatten(sd)
        for k, want in full.items():
            got = flat[k].full_tensor() if hasattr(flat[k], "full_tensor") else flat[k]
            if got.dtype != want.dtype or not torch.equal(got, want):
                print("differs: %r" % k, flush=True)
                return 1
        for k, want in items.items():
            got = extra[k]
            same = torch.equal(got, want) if isinstance(want, torch.Tensor) else got == want
            if not same:
                print("differs: extra.%s: %r != %r" % (k, got, want), flush=True)
                return 1
        print("loaded ok", flush=True)
    dist.barrier()  # every rank is done before any tears the group down
    dist.destroy_process_group()
    sys.stdout.flush()
    # Not a return: the interpreter's teardown can still abort the process
    # ("terminate called without an active exception", a gloo thread's
    # destructor; seen once in CI after "loaded ok") when the work is done
    # and checked.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
