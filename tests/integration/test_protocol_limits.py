# SPDX-License-Identifier: MIT
"""The daemon keeps every limit docs/protocol.md states, exactly as stated.

The limits table is read from docs/protocol.md ("## Limits"), so the page
is the source of truth: for each row a probe sends, through ckpt-rawclient
against a real ckptd, a request at the limit (served) and one past it
(refused with exactly the error the row names), using the values the row
gives.  A row this test has no probe for fails the test, so the table and
the test cannot drift apart.

Before the walk, the two reproductions of issue 9 item 6, with their exact
replies: an empty packet, in the middle of a save, is answered -EBADMSG (not
taken for a hang-up: the save goes on and commits the right bytes), and a
READ of 2^40 bytes is refused -EINVAL naming the slot size (not shortened
and served)."""
import errno
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import (Daemon, TestFailure, check, check_log_clean, ctl_json,  # noqa: E402
                     expect_error, expect_ok, log, raw, run_test, shards_arg, wire_name,
                     wire_packet)

SOURCE_ROOT = os.environ.get("CKPT_SOURCE_ROOT",
                             os.path.join(os.path.dirname(__file__), "..", ".."))
SLOT = 4 * 1024 * 1024
SAVE_ID = bytes.fromhex("a5a5a55a")  # placeholder ckpt-rawclient --save fills in
JOB = "lim"           # committed: rank 0, shard "w" of 9 MiB, 129 empty shards
BIG = 9 * 1024 * 1024 + 5
SEEN = []             # every reply line of the walk


# ---- the table ----------------------------------------------------------------

def limits_table():
    """Rows of the "## Limits" table of docs/protocol.md as dicts."""
    path = os.path.join(SOURCE_ROOT, "docs", "protocol.md")
    with open(path) as f:
        text = f.read()
    start = text.find("\n## Limits\n")
    check(start >= 0, "%s has no '## Limits' section" % path)
    section = text[start + 1:]
    end = section.find("\n## ", 1)
    section = section if end < 0 else section[:end]
    rows = []
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] in ("limit",) or set(cells[0]) <= set("- "):
            continue
        check(len(cells) == 4, "limits table row without 4 columns: %r" % line)
        rows.append({"limit": cells[0], "value": cells[1], "constant": cells[2],
                     "past": cells[3], "errnos": re.findall(r"`-(E[A-Z0-9]+)`", cells[3]),
                     "replies_only": "*replies only*" in cells[3]})
    check(rows, "the limits table of %s is empty" % path)
    return rows


def numbers(text):
    """The numbers a value cell gives, in order: 65536, 2^50, 2^63 − 1,
    1 048 576 (thousands separated by spaces), −4095."""
    out = []
    for m in re.finditer(r"([−-])?(2\^(\d+)(\s*[−-]\s*1)?|\d{1,3}(?: \d{3})+(?!\d)|\d+)", text):
        sign, body, exp, minus1 = m.groups()
        if exp:
            v = 2 ** int(exp) - (1 if minus1 else 0)
        else:
            v = int(body.replace(" ", ""))
        out.append(-v if sign else v)
    return out


# ---- packets ------------------------------------------------------------------

def pk(typ, body):
    return wire_packet(typ, body).hex().replace(SAVE_ID.hex(), "@SAVE@")


def p_status():
    return pk(15, b"")


def p_latest(job):
    return pk(10, wire_name(job) + struct.pack("<QI", 0, 0))


def p_save_begin(job, step, rank, world):
    return pk(2, wire_name(job) + struct.pack("<QII", step, rank, world))


def p_shard_begin(name, size):
    return pk(3, SAVE_ID + wire_name(name) + struct.pack("<Q", size))


def p_shard_list(job, step, rank, start):
    return pk(11, wire_name(job) + struct.pack("<QII", step, rank, start))


def p_read(job, step, rank, shard, offset, length):
    return pk(12, wire_name(job) + struct.pack("<QI", step, rank) + wire_name(shard) +
              struct.pack("<QQ", offset, length))


def p_fetch(job, step, which, index):
    return pk(18, wire_name(job) + struct.pack("<QBII", step, which, index, 0))


def p_commit_async(job, step, timeout_ms, version=4):
    return wire_packet(21, wire_name(job) + struct.pack("<QI", step, timeout_ms),
                       version=version).hex()


