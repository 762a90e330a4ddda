# SPDX-License-Identifier: MIT
"""The Python bindings (client/python/ckptd) against a real ckptd: a
4-rank save from bytes, bytearray and memoryview objects, commit, latest,
shard list, whole and ranged reads compared byte for byte, and the errors
a user sees (bad name, another job's step, a read of a step not committed,
torn-free commit of a missing rank) as CkptError with the right errno and
the daemon's message; a rank saved twice says it replaced the first copy;
commit_async: rank 0 asks and its client goes away, the step commits when
rank 1 lands."""
import errno
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.environ.get("CKPT_SOURCE_ROOT", "."), "client", "python"))
from harness import Daemon, check, run_test  # noqa: E402


def payload(rank, n):
    return bytes((i * 7 + rank * 13) % 251 for i in range(n))


def main(tmp):
    d = Daemon(tmp, pool="64M", slot="8M").start()
    os.environ["CKPT_SOCKET"] = d.socket
    import ckptd  # noqa: E402

    shapes = {"weights": 9 * 1024 * 1024 + 3, "bias": 4097, "empty": 0}
    with ckptd.Client() as c:
        for rank in range(4):
            with c.save("py-job", 10, rank, 4) as s:
                s.write("weights", payload(rank, shapes["weights"]))           # bytes
                s.write("bias", bytearray(payload(rank, shapes["bias"])))       # bytearray
                s.write("empty", memoryview(b""))                               # memoryview
        c.commit("py-job", 10)
        check(c.latest("py-job") == (10, 4), "latest is %s" % (c.latest("py-job"),))
        for rank in range(4):
            names = [(n, sz) for n, sz, _ in c.shards("py-job", 10, rank)]
            check(names == sorted((n, s) for n, s in shapes.items()), "shards %s" % names)
            for name, size in shapes.items():
                check(c.read("py-job", 10, rank, name) == payload(rank, size),
                      "rank %d %s differs" % (rank, name))
        got = c.read("py-job", 10, 2, "weights", offset=1048570, length=20)
        check(got == payload(2, shapes["weights"])[1048570:1048590], "ranged read differs")

        try:
            c.save("a/b", 1, 0, 1)
            check(False, "a name with '/' was accepted")
        except ckptd.CkptError as e:
            check(e.errno == errno.EINVAL and "invalid name" in str(e), "bad name: %s" % e)
        try:
            c.read("py-job", 99, 0, "weights")
            check(False, "read of a missing step succeeded")
        except ckptd.CkptError as e:
            check(e.errno == errno.ENOENT, "missing step: %s" % e)
        with c.save("py-job", 11, 0, 2) as s:
            check(s.replaced is False, "a rank's first save says replaced")
            s.write("weights", b"y")
        c.wait("py-job", 11)  # the first copy on disk: a rank being saved is EBUSY
        with c.save("py-job", 11, 0, 2) as s:
            # saved again before the step is committed: replaces the first copy
            check(s.replaced is True, "saving rank 0 of step 11 again does not say replaced")
            s.write("weights", b"x")
        try:
            c.read("py-job", 11, 0, "weights")
            check(False, "read of an uncommitted step succeeded")
        except ckptd.CkptError as e:
            check(e.errno == errno.ENOENT and "is not committed" in str(e),
                  "uncommitted step: %s" % e)
        try:
            # no barrier is needed before a commit: it waits for the
            # missing rank, and its timeout names it (docs/commit.md)
            c.commit("py-job", 11, timeout_ms=500)
            check(False, "commit with a rank missing succeeded")
        except ckptd.CkptError as e:
            check(e.errno == errno.ETIMEDOUT and "rank 1 of 2 is not saved" in str(e),
                  "commit: %s" % e)

    # a commit request outlives its client: rank 0 asks and disconnects
    with ckptd.Client() as c:
        with c.save("py-job", 12, 0, 2) as s:
            s.write("weights", b"r0")
        c.commit_async("py-job", 12)
        try:
            c.commit_async("py-nojob", 12)
            check(False, "commit_async of an unknown job succeeded")
        except ckptd.CkptError as e:
            check(e.errno == errno.ENOENT and "no job named" in str(e), "commit_async: %s" % e)
    with ckptd.Client() as c:
        with c.save("py-job", 12, 1, 2) as s:
            s.write("weights", b"r1")
    with ckptd.Client() as c:
        c.wait("py-job", 12, ckptd.COMMITTED, timeout_ms=30000)
        check(c.latest("py-job") == (12, 2), "latest after commit_async: %s"
              % (c.latest("py-job"),))
        check(c.read("py-job", 12, 1, "weights") == b"r1", "rank 1 of step 12 differs")
    check(d.stop() == 0, "unclean exit")


run_test(main)
