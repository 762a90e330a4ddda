#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Structured journal fields (issue 14): under journald ckptd sends its
records in the journal's native protocol, with CKPT_JOB=, CKPT_STEP=,
CKPT_RANK=, CKPT_NODE= and a MESSAGE_ID= per kind of event, so that
`journalctl CKPT_JOB=llama` finds a job's records; anywhere else the
stderr lines are what they always were.

No journald runs here, so the test is the journal: it binds an AF_UNIX
datagram socket of its own, and the daemon runs in a new mount namespace
(unshare -m) where a tmpfs over /run/systemd holds journal/socket, a
symlink to it (libsystemd 252 has no variable to redirect
sd_journal_send(): the path is fixed).  The daemon's stderr is a file
whose dev:ino the test puts in JOURNAL_STREAM — the way systemd tells a
service that stderr is the journal — so the detection itself is tested.
The socket's datagrams are parsed as journald would (KEY=value lines, the
binary-length form KEY\\n<le64><data>\\n, and a sealed memfd passed with
SCM_RIGHTS for a record too big for one datagram).

Cases: CKPT_JOURNAL_CASES=1,4.  Skips (77) when unshare -m is not allowed
(not root) or /run/systemd does not exist.
"""
import array
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (CKPTD, TESTRANK, Daemon, SkipTest, check, cluster_flags,  # noqa: E402
                     free_ports, log, run_cases, save_node, wait_until, write_psk)

SOURCE_ROOT = os.environ.get("CKPT_SOURCE_ROOT") or os.path.dirname(os.path.dirname(HERE))
JOB = "llama"
MiB = 1024 * 1024


def message_ids():
    """{event name: id} from daemon/util/msgid.h, the one list of them."""
    with open(os.path.join(SOURCE_ROOT, "daemon", "util", "msgid.h")) as f:
        ids = dict(re.findall(r'#define LOG_ID_(\w+)\s+"([0-9a-f]{32})"', f.read()))
    check(len(ids) == 12 and len(set(ids.values())) == 12,
          "msgid.h: want 12 distinct MESSAGE_IDs, found %s" % ids)
    return ids


def parse_native(data):
    """One journal native-protocol entry -> {field: str}."""
    rec, i = {}, 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            i = nl + 1
        else:  # KEY\n, little-endian u64 length, the bytes, \n
            k = line
            (n,) = struct.unpack("<Q", data[nl + 1:nl + 9])
            v = data[nl + 9:nl + 9 + n]
            check(data[nl + 9 + n:nl + 10 + n] == b"\n",
                  "binary field %r is not followed by a newline" % k)
            i = nl + 10 + n
        rec[k.decode()] = v.decode(errors="replace")
    return rec


class Journal:
    """The test's journal: a datagram socket and a thread collecting what
    arrives on it."""

    def __init__(self, path):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.records = []
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        fds = array.array("i")
        while not self.stopping:
            try:
                data, anc, _, _ = self.sock.recvmsg(1 << 20, socket.CMSG_SPACE(4 * fds.itemsize))
            except socket.timeout:
                continue
            except OSError:
                return
            for level, typ, cdata in anc:
                if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                    fd = struct.unpack("i", cdata[:4])[0]
                    try:
                        data = os.pread(fd, os.fstat(fd).st_size, 0)
                    finally:
                        os.close(fd)
            with self.lock:
                self.records.append(parse_native(data))

    def find(self, **fields):
        with self.lock:
            return [r for r in self.records
                    if all(r.get(k) == str(v) for k, v in fields.items())]

    def close(self):
        self.stopping = True
        self.thread.join(5)
        self.sock.close()


class JournalDaemon(Daemon):
    """A ckptd in its own mount namespace whose /run/systemd/journal/socket
    is the test's socket, stderr "the journal's stream"."""

    def __init__(self, tmp, journal_path, **kw):
        super().__init__(tmp, **kw)
        self.journal_path = journal_path

    def args(self):
        script = ("mount -t tmpfs -o mode=0755 tmpfs /run/systemd && "
                  "mkdir /run/systemd/journal && ln -s \"$0\" /run/systemd/journal/socket && "
                  "exec \"$@\"")
        return ["unshare", "-m", "--propagation", "private", "sh", "-c", script,
                self.journal_path] + super().args()

    def start(self, wait=True, timeout=30):
        # the file stderr will be, and its dev:ino in JOURNAL_STREAM
        with open(self.log_path, "a"):
            pass
        st = os.stat(self.log_path)
        self.env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
        return super().start(wait, timeout)


def need_namespace(tmp):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        raise SkipTest("a mount namespace needs root and unshare(1)")
    if not os.path.isdir("/run/systemd"):
        raise SkipTest("/run/systemd does not exist to mount the test's journal socket under")
    r = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c",
                        "mount -t tmpfs tmpfs /run/systemd"], capture_output=True, text=True)
    if r.returncode != 0:
        raise SkipTest("unshare -m with a tmpfs mount is not allowed here: %s" % r.stderr.strip())