def p_list(typ, job, start):
    return pk(typ, wire_name(job) + struct.pack("<I", start))


def send(d, *packets, save=None):
    """The packets on one connection (after HELLO; with save, after a
    SAVE_BEGIN of that job whose id @SAVE@ becomes); returns the lines."""
    args = (["--save", save] if save else []) + ["send-hex"] + list(packets)
    lines = raw(d, *args)
    SEEN.extend(lines)
    return lines


def ok_line(lines, label, what):
    prefix = (label + " ") if label else ""
    got = [l for l in lines if l.startswith(prefix + "OK ")]
    check(got, "%s: expected %sOK, got %s" % (what, prefix, lines))
    return got[0]


def details(line):
    return dict(kv.split("=", 1) for kv in line.split()[2:] if "=" in kv)


def refused(lines, row, label, what, snippet=None, seq=True):
    """The reply is the error the row names (the first one if several)."""
    check(row["errnos"], "row %r names no error for a request past it" % row["limit"])
    ename = row["errnos"][0]
    return expect_error(lines, ename, -os_errno(ename), snippet, label=label, seq=seq, what=what)


def os_errno(name):
    return getattr(errno, name)


def not_refused_as(lines, label, ename, what):
    """A reply other than ERROR ename: the limit let the request through."""
    prefix = (label + " ") if label else ""
    line = [l for l in lines if l.startswith(prefix + "OK ") or l.startswith(prefix + "ERROR ")]
    check(line, "%s: no reply in %s" % (what, lines))
    check(not line[0].startswith(prefix + "ERROR %s " % ename),
          "%s: refused at the limit: %r" % (what, line[0]))
    return line[0]


# ---- probes, one per row ----------------------------------------------------------

def probe_message(d, row):
    limit = numbers(row["value"])[0]
    lines = raw(d, "oversize", limit)
    not_refused_as(lines, None, "EMSGSIZE", "a %d-byte packet" % limit)
    expect_error(lines, "EBADMSG", -74, "malformed", what="%d-byte STATUS with trailing bytes"
                 % limit)
    lines = raw(d, "oversize", limit + 1)
    refused(lines, row, None, "a %d-byte packet" % (limit + 1), [str(limit), str(limit + 1)])


def probe_header(d, row):
    size = numbers(row["value"])[0]
    lines = send(d, p_status())
    check(len(bytes.fromhex(p_status())) == size, "a STATUS request is not %d bytes" % size)
    ok_line(lines, None, "a %d-byte STATUS (header only)" % size)
    lines = raw(d, "truncated", "status", size - 1)
    refused(lines, row, None, "a %d-byte packet" % (size - 1), "malformed", seq=False)
    lines = raw(d, "empty")
    refused(lines, row, None, "an empty packet", ["malformed", "empty packet"])


def probe_name(d, row):
    lo, hi = numbers(row["value"])[:2]
    lines = send(d, p_latest("n" * hi), p_latest("n" * (hi + 1)), p_latest(""))
    expect_error(lines, "ENOENT", -2, "n" * hi, label="P1", what="LATEST of a %d-byte name" % hi)
    refused(lines, row, "P2", "LATEST of a %d-byte name" % (hi + 1), "invalid value")
    refused(lines, row, "P3", "LATEST of an empty name (%d below %d)" % (lo - 1, lo))
    lines = send(d, p_shard_begin("s" * hi, 10), p_shard_begin("s" * (hi + 1), 10), save="names")
    ok_line(lines, "P1", "SHARD_BEGIN of a %d-byte name" % hi)
    refused(lines, row, "P2", "SHARD_BEGIN of a %d-byte name" % (hi + 1))


def probe_text(d, row):
    limit = numbers(row["value"])[0]
    # a torn save of a 255-byte job with a 255-byte shard: the commit's
    # error names both and the reason, more than a text may hold
    job, shard = "t" * 255, "u" * 255
    p = d.rank("save", "--job", job, "--step", 3, "--shards", shard + ":6291456", "--torn",
               check_rc=False)
    check(p.returncode != 0, "the torn save of a long-named job succeeded")
    lines = send(d, pk(9, wire_name(job) + struct.pack("<QI", 3, 5000)))
    msg = expect_error(lines, "EPROTO", -71, "cannot commit", what="COMMIT of a torn step")
    check(len(msg.encode()) == limit,
          "an error message that would be longer is %d bytes, not cut to %d: %r"
          % (len(msg.encode()), limit, msg))
    st = ctl_json(d, "status")
    check(len(st["last_error"].encode()) == limit and job in st["last_error"],
          "STATUS last_error is %d bytes, want %d: %r" % (len(st["last_error"].encode()), limit,
                                                        st["last_error"]))


