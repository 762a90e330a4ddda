# SPDX-License-Identifier: MIT
"""8 rank processes x 4 shards of mixed sizes (0 bytes, 1 byte, not a
multiple of 4096, large), >= 1 GiB in total, saved concurrently through a
real ckptd, committed, then restored bit-exact by fresh processes: whole
shards, odd-sized pieces, ranged reads, and read-only mappings.  The pool
(256 MiB) is smaller than the checkpoint, so slots are reused and shards
larger than a slot arrive as several windows."""
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import Daemon, check, log, run_test, shards_arg  # noqa: E402

WORLD = 8
JOB = "llama-405b.run_7"
STEP = 1000


def shard_spec(rank):
    # 0 B, 1 B, not a multiple of 4 KiB, and a large one (~130 MiB): 8 ranks
    # total a little over 1 GiB
    return [("empty", 0), ("one", 1), ("odd", 4096 * 3 + 17 + rank),
            ("model.layers.weight", 130 * 1024 * 1024 + 12345 * rank)]


def main(tmp):
    d = Daemon(tmp).start()
    total = sum(s for r in range(WORLD) for _, s in shard_spec(r))
    check(total >= 1 << 30, "test data must be >= 1 GiB, is %d" % total)

    procs = []
    for r in range(WORLD):
        args = ["save", "--job", JOB, "--step", STEP, "--rank", r, "--world", WORLD,
                "--shards", shards_arg(shard_spec(r))]
        if r % 2:
            args.append("--zero-copy")
        procs.append(d.rank_async(*args))
    for r, p in enumerate(procs):
        out, err = p.communicate(timeout=600)
        check(p.returncode == 0, "rank %d save failed: %s" % (r, err))
    log("saved %d bytes from %d ranks" % (total, WORLD))

    d.rank("commit", "--job", JOB, "--step", STEP)
    out = d.rank("latest", "--job", JOB).stdout.split()
    check(out == [str(STEP), str(WORLD)], "latest committed is %s" % out)

    # restore in fresh processes: whole shards, then odd piece sizes + map
    for r in range(WORLD):
        d.rank("verify", "--job", JOB, "--step", STEP, "--rank", r,
               "--shards", shards_arg(shard_spec(r)), *(["--map"] if r < 2 else []))
    d.rank("verify", "--job", JOB, "--step", STEP, "--rank", 3,
           "--shards", shards_arg(shard_spec(3)), "--piece", 3 * 1024 * 1024 + 7)

    # ranged reads crossing block and slot boundaries
    big = 130 * 1024 * 1024 + 12345 * 5
    for off, length in [(0, 1), (1, 4095), (1048575, 2), (16 * 1048576 - 3, 5),
                        (big - 10, 10), (big - 1, 1), (77777777, 33333333)]:
        d.rank("read", "--job", JOB, "--step", STEP, "--rank", 5,
               "--shard", "model.layers.weight", "--offset", off, "--length", length)

    # the committed checkpoint survives a daemon restart (SIGTERM)
    check(d.stop() == 0, "ckptd did not exit cleanly on SIGTERM")
    d2 = Daemon(tmp, state_dir=d.state_dir).start()
    out = d2.rank("latest", "--job", JOB).stdout.split()
    check(out == [str(STEP), str(WORLD)], "after restart latest is %s" % out)
    d2.rank("verify", "--job", JOB, "--step", STEP, "--rank", 7,
            "--shards", shards_arg(shard_spec(7)))
    check(d2.catalog_integrity() == "ok", "catalog integrity check failed")
    d2.stop()


run_test(main)