def case_journal_fields(ctx):
    need_namespace(ctx.tmp)
    ids = message_ids()
    jr = Journal(os.path.join(ctx.tmp, "journal.sock"))
    ctx.cleanups.append(jr.close)
    # the parser's memfd path (libsystemd's form of a record too big for a
    # datagram), with a binary field in it
    fd = os.memfd_create("journal-entry", os.MFD_ALLOW_SEALING)
    os.write(fd, b"MESSAGE\n" + struct.pack("<Q", 7) + b"two\nway\nPROBE=memfd\n")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as c:
        c.sendmsg([], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))], 0,
                  jr.path)
    os.close(fd)
    probe = wait_until(lambda: jr.find(PROBE="memfd"), 5, what="the memfd probe")[0]
    check(probe["MESSAGE"] == "two\nway", "memfd record parsed as %s" % probe)
    d = JournalDaemon(ctx.tmp, jr.path, pool="64M", slot="1M",
                      extra=["--cluster-node-index=0"]).start()
    ctx.daemons.append(d)
    started = wait_until(lambda: jr.find(MESSAGE_ID=ids["DAEMON_START"]), 10,
                         what="the daemon's start record")[0]
    check(started.get("PRIORITY") == "6" and started.get("CKPT_NODE") == "0"
          and started.get("SYSLOG_IDENTIFIER") == "ckptd"
          and started.get("MESSAGE", "").startswith("ckptd ready: state "),
          "start record: %s" % started)
    check("CODE_FILE" in started and started["CODE_FILE"].endswith("daemon.c"),
          "CODE_FILE names log.c, not the caller: %s" % started.get("CODE_FILE"))

    for rank in (0, 1):
        d.rank("save", "--job", JOB, "--step", 3, "--rank", rank, "--world", 2,
               "--shards", "w:%d,b:4099" % (2 * MiB + 5))
    d.rank("commit", "--job", JOB, "--step", 3)
    # a save that fails: a torn shard (EBADMSG)
    p = d.rank("save", "--job", JOB, "--step", 4, "--rank", 1, "--world", 2,
               "--shards", "w:%d" % (3 * MiB), "--torn", check_rc=False)
    check(p.returncode != 0, "the torn save succeeded")

    committed = wait_until(lambda: jr.find(MESSAGE_ID=ids["STEP_COMMITTED"]), 10,
                           what="the commit record")
    check(len(committed) == 1, "%d commit records, want 1" % len(committed))
    c = committed[0]
    check(c.get("CKPT_JOB") == JOB and c.get("CKPT_STEP") == "3" and "CKPT_RANK" not in c
          and c.get("PRIORITY") == "6" and c.get("CKPT_NODE") == "0"
          and c.get("MESSAGE") == "job llama step 3: committed (2 ranks)",
          "commit record: %s" % c)
    for rank in (0, 1):
        saved = jr.find(MESSAGE_ID=ids["RANK_SAVED"], CKPT_RANK=rank)
        check(len(saved) == 1, "rank %d: %d 'rank saved' records, want 1" % (rank, len(saved)))
        s = saved[0]
        check(s.get("CKPT_JOB") == JOB and s.get("CKPT_STEP") == "3" and s.get("PRIORITY") == "6"
              and s.get("MESSAGE", "").startswith("job llama step 3 rank %d: on local disk"
                                                  % rank), "rank %d record: %s" % (rank, s))
    failed = wait_until(lambda: jr.find(MESSAGE_ID=ids["SAVE_FAILED"]), 10,
                        what="the 'save failed' record")
    f = failed[0]
    check(f.get("CKPT_JOB") == JOB and f.get("CKPT_STEP") == "4" and f.get("CKPT_RANK") == "1"
          and f.get("PRIORITY") == "3" and "save failed" in f.get("MESSAGE", ""),
          "save-failed record: %s" % f)
    # what journalctl CKPT_JOB=llama shows: every record of the job, and
    # only those carry it
    of_job = jr.find(CKPT_JOB=JOB)
    check(all(r.get("MESSAGE", "").find(JOB) >= 0 for r in of_job) and len(of_job) >= 4,
          "records of the job: %s" % of_job)
    log("   %d records, %d of job %s" % (len(jr.records), len(of_job), JOB))

    check(d.stop() == 0, "unclean exit")
    stop = wait_until(lambda: jr.find(MESSAGE_ID=ids["DAEMON_STOP"]), 5, what="the stop record")
    check(stop[0].get("PRIORITY") == "6", "stop record: %s" % stop[0])
    # the records went to the journal, not also to stderr
    text = d.read_log()
    check("committed (2 ranks)" not in text and "ckptd ready" not in text,
          "records also written to stderr:\n" + text[-2000:])