def probe_version(d, row):
    limit = numbers(row["value"])[0]
    v = ctl_json(d, "status")["version"]
    check(0 < len(v.encode()) <= limit, "daemon_version %r is not 1..%d bytes" % (v, limit))


def probe_errno(d, row):
    lo, hi = numbers(row["value"])[:2]
    codes = [int(re.match(r"^(?:\S+ )?ERROR \S+ (-?\d+)", l).group(1)) for l in SEEN
             if re.match(r"^(?:\S+ )?ERROR \S+ -?\d+", l)]
    check(codes, "no error replies seen to check")
    bad = [c for c in codes if not lo <= c <= hi]
    check(not bad, "error codes outside %d..%d: %s" % (lo, hi, bad))


def page_probe(d, row, typ, job, total_want, what):
    page = numbers(row["value"])[0]
    lines = send(d, p_list(typ, job, 0), p_list(typ, job, page), p_list(typ, job, total_want),
                 p_list(typ, job, total_want + 1000))
    first = details(ok_line(lines, "P1", what + " page 1"))
    total = int(first["total"])
    check(total == total_want and int(first["count"]) == page,
          "%s: first page holds %s of %s, want %d of %d" % (what, first["count"], first["total"],
                                                           page, total_want))
    second = details(ok_line(lines, "P2", what + " page 2"))
    check(int(second["count"]) == total - page, "%s: second page holds %s, want %d"
          % (what, second["count"], total - page))
    for label in ("P3", "P4"):
        empty = details(ok_line(lines, label, what + " past the end"))
        check(int(empty["count"]) == 0, "%s: a start at or past total gives %s entries"
              % (what, empty["count"]))


def probe_list_page(d, row):
    page = numbers(row["value"])[0]
    # 1 big shard + page empty ones in rank 0 of JOB step 1
    lines = send(d, p_shard_list(JOB, 1, 0, 0), p_shard_list(JOB, 1, 0, page),
                 p_shard_list(JOB, 1, 0, page + 1))
    first = details(ok_line(lines, "P1", "SHARD_LIST page 1"))
    check((first["total"], first["count"]) == (str(page + 1), str(page)),
          "SHARD_LIST of %d shards: first page %s" % (page + 1, first))
    check(details(ok_line(lines, "P2", "SHARD_LIST page 2"))["count"] == "1",
          "SHARD_LIST page 2: %s" % lines)
    check(details(ok_line(lines, "P3", "SHARD_LIST past the end"))["count"] == "0",
          "SHARD_LIST past the end: %s" % lines)
    lines = raw(d, "many-saves", "ck", 1, page + 1, "finish")
    check("SAVE OK x%d" % (page + 1) in lines, "saving %d steps: %s" % (page + 1, lines))
    page_probe(d, row, 17, "ck", page + 1, "CKPT_LIST of %d steps" % (page + 1))


def probe_job_page(d, row):
    page = numbers(row["value"])[0]
    before = len(ctl_json(d, "list"))
    lines = raw(d, "many-saves", "jp", 1, page + 1, "jobs")
    check("SAVE OK x%d" % (page + 1) in lines, "saving %d jobs: %s" % (page + 1, lines))
    page_probe(d, row, 16, "", before + page + 1, "JOB_LIST of %d jobs" % (before + page + 1))


def probe_world(d, row):
    lo, hi = numbers(row["value"])[:2]
    lines = send(d, p_save_begin("w1", 1, hi - 1, hi), p_save_begin("w2", 1, 0, hi + 1),
                 p_save_begin("w3", 1, 0, lo - 1))
    ok_line(lines, "P1", "SAVE_BEGIN of world size %d (rank %d)" % (hi, hi - 1))
    refused(lines, row, "P2", "SAVE_BEGIN of world size %d" % (hi + 1), "invalid value")
    refused(lines, row, "P3", "SAVE_BEGIN of world size %d" % (lo - 1), "invalid value")


