# SPDX-License-Identifier: MIT
"""Bad input gets a clear error and changes nothing.

A checkpoint is committed first; then the daemon is fed everything a broken
or hostile client could send: truncated, oversized and garbage packets,
wrong protocol versions and magic, unknown types, requests before HELLO,
invalid names (through libckpt, which refuses them itself, and raw, which the
daemon must refuse), windows past a shard's declared end, a torn shard, a
wrong CRC, another uid touching a job, descriptors attached to requests.
Every answer is checked for its exact errno and a message saying what was
wrong, and after every bad packet the same connection still gets STATUS
answered.  At the end the first checkpoint still restores bit-exact, the
daemon serves a fresh save/commit/restore, left no stray directories or fds,
and its log holds no sanitizer report."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (Daemon, check, check_log_clean, crc32c, expect_error,  # noqa: E402
                     expect_ok, log, raw, run_test, shards_arg)

NOBODY = 65534
BASE_JOB = "base-job"
BASE_STEP = 10
BASE_SHARDS = [("model", 3 * 1024 * 1024 + 17), ("optim", 5000), ("empty", 0)]


# ---- helpers ----------------------------------------------------------------



def rank_error(p, ename, code, snippet=None, what=""):
    """ckpt-testrank failed with ERROR ename code (its stderr format)."""
    check(p.returncode != 0, "%s: succeeded but should have failed with %s: %s"
          % (what, ename, p.stdout))
    want = "ERROR %s %d:" % (ename, code)
    first = [l for l in p.stderr.splitlines() if l.startswith("ERROR ")]
    check(first and first[0].startswith(want),
          "%s: expected %s, got rc=%d stderr=%r" % (what, want, p.returncode, p.stderr[-600:]))
    if snippet:
        check(snippet in first[0], "%s: %r does not mention %r" % (what, first[0], snippet))
    return first[0]


def ckpt_list(d, job):
    return json.loads(d.ctl("--json", "list", job).stdout)


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def jobs_on_disk(d):
    return sorted(os.listdir(os.path.join(d.state_dir, "jobs")))


# ---- the test ------------------------------------------------------------------

def main(tmp):
    # nobody must reach the socket: traversable dir, world-writable socket
    os.chmod(tmp, 0o755)
    d = Daemon(tmp, pool="64M", slot="4M", extra=["--socket-mode", "0666"]).start()

    # a checkpoint committed before any bad input
    d.rank("save", "--job", BASE_JOB, "--step", BASE_STEP, "--shards", shards_arg(BASE_SHARDS),
           "--commit")
    d.rank("verify", "--job", BASE_JOB, "--step", BASE_STEP, "--shards", shards_arg(BASE_SHARDS))
    fds_before = fd_count(d.proc.pid)

    # ---- raw: sanity, so the failures below mean something
    lines = raw(d, "valid", "status")
    expect_ok(lines, what="valid STATUS")
    check("SEQ OK" in lines, "valid STATUS: seq not echoed: %s" % lines)

    # ---- truncated messages: several types, several lengths, with the
    # header's length field left alone (mismatch) and made to agree
    full = {"hello": 20, "save-begin": 16 + 18 + 7, "shard-begin": 16 + 14 + 7,
            "chunk-get": 28, "chunk-put": 44, "save-finish": 20, "wait": 16 + 15 + 7,
            "commit": 16 + 14 + 7, "read": 16 + 32 + 7 + 7, "ckpt-list": 16 + 6 + 7}
    n = 0
    for t, size in full.items():
        for length in sorted({1, 4, 8, 15, 16, 17, size // 2 + 8, size - 1}):
            if length >= size:
                continue
            for fix in ([False, True] if length >= 16 else [False]):
                args = (["--fix-length"] if fix else []) + ["truncated", t, length]
                lines = raw(d, *args)
                expect_error(lines, "EBADMSG", -74, "malformed", seq=length >= 16,
                             what="truncated %s to %d bytes%s" % (t, length,
                                                                 " (length fixed)" if fix else ""))
                n += 1
    # malformed wins over "no HELLO yet"
    lines = raw(d, "--no-hello", "--fix-length", "truncated", "save-begin", 30)
    expect_error(lines, "EBADMSG", -74, "malformed", what="truncated before HELLO")
    log("truncated: %d packets rejected with EBADMSG" % n)

    # ---- oversized: > 64 KiB is EMSGSIZE; exactly 64 KiB is a legal size
    # (the trailing bytes make it malformed, not oversized)
    for size in (65537, 100000, 200000):
        lines = raw(d, "oversize", size)
        expect_error(lines, "EMSGSIZE", -90, ["65536", str(size)], what="oversize %d" % size)
    lines = raw(d, "oversize", 65536)
    expect_error(lines, "EBADMSG", -74, "malformed", what="64 KiB STATUS with trailing bytes")
    log("oversize: ok")

    # ---- garbage bytes
    for size, seed in [(1, 1), (3, 2), (15, 3), (16, 4), (17, 5), (100, 6), (4096, 7),
                       (65536, 8)]:
        lines = raw(d, "--seed", seed, "garbage", size)
        expect_error(lines, "EBADMSG", -74, "malformed", seq=False,
                     what="%d garbage bytes" % size)
    log("garbage: ok")

    # ---- wrong protocol version: EPROTONOSUPPORT naming the supported ones
    # (version 1 is the protocol before the object-store tier: refused too)
    for v, t in [(8, "status"), (1, "status"), (0, "status"), (0xffff, "hello"),
                 (8, "save-begin")]:
        lines = raw(d, "bad-version", v, t)
        msg = expect_error(lines, "EPROTONOSUPPORT", -93, what="version %d %s" % (v, t))
        check("versions 2..7" in msg and str(v) in msg,
              "version %d: message must name the supported versions 2..7 and the one sent: %r"
              % (v, msg))
    # before HELLO too: the version is checked first
    lines = raw(d, "--no-hello", "bad-version", 8, "hello")
    expect_error(lines, "EPROTONOSUPPORT", -93, "versions 2..7",
                 what="version 8 HELLO, no HELLO yet")
    # HELLO offering only versions the daemon does not speak
    lines = raw(d, "--no-hello", "hello-range", 8, 9)
    msg = expect_error(lines, "EPROTONOSUPPORT", -93, what="HELLO 8..9")
    check("2..7" in msg and "8..9" in msg, "HELLO 8..9: message names neither side: %r" % msg)
    # every version is spoken: a request is answered in its header's version,
    # and HELLO settles the newest both sides speak
    for v in (2, 3, 4, 5, 6, 7):
        expect_ok(raw(d, "bad-version", v, "status"), what="STATUS in version %d" % v)
    # a version-2 client's SAVE_BEGIN gets the version-2 reply (no `replaced`),
    # which its decoder reads
    expect_ok(raw(d, "bad-version", 2, "save-begin"), what="SAVE_BEGIN in version 2")
    for lo, hi, hv, want in [(2, 2, 2, "proto=2 version=2"), (2, 3, 2, "proto=3 version=2"),
                             (1, 9, 3, "proto=7 version=3"), (3, 3, 3, "proto=3 version=3"),
                             (2, 4, 2, "proto=4 version=2"), (4, 4, 4, "proto=4 version=4"),
                             (2, 5, 5, "proto=5 version=5"), (2, 6, 6, "proto=6 version=6"),
                             (2, 7, 7, "proto=7 version=7")]:
        lines = raw(d, "--no-hello", "hello-range", lo, hi, hv)
        check(any(l.startswith("OK HELLO_REPLY") and l.endswith(want) for l in lines),
              "HELLO %d..%d in a version-%d header: %s, want %s" % (lo, hi, hv, lines, want))
    log("version: ok")

    # ---- bad magic
    for t in ("status", "hello", "save-begin", "commit"):
        lines = raw(d, "bad-magic", t)
        expect_error(lines, "EBADMSG", -74, "malformed", seq=False, what="bad magic %s" % t)

    # ---- unknown types (and a reply type sent as a request)
    # (23 and 24: numbers left to messages of other changes, no type here)
    for t in (0, 18, 23, 24, 99, 0x7fff, 0x8001, 0x800f, 0xfffe, 0xffff):
        lines = raw(d, "unknown-type", t)
        expect_error(lines, "EBADMSG", -74, "malformed", what="unknown type %#x" % t)
    log("magic/type: ok")

    # ---- requests before HELLO: EPROTO, except what ckptctl needs
    gated = ["save-begin", "shard-begin", "chunk-get", "chunk-put", "save-finish", "save-abort",
             "wait", "commit", "latest", "shard-list", "read", "read-done", "map"]
    lines = raw(d, "no-hello", *gated)
    for t in gated:
        label = t.upper().replace("-", "_")
        expect_error(lines, "EPROTO", -71, ["HELLO", label], label=label,
                     what="%s before HELLO" % label)
    lines = raw(d, "no-hello", "status", "job-list")
    expect_ok(lines, "STATUS", what="STATUS before HELLO")
    expect_ok(lines, "JOB_LIST", what="JOB_LIST before HELLO")
    log("no-hello: ok")

    # ---- invalid names through libckpt: refused before anything is sent
    bad_names = ["", "..", ".", "a/b", "a" * 4096, "a b", "-rf", ".hidden", "x/../../etc",
                 "a" * 256]
    for name in bad_names:
        short = name if len(name) < 20 else "%d x 'a'" % len(name)
        p = d.rank("save", "--job", name, "--step", 1, "--shards", "s:10", check_rc=False)
        rank_error(p, "EINVAL", -22, "invalid name", what="libckpt job name %r" % short)
        # (ckpt-testrank keeps 255 bytes of a --shards name, and an empty
        # entry is no shard: those two reach libckpt only raw, below)
        if name and len(name) <= 255:
            p = d.rank("save", "--job", "names-ok", "--step", 1, "--shards", name + ":10",
                       check_rc=False)
            rank_error(p, "EINVAL", -22, "invalid name", what="libckpt shard name %r" % short)
        p = d.rank("latest", "--job", name, check_rc=False)
        rank_error(p, "EINVAL", -22, what="libckpt latest of %r" % short)
    log("libckpt names: ok")

    # ---- invalid names, raw: the daemon's decoder refuses them
    raw_bad = bad_names + ["a\\x00b", "\\x00", "tab\\x09", "a\\xffb", "nl\\x0a"]
    for i, name in enumerate(raw_bad):
        short = name if len(name) < 20 else "%d x 'a'" % len(name)
        lines = raw(d, "bad-name", "job", name)
        expect_error(lines, "EINVAL", -22, "invalid value", label="SAVE_BEGIN",
                     what="raw job name %r" % short)
        # a fresh step each time: the last attempt's save is failed by its
        # disconnect, which the daemon may see after this connect
        lines = raw(d, "--step", 100 + i, "bad-name", "shard", name)
        expect_ok(lines, "SAVE_BEGIN", what="raw shard name %r: valid save" % short)
        expect_error(lines, "EINVAL", -22, "invalid value", label="SHARD_BEGIN",
                     what="raw shard name %r" % short)
    # the hand encoder is honest: a good name through it is accepted
    lines = raw(d, "bad-name", "job", "good.name")
    expect_ok(lines, "SAVE_BEGIN", what="raw good job name")
    check(set(jobs_on_disk(d)) <= {BASE_JOB, "raw-job", "good.name", "names-ok"},
          "invalid names left something on disk: %s" % jobs_on_disk(d))
    log("raw names: ok")

    # ---- a shard bigger than declared
    size = 5000
    lines = raw(d, "chunk-past-end", "past-end", 1, size)
    for label in ("SAVE_BEGIN", "SHARD_BEGIN", "CHUNK_GET"):
        expect_ok(lines, label, what="chunk-past-end setup")
    expect_error(lines, "EINVAL", -22, ["holds %d bytes" % size, "5001"], label="CHUNK_PUT_LONG",
                 seq=False, what="CHUNK_PUT one byte past the window")
    expect_error(lines, "EINVAL", -22, "holds %d bytes" % size, label="CHUNK_PUT_HUGE",
                 seq=False, what="CHUNK_PUT a slot past the window")
    expect_ok(lines, "CHUNK_PUT", what="the honest window after the bad ones")
    expect_error(lines, "ERANGE", -34, ["%d bytes" % size, "offset %d" % size],
                 label="CHUNK_GET_END", seq=False, what="CHUNK_GET at offset == size")
    expect_error(lines, "ERANGE", -34, "beyond", label="CHUNK_GET_PAST", seq=False,
                 what="CHUNK_GET past the end")
    expect_ok(lines, "SAVE_FINISH", what="the save of exactly the declared bytes")
    d.rank("commit", "--job", "past-end", "--step", 1)
    # what is stored is exactly the declared bytes, nothing more
    want = bytes((i * 7 + 1) & 0xFF for i in range(size))
    listing = d.rank("list", "--job", "past-end", "--step", 1, "--rank", 0).stdout.split()
    check(listing == ["weights", str(size), "%08x" % crc32c(want)],
          "past-end shard listed as %s, want weights %d %08x" % (listing, size, crc32c(want)))
    path = os.path.join(d.state_dir, "jobs", "past-end", "%020d" % 1, "rank-0", "weights")
    with open(path, "rb") as f:
        check(f.read() == want, "past-end shard file holds other bytes than were put")
    log("shard past end: ok")

    # ---- torn shard: fails with EBADMSG and is never committed
    torn_job = "torn-job"
    d.rank("save", "--job", torn_job, "--step", 1, "--shards", "w:1048576", "--commit")
    p = d.rank("save", "--job", torn_job, "--step", 2, "--shards", "w:6291456", "--torn",
               check_rc=False)
    rank_error(p, "EBADMSG", -74, "torn", what="torn save")
    p = d.rank("commit", "--job", torn_job, "--step", 2, "--timeout", 5000, check_rc=False)
    rank_error(p, "EPROTO", -71, "cannot commit", what="commit of a torn step")
    out = d.rank("latest", "--job", torn_job).stdout.split()
    check(out == ["1", "1"], "after a torn save latest is %s, want step 1" % out)
    states = {c["step"]: c["state"] for c in ckpt_list(d, torn_job)}
    check(states.get(1) == "committed" and states.get(2) != "committed",
          "torn step shows as %s" % states)
    check(not os.path.exists(os.path.join(d.state_dir, "jobs", torn_job, "%020d" % 2,
                                          "COMMITTED")), "torn step has a COMMITTED file")
    d.rank("verify", "--job", torn_job, "--step", 1, "--shards", "w:1048576")
    log("torn: ok")

    # ---- wrong CRC, raw
    lines = raw(d, "wrong-crc", "crc-job", 1, 70000)
    expect_ok(lines, "CHUNK_PUT", what="wrong-crc put")
    # the finish only says every window was handed over; the daemon checks
    # the windows after it, and the commit is where the torn shard shows
    expect_ok(lines, "SAVE_FINISH", what="SAVE_FINISH after a wrong CRC")
    expect_error(lines, "EPROTO", -71, ["cannot commit", "torn", "weights"], label="COMMIT",
                 seq=False, what="COMMIT after a wrong CRC")
    p = d.rank("latest", "--job", "crc-job", check_rc=False)
    rank_error(p, "ENOENT", -2, what="latest of a job whose only save had a wrong CRC")
    log("wrong crc: ok")

    # ---- another uid
    shards = shards_arg([("s", 100000)])
    p = d.rank("save", "--job", BASE_JOB, "--step", 99, "--shards", shards, user=NOBODY,
               check_rc=False)
    rank_error(p, "EACCES", -13, BASE_JOB, what="nobody saving into root's job")
    p = d.rank("verify", "--job", BASE_JOB, "--step", BASE_STEP,
               "--shards", shards_arg(BASE_SHARDS), user=NOBODY, check_rc=False)
    rank_error(p, "EACCES", -13, BASE_JOB, what="nobody reading root's job")
    p = d.rank("read", "--job", BASE_JOB, "--step", BASE_STEP, "--shard", "model",
               "--offset", 0, "--length", 4096, user=NOBODY, check_rc=False)
    rank_error(p, "EACCES", -13, what="nobody reading a range of root's job")
    p = d.rank("latest", "--job", BASE_JOB, user=NOBODY, check_rc=False)
    rank_error(p, "EACCES", -13, what="nobody asking root's latest")
    p = d.rank("commit", "--job", BASE_JOB, "--step", BASE_STEP, user=NOBODY, check_rc=False)
    rank_error(p, "EACCES", -13, what="nobody committing root's step")
    # nobody's own job works, and root may read but not write it
    d.rank("save", "--job", "nobody-job", "--step", 5, "--shards", shards, "--commit",
           user=NOBODY)
    d.rank("verify", "--job", "nobody-job", "--step", 5, "--shards", shards, "--map")
    d.rank("verify", "--job", "nobody-job", "--step", 5, "--shards", shards, user=NOBODY)
    p = d.rank("save", "--job", "nobody-job", "--step", 6, "--shards", shards, check_rc=False)
    rank_error(p, "EACCES", -13, what="root writing nobody's job")
    out = d.rank("latest", "--job", "nobody-job").stdout.split()
    check(out == ["5", "1"], "nobody's latest is %s" % out)
    log("other uid: ok")

    # ---- descriptors sent by a client are closed unread
    for args in (["send-fd"], ["send-fd", "hello"], ["send-fd", "latest"]):
        lines = raw(d, *args)
        check("FD CLOSED" in lines, "%s: daemon kept a client's descriptor: %s" % (args, lines))
    lines = raw(d, "send-fd", "latest")
    expect_error(lines, "ENOENT", -2, "raw-job", what="LATEST with fds attached")

    # ---- after all of it
    check(d.alive(), "ckptd died")
    # disconnects are processed asynchronously: give them a moment
    deadline = time.monotonic() + 5
    while fd_count(d.proc.pid) > fds_before and time.monotonic() < deadline:
        time.sleep(0.1)
    fds_after = fd_count(d.proc.pid)
    check(fds_after <= fds_before, "ckptd holds %d fds, %d before the bad input"
          % (fds_after, fds_before))
    # every failed save's tmp dir is gone
    deadline = time.monotonic() + 5
    while True:
        leftovers = []
        for root, dirs, _ in os.walk(os.path.join(d.state_dir, "jobs")):
            leftovers += [os.path.join(root, x) for x in dirs if x.endswith(".tmp")]
        if not leftovers or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    check(not leftovers, "failed saves left tmp dirs: %s" % leftovers)
    d.rank("verify", "--job", BASE_JOB, "--step", BASE_STEP, "--shards", shards_arg(BASE_SHARDS),
           "--map")
    out = d.rank("latest", "--job", BASE_JOB).stdout.split()
    check(out == [str(BASE_STEP), "1"], "base latest is %s" % out)
    d.rank("save", "--job", BASE_JOB, "--step", BASE_STEP + 1, "--shards",
           shards_arg(BASE_SHARDS), "--zero-copy", "--commit")
    d.rank("verify", "--job", BASE_JOB, "--step", BASE_STEP + 1, "--shards",
           shards_arg(BASE_SHARDS))
    check(d.catalog_integrity() == "ok", "catalog integrity check failed")
    rc = d.stop()
    check(rc == 0, "ckptd exited %s on SIGTERM" % rc)
    check_log_clean(d)
    log("daemon survived everything; log clean")


run_test(main)