def case_stderr_unchanged(ctx):
    """Not under journald (no JOURNAL_STREAM, or one naming another file):
    lines on stderr, timestamp, pid, level, the same text."""
    other = os.path.join(ctx.tmp, "elsewhere")
    open(other, "w").close()
    st = os.stat(other)
    for name, env in (("plain", {}), ("inherited", {"JOURNAL_STREAM": "%d:%d"
                                                    % (st.st_dev, st.st_ino)})):
        d = Daemon(ctx.tmp, name=name, pool="64M", slot="1M", env=env)
        if not env:
            d.env.pop("JOURNAL_STREAM", None)
        d.start()
        ctx.daemons.append(d)
        d.rank("save", "--job", JOB, "--step", 1, "--shards", "w:4096", "--commit")
        check(d.stop() == 0, "unclean exit")
        lines = d.read_log().splitlines()
        pat = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} ckptd\[%d\]: (\w+): (.*)$"
                         % d.proc.pid)
        bad = [ln for ln in lines if not pat.match(ln)]
        check(not bad, "%s: lines not in the stderr format: %s" % (name, bad[:3]))
        msgs = [pat.match(ln).groups() for ln in lines]
        for want in (("info", "job llama step 1: committed (1 ranks)"),
                     ("info", "all acknowledged saves are on disk; exiting")):
            check(want in msgs, "%s: no line %s: %s" % (name, want, msgs[-10:]))
        check(any(lv == "info" and m.startswith("job llama step 1 rank 0: on local disk")
                  for lv, m in msgs), "%s: no 'rank saved' line" % name)
        log("   %s: %d lines in the stderr format" % (name, len(lines)))


def case_peer_events(ctx):
    """Two replicating nodes on the loopback, one journal: peer up, a step
    sent and received (CKPT_PEER= the other node, CKPT_NODE= the one
    speaking), peer down."""
    need_namespace(ctx.tmp)
    ids = message_ids()
    jr = Journal(os.path.join(ctx.tmp, "journal.sock"))
    ctx.cleanups.append(jr.close)
    peers = ",".join("127.0.0.1:%d" % p for p in free_ports(2))
    psk = write_psk(os.path.join(ctx.tmp, "psk"))
    nodes = []
    for i in range(2):
        d = JournalDaemon(ctx.tmp, jr.path, name="n%d" % i, pool="64M", slot="4M",
                          extra=cluster_flags(peers, 2, i, 2, psk))
        d.start(wait=False)
        ctx.daemons.append(d)
        nodes.append(d)
    for d in nodes:
        d.wait_ready(60)
    for i in range(2):
        wait_until(lambda i=i: jr.find(MESSAGE_ID=ids["PEER_UP"], CKPT_NODE=i,
                                       CKPT_PEER=1 - i), 30,
                   what="node %d's peer-up record for node %d" % (i, 1 - i))
    layouts = {0: [("w", MiB + 1)], 1: [("w", MiB + 2)]}
    save_node(nodes[1], JOB, 2, [1], 2, layouts, commit=False)
    save_node(nodes[0], JOB, 2, [0], 2, layouts)
    for i in range(2):
        sent = wait_until(lambda i=i: jr.find(MESSAGE_ID=ids["REPL_SENT"], CKPT_NODE=i), 60,
                          what="node %d's replication-sent record" % i)[0]
        check(sent.get("CKPT_PEER") == str(1 - i) and sent.get("CKPT_JOB") == JOB
              and sent.get("CKPT_STEP") == "2" and "CKPT_RANK" not in sent,
              "node %d sent: %s" % (i, sent))
        got = wait_until(lambda i=i: jr.find(MESSAGE_ID=ids["REPL_RECEIVED"], CKPT_NODE=i), 10,
                         what="node %d's replication-received record" % i)[0]
        check(got.get("CKPT_PEER") == str(1 - i) and got.get("CKPT_RANK") == str(1 - i)
              and got.get("CKPT_JOB") == JOB and got.get("CKPT_STEP") == "2",
              "node %d received: %s" % (i, got))
    nodes[1].kill()
    down = wait_until(lambda: jr.find(MESSAGE_ID=ids["PEER_DOWN"], CKPT_NODE=0, CKPT_PEER=1),
                      30, what="node 0's peer-down record")[0]
    check(down.get("PRIORITY") == "4", "peer-down record: %s" % down)
    log("   peer down: %s" % down.get("MESSAGE"))
    check(nodes[0].stop() == 0, "unclean exit")


def case_docs_list_ids(ctx):
    """docs/ckptd.8 lists every MESSAGE_ID."""
    with open(os.path.join(SOURCE_ROOT, "docs", "ckptd.8")) as f:
        man = f.read()
    missing = [k for k, v in message_ids().items() if v not in man]
    check(not missing, "docs/ckptd.8 does not list the MESSAGE_IDs of %s" % missing)


CASES = [
    (1, "native journal records carry the job, step, rank, node and MESSAGE_ID",
     case_journal_fields),
    (2, "not under journald, stderr lines are unchanged", case_stderr_unchanged),
    (3, "ckptd(8) lists every MESSAGE_ID", case_docs_list_ids),
    (4, "peer events carry CKPT_PEER= and CKPT_NODE=", case_peer_events),
]


if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_JOURNAL_CASES", "ckptd-journal-", (CKPTD, TESTRANK)))