def probe_rank(d, row):
    lo, hi = numbers(row["value"])[:2]
    lines = send(d, p_shard_list(JOB, 1, hi, 0), p_shard_list(JOB, 1, hi + 1, 0),
                 p_read(JOB, 1, hi + 1, "w", 0, 10), p_save_begin("r1", 1, 4, 4))
    expect_error(lines, "ENOENT", -2, label="P1", what="SHARD_LIST of rank %d" % hi)
    refused(lines, row, "P2", "SHARD_LIST of rank %d" % (hi + 1), "invalid value")
    refused(lines, row, "P3", "READ of rank %d" % (hi + 1), "invalid value")
    refused(lines, row, "P4", "SAVE_BEGIN of rank 4 of world size 4", "invalid value")
    check(lo == 0, "ranks start at %d" % lo)


def probe_step(d, row):
    nums = numbers(row["value"])
    hi, latest = nums[1], nums[2]
    lines = send(d, p_save_begin("s1", hi, 0, 1), p_save_begin("s2", hi + 1, 0, 1),
                 p_fetch(JOB, latest, 3, 0), p_fetch(JOB, latest - 1, 3, 0))
    ok_line(lines, "P1", "SAVE_BEGIN of step %d" % hi)
    refused(lines, row, "P2", "SAVE_BEGIN of step %d" % (hi + 1), "invalid value")
    # no object store here: a FETCH the decoder lets through gets EOPNOTSUPP
    expect_error(lines, "EOPNOTSUPP", -95, label="P3", what="FETCH of CKPT_STEP_LATEST")
    refused(lines, row, "P4", "FETCH of step %d" % (latest - 1), "invalid value")


def probe_commit_async_timeout(d, row):
    value = numbers(row["value"])[0]
    check(value == 0, "COMMIT_ASYNC's timeout_ms must be %d?" % value)
    # JOB's step 1 is committed: a request the decoder lets through is answered 0
    lines = send(d, p_commit_async(JOB, 1, 0), p_commit_async(JOB, 1, 1),
                 p_commit_async(JOB, 1, 0xffffffff), p_commit_async(JOB, 1, 0, version=3))
    ok_line(lines, "P1", "COMMIT_ASYNC with timeout_ms 0")
    refused(lines, row, "P2", "COMMIT_ASYNC with timeout_ms 1", "invalid value")
    refused(lines, row, "P3", "COMMIT_ASYNC with timeout_ms 2^32 - 1", "invalid value")
    # before version 4 the type does not exist: malformed, as any unknown type
    expect_error(lines, "EBADMSG", -74, "malformed", label="P4",
                 what="COMMIT_ASYNC in a version-3 header")


def probe_shard_size(d, row):
    limit = numbers(row["value"])[0]
    lines = send(d, p_shard_begin("a", limit), p_shard_begin("b", limit + 1), save="sizes")
    line = not_refused_as(lines, "P1", "EINVAL", "SHARD_BEGIN of %d bytes" % limit)
    # within the protocol's limit, the filesystem may still say no
    fs_errors = [e for e in row["errnos"][1:]]
    check(line.startswith("P1 OK ") or any(line.startswith("P1 ERROR %s " % e) for e in fs_errors),
          "SHARD_BEGIN of %d bytes: want OK or one of %s, got %r" % (limit, fs_errors, line))
    refused(lines, row, "P2", "SHARD_BEGIN of %d bytes" % (limit + 1), "invalid value")
    lines = send(d, p_read(JOB, 1, 0, "w", limit - 1, 1), p_read(JOB, 1, 0, "w", limit, 1))
    expect_error(lines, "ERANGE", -34, "beyond the end", label="P1",
                 what="READ ending at %d (past the shard, within the limit)" % limit)
    refused(lines, row, "P2", "READ ending at %d" % (limit + 1), "invalid value")
    # CHUNK_PUT: shard id, slot id, offset, length, crc32c (no such shard here)
    put = [pk(5, struct.pack("<IIQQI", 4242, 0, end - 1, 1, 0)) for end in (limit, limit + 1)]
    lines = send(d, *put)
    expect_error(lines, "ENOENT", -2, "no shard with id 4242", label="P1",
                 what="CHUNK_PUT ending at %d (the decoder lets it through)" % limit)
    refused(lines, row, "P2", "CHUNK_PUT ending at %d" % (limit + 1), "invalid value")


