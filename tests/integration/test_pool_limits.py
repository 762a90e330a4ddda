# SPDX-License-Identifier: MIT
"""Memory stays bounded: a shard larger than the whole slot pool still
saves (it streams through the pool window by window) and restores
bit-exact; when every slot is lent out, another trainer waits up to the
pool wait timeout and then gets a clear -ETIMEDOUT, while the holder's save
still completes."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import Daemon, check, ctl_json, log, pool_at_rest, run_test, shards_arg  # noqa: E402


def main(tmp):
    d = Daemon(tmp, name="big", pool="32M", slot="8M").start()

    # 200 MiB + a tail through a 32 MiB pool, both copy and zero-copy
    big = [("huge", 200 * 1024 * 1024 + 4097)]
    d.rank("save", "--job", "big", "--step", 1, "--rank", 0, "--world", 2,
           "--shards", shards_arg(big))
    d.rank("save", "--job", "big", "--step", 1, "--rank", 1, "--world", 2,
           "--shards", shards_arg(big), "--zero-copy", "--commit")
    for r in (0, 1):
        d.rank("verify", "--job", "big", "--step", 1, "--rank", r, "--shards", shards_arg(big))
    log("a shard 6x the pool saved and restored")
    check(d.stop() == 0, "unclean exit")

    # a pool of one slot, and a short wait so the test is quick
    d = Daemon(tmp, name="hold", pool="32M", slot="32M",
               extra=["--pool-wait-timeout", "700ms"]).start()

    # one trainer takes the whole pool (one 32 MiB slot) and sits on it
    holder = d.rank_async("save", "--job", "hold", "--step", 1, "--rank", 0, "--world", 1,
                          "--shards", "w:%d" % (32 * 1024 * 1024), "--zero-copy",
                          "--hold", 3000)
    line = holder.stdout.readline().strip()
    if line != "holding":
        holder.kill()
        out, err = holder.communicate()
        check(False, "holder did not get its window: %r %s" % (line, err))
    t0 = time.monotonic()
    p = d.rank("save", "--job", "other", "--step", 1, "--rank", 0, "--world", 1,
               "--shards", "x:4096", check_rc=False)
    waited = time.monotonic() - t0
    check(p.returncode == 1 and "ERROR ETIMEDOUT" in p.stderr,
          "second trainer should time out, got %d: %s" % (p.returncode, p.stderr))
    check("no shared-memory slot" in p.stderr, "unclear message: %s" % p.stderr)
    check(0.6 < waited < 2.9, "waited %.2fs, expected about the 0.7s timeout" % waited)
    out, err = holder.communicate(timeout=60)
    check(holder.returncode == 0, "holder failed: %s" % err)
    d.rank("commit", "--job", "hold", "--step", 1)
    d.rank("verify", "--job", "hold", "--step", 1, "--rank", 0,
           "--shards", "w:%d" % (32 * 1024 * 1024))
    # and once the pool is free the other trainer saves fine
    d.rank("save", "--job", "other", "--step", 1, "--rank", 0, "--world", 1,
           "--shards", "x:4096", "--commit")
    pool_at_rest(ctl_json(d, "status"))
    check(d.stop() == 0, "unclean exit")


run_test(main)
