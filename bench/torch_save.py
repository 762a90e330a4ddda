# SPDX-License-Identifier: MIT
"""
torch_save.py — the two ways trainers save without ckptd, for bench/run.sh.

ckptd's staging time is only meaningful next to what it replaces, so this
saves the same bytes ckpt-bench stages (K float32 tensors, N bytes in all)
the two usual ways and prints the trainer's blocking time of each, one
`key=value` line per number and run:

  torch_save_s   torch.save(dict of tensors, file) + flush + os.fsync:
                 a synchronous save, the trainer waits for the disk.
  clone_s        the hand-written async save: clone every tensor into
                 fresh memory (the blocking part), then torch.save + fsync
                 of the clones in a background thread (timed separately as
                 bg_save_s, and waited for before the next run so runs do
                 not overlap).

Run it with Debian's /usr/bin/python3 (python3-torch), not another python.

  /usr/bin/python3 bench/torch_save.py --dir DIR [--size BYTES]
                                       [--tensors K] [--runs R]
"""
import argparse
import os
import sys
import threading
import time

import torch


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().removesuffix("iB").removesuffix("B")
    if s and s[-1].upper() in mult:
        return int(s[:-1]) * mult[s[-1].upper()]
    return int(s)


def save_fsync(obj, path):
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="directory on the filesystem under test")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    size = parse_size(args.size)
    if size % (4 * args.tensors):
        sys.exit("--size must split into --tensors float32 tensors")
    numel = size // 4 // args.tensors
    # Written once, so every page exists before anything is timed (the
    # trainer's parameters are resident too).
    tensors = {f"tensor-{i:04d}": torch.rand(numel, dtype=torch.float32)
               for i in range(args.tensors)}
    path = os.path.join(args.dir, "torch-save.pt")
    bg_path = os.path.join(args.dir, "torch-async.pt")
    print(f"torch_version={torch.__version__}")
    print(f"torch_threads={torch.get_num_threads()}")
    print(f"bytes={size}")
    sys.stdout.flush()

    for run in range(args.runs):
        t0 = time.monotonic()
        save_fsync(tensors, path)
        t1 = time.monotonic()
        os.unlink(path)

        t2 = time.monotonic()
        clones = {k: t.clone() for k, t in tensors.items()}
        t3 = time.monotonic()
        bg = {}

        def background(obj=clones):
            b0 = time.monotonic()
            save_fsync(obj, bg_path)
            bg["s"] = time.monotonic() - b0

        th = threading.Thread(target=background)
        th.start()
        del clones  # the thread holds the only reference, as in a real async saver
        th.join()
        os.unlink(bg_path)
        print(f"run={run} torch_save_s={t1 - t0:.6f} clone_s={t3 - t2:.6f} "
              f"bg_save_s={bg['s']:.6f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