def probe_read_length(d, row):
    lo = numbers(row["value"])[0]
    lines = send(d, p_read(JOB, 1, 0, "w", 0, SLOT), p_read(JOB, 1, 0, "w", 0, SLOT + 1),
                 p_read(JOB, 1, 0, "w", 0, lo - 1))
    got = details(ok_line(lines, "P1", "READ of one slot (%d bytes)" % SLOT))
    check(got.get("length") == str(SLOT), "READ of %d bytes served %s" % (SLOT, got))
    refused(lines, row, "P2", "READ of %d bytes" % (SLOT + 1), str(SLOT))
    refused(lines, row, "P3", "READ of %d bytes" % (lo - 1), "invalid value")


def probe_saves_per_conn(d, row):
    limit = numbers(row["value"])[0]
    lines = raw(d, "many-saves", "open", 1, limit + 1, "open")
    check("SAVE OK x%d" % limit in lines, "unfinished saves: want %d, got %s" % (limit, lines))
    refused(lines, row, "SAVE_%d" % (limit + 1), "unfinished save %d" % (limit + 1), str(limit),
            seq=False)


def probe_reads_per_conn(d, row):
    limit = numbers(row["value"])[0]
    lines = send(d, *[p_read(JOB, 1, 0, "w", 0, 4096)] * (limit + 1))
    for i in range(1, limit + 1):
        ok_line(lines, "P%d" % i, "READ %d without READ_DONE" % i)
    refused(lines, row, "P%d" % (limit + 1), "READ %d without READ_DONE" % (limit + 1),
            str(limit))


def nofile(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise TestFailure("no open-file limit for pid %d" % pid)


# [daemon] open_files_per_uid's default (ckptd.conf(5)): the files the
# daemon holds for one uid's unfinished saves; root is not held to it
OPEN_FILES_PER_UID = 16384


def probe_shards_per_rank(d, row):
    limit = numbers(row["value"])[0]
    lines = raw(d, "many-shards", "manyshards", 1, limit + 1)
    fds = nofile(d.proc.pid)
    # a save holds its rank's three directories besides its shard files
    budget = OPEN_FILES_PER_UID - 3 if os.geteuid() != 0 else None
    if budget is not None and budget < limit and budget + 1024 < fds:
        # this uid's budget of open files comes first; the row says so
        check("open_files_per_uid" in row["limit"] + row["past"],
              "row %r does not name open_files_per_uid" % row["limit"])
        check("SHARD_BEGIN OK x%d" % budget in lines, "shards within uid %d's budget: want %d, "
              "got %s" % (os.geteuid(), budget, lines))
        expect_error(lines, "EMFILE", -24, "open_files_per_uid", label="SHARD_BEGIN_%d"
                     % (budget + 1), seq=False, what="shard %d past the budget" % (budget + 1))
        log("   (uid %d: refused at shard %d by [daemon] open_files_per_uid, as the row says)"
            % (os.geteuid(), budget + 1))
    elif fds > limit + 1024:
        check("SHARD_BEGIN OK x%d" % limit in lines, "shards in one rank: want %d, got %s"
              % (limit, lines))
        refused(lines, row, "SHARD_BEGIN_%d" % (limit + 1), "shard %d" % (limit + 1), str(limit),
                seq=False)
    else:
        # the daemon's RLIMIT_NOFILE comes first; the row says so
        check("EMFILE" in row["errnos"], "row %r does not name -EMFILE" % row["limit"])
        n = [int(l.split("x")[1]) for l in lines if l.startswith("SHARD_BEGIN OK x")]
        check(n and 0 < n[0] < fds, "shards before running out of %d fds: %s" % (fds, lines))
        label = "SHARD_BEGIN_%d" % (n[0] + 1)
        expect_error(lines, "EMFILE", -24, "Too many open files", label=label, seq=False,
                     what="shard %d with RLIMIT_NOFILE %d" % (n[0] + 1, fds))
        log("   (RLIMIT_NOFILE %d < %d: refused at shard %d with EMFILE, as the row says)"
            % (fds, limit, n[0] + 1))


PROBES = {
    "message, header included": probe_message,
    "header": probe_header,
    "job or shard name": probe_name,
    "error message, `state_dir`, `last_error`, `remote_target`, `remote_error`": probe_text,
    "version strings": probe_version,
    "error codes": probe_errno,
    "shard and checkpoint list page": probe_list_page,
    "job list page": probe_job_page,
    "world size": probe_world,
    "rank where no world size is given (`SHARD_LIST`, `READ`, `MAP`, `FETCH` of `RANK`, "
    "`LATEST_RANK`)": probe_rank,
    "step": probe_step,
    "shard size, and the end (offset + length) of a `CHUNK_PUT` or `READ`": probe_shard_size,
    "`READ` length": probe_read_length,
    "unfinished saves on one connection": probe_saves_per_conn,
    "`READ` windows lent to one connection (not yet `READ_DONE`)": probe_reads_per_conn,
    "shards in one rank": probe_shards_per_rank,
    "`COMMIT_ASYNC`'s `timeout_ms`": probe_commit_async_timeout,
}
LAST = ("error codes",)  # checks the replies the others collected


# ---- issue 9, item 6 --------------------------------------------------------------

def empty_packet(d):
    # alone: an error reply with seq 0, and the connection keeps serving
    lines = raw(d, "empty")
    msg = expect_error(lines, "EBADMSG", -74, ["malformed", "empty packet"], what="empty packet")
    log("empty packet: EBADMSG %r" % msg)
    # in the middle of a save: the save is untouched and commits its bytes
    size, step = 70000, 4
    lines = raw(d, "empty-mid-save", "emptyjob", step, size)
    for label in ("SAVE_BEGIN", "SHARD_BEGIN", "CHUNK_GET"):
        expect_ok(lines, label, what="empty-mid-save setup")
    expect_error(lines, "EBADMSG", -74, "empty packet", label="EMPTY",
                 what="an empty packet between CHUNK_GET and CHUNK_PUT")
    for label in ("CHUNK_PUT", "SAVE_FINISH", "COMMIT"):
        expect_ok(lines, label, what="the save after the empty packet")
    out = d.rank("latest", "--job", "emptyjob").stdout.split()
    check(out == [str(step), "1"], "after the empty packet latest is %s" % out)
    want = bytes((i * 7 + step) & 0xFF for i in range(size))
    path = os.path.join(d.state_dir, "jobs", "emptyjob", "%020d" % step, "rank-0", "weights")
    with open(path, "rb") as f:
        check(f.read() == want, "the shard saved across the empty packet holds other bytes")
    log("empty packet mid-save: the save committed the right bytes")


def read_2_40(d):
    lines = send(d, p_read(JOB, 1, 0, "w", 0, 1 << 40))
    msg = expect_error(lines, "EINVAL", -22, ["1099511627776", str(SLOT), "slot size"],
                       what="READ of 2^40 bytes")
    log("READ 2^40: EINVAL %r" % msg)


def main(tmp):
    rows = limits_table()
    unknown = [r["limit"] for r in rows if r["limit"] not in PROBES]
    check(not unknown, "docs/protocol.md names limits this test does not walk: %s" % unknown)
    gone = sorted(set(PROBES) - {r["limit"] for r in rows})
    check(not gone, "limits this test walks that docs/protocol.md no longer names: %s" % gone)

    d = Daemon(tmp, pool="64M", slot="4M").start()
    shards = [("w", BIG)] + [("e%03d" % i, 0) for i in range(128)]
    d.rank("save", "--job", JOB, "--step", 1, "--shards", shards_arg(shards), "--commit")

    empty_packet(d)
    read_2_40(d)

    for row in sorted(rows, key=lambda r: r["limit"] in LAST):
        log("limit: %s = %s -> %s" % (row["limit"], row["value"],
                                       ", ".join(row["errnos"]) or "replies only"))
        PROBES[row["limit"]](d, row)

    check(d.alive(), "ckptd died")
    d.rank("verify", "--job", JOB, "--step", 1, "--shards", shards_arg(shards))
    rc = d.stop()
    check(rc == 0, "ckptd exited %s on SIGTERM" % rc)
    check_log_clean(d)
    log("%d limits walked" % len(rows))


run_test(main)
