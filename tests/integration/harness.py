# SPDX-License-Identifier: MIT
"""Shared helpers for ckptd integration tests.

Every test starts a real ckptd (the binary meson built, $CKPTD) on a fresh
temporary state directory and socket, and drives it with real clients:
ckpt-testrank ($CKPT_TESTRANK, the public libckpt API), ckpt-rawclient
($CKPT_RAWCLIENT, raw protocol) and ckptctl ($CKPTCTL).

Exit codes follow meson: 0 pass, 1 fail, 77 skip.
"""
import os
import random
import re
import resource
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback

SKIP = 77

CKPTD = os.environ.get("CKPTD", "build/daemon/ckptd")
CKPTCTL = os.environ.get("CKPTCTL", "build/daemon/ckptctl")
TESTRANK = os.environ.get("CKPT_TESTRANK", "build/tests/ckpt-testrank")
RAWCLIENT = os.environ.get("CKPT_RAWCLIENT", "build/tests/ckpt-rawclient")


class TestFailure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise TestFailure(msg)


def log(msg):
    print(msg, flush=True)


class Daemon:
    """A ckptd process on its own state dir and socket."""

    def __init__(self, tmp, name="ckptd", state_dir=None, pool="256M", slot="16M",
                 extra=None, env=None, nofile=None):
        self.tmp = tmp
        self.state_dir = state_dir or os.path.join(tmp, name + "-state")
        self.socket = os.path.join(tmp, name + ".sock")
        self.log_path = os.path.join(tmp, name + ".log")
        self.pool = pool
        self.slot = slot
        self.extra = list(extra or [])
        self.env = dict(os.environ)
        self.env.pop("NOTIFY_SOCKET", None)
        self.env.pop("LISTEN_FDS", None)
        self.env.pop("LISTEN_PID", None)
        if env:
            self.env.update(env)
        self.nofile = nofile  # RLIMIT_NOFILE (soft and hard) for the daemon, None: inherited
        self.proc = None

    def args(self):
        return [CKPTD, "--state-dir", self.state_dir, "--socket", self.socket,
                "--pool-size", self.pool, "--pool-slot-size", self.slot,
                "--log-level", "debug"] + self.extra

    def start(self, wait=True, timeout=30):
        self.logf = open(self.log_path, "a")
        preexec = None
        if self.nofile is not None:
            def preexec(n=self.nofile):
                resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
        self.proc = subprocess.Popen(self.args(), stdout=self.logf, stderr=subprocess.STDOUT,
                                     env=self.env, preexec_fn=preexec)
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise TestFailure("ckptd exited with %s during start:\n%s"
                                  % (self.proc.returncode, self.read_log()[-3000:]))
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.connect(self.socket)
                s.close()
                return
            except OSError:
                time.sleep(0.02)
        raise TestFailure("ckptd did not start listening within %ss" % timeout)

    def read_log(self):
        try:
            with open(self.log_path) as f:
                return f.read()
        except OSError:
            return ""

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        if self.proc:
            self.logf.close()
        return self.proc.returncode if self.proc else None

    def stop(self, timeout=60):
        """SIGTERM: drain and exit; returns the exit status."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise TestFailure("ckptd did not exit within %ss of SIGTERM" % timeout)
            self.logf.close()
        return self.proc.returncode

    def cpu_seconds(self):
        """utime + stime of the daemon so far (/proc/PID/stat), in seconds."""
        with open("/proc/%d/stat" % self.proc.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def log_size(self):
        try:
            return os.path.getsize(self.log_path)
        except OSError:
            return 0

    def open_fds(self):
        """File descriptors the daemon holds now."""
        return len(os.listdir("/proc/%d/fd" % self.proc.pid))

    def sanitizer_report(self):
        """The first ASan/UBSan/LSan report in the daemon's log (they land
        there as they happen), with some context, or None."""
        text = self.read_log()
        for pat in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
            at = text.find(pat)
            if at >= 0:
                return text[max(0, at - 200):][:3000]
        return None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def client_env(self, extra=None):
        env = dict(os.environ)
        env["CKPT_SOCKET"] = self.socket
        if extra:
            env.update(extra)
        return env

    def rank(self, *args, check_rc=True, timeout=600, env=None, user=None):
        """Run ckpt-testrank; returns CompletedProcess."""
        cmd = [TESTRANK] + [str(a) for a in args]
        kw = {}
        if user is not None:
            kw["user"] = user
        p = subprocess.run(cmd, env=self.client_env(env), capture_output=True, text=True,
                           timeout=timeout, **kw)
        if check_rc and p.returncode != 0:
            raise TestFailure("%s failed (%d):\n%s%s\n--- daemon log tail ---\n%s"
                              % (" ".join(cmd), p.returncode, p.stdout, p.stderr,
                                 self.read_log()[-3000:]))
        return p

    def rank_async(self, *args, env=None):
        cmd = [TESTRANK] + [str(a) for a in args]
        return subprocess.Popen(cmd, env=self.client_env(env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def raw_async(self, *args, user=None):
        """Start ckpt-rawclient ARGS (as uid user, with its primary group and no
        others, when given: only root can do that); stdin and stdout are pipes
        of lines."""
        cmd = as_user(user) + [RAWCLIENT, "--socket", self.socket] + [str(a) for a in args]
        return subprocess.Popen(cmd, env=self.client_env(), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ctl(self, *args, check_rc=True, user=None):
        """Run ckptctl; with user (a uid), as that uid, its gid and no
        supplementary groups (setpriv), the way another user would."""
        cmd = as_user(user) + [CKPTCTL, "--socket", self.socket] + [str(a) for a in args]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if check_rc and p.returncode != 0:
            raise TestFailure("%s failed (%d): %s%s" % (" ".join(cmd), p.returncode, p.stdout,
                                                         p.stderr))
        return p

    def catalog_integrity(self):
        db = sqlite3.connect(os.path.join(self.state_dir, "catalog.db"))
        try:
            return db.execute("PRAGMA integrity_check").fetchone()[0]
        finally:
            db.close()


def check_log_clean(d):
    """ASan/UBSan errors land in the daemon's log as they happen (leaks at
    a clean exit): a test that ran the daemon fails on any."""
    rep = d.sanitizer_report()
    check(rep is None, "%s (node %s) has a sanitizer report:\n%s"
          % (d.log_path, getattr(d, "node", "?"), rep))


def log_lines(d, pattern):
    """The lines of daemon d's log that match the regular expression pattern."""
    return [ln for ln in d.read_log().splitlines() if re.search(pattern, ln)]


def read_until(proc, prefix, what, timeout=30.0):
    """Lines of proc's stdout up to and including the first one starting
    with prefix (which is returned last)."""
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if line.startswith(prefix):
            return lines
    proc.kill()
    out, err = proc.communicate()
    raise TestFailure("%s: no '%s' line; got %r %s %s" % (what, prefix, lines, out, err))


def as_user(uid):
    """The command prefix that runs a command as uid (root only), or []."""
    if uid is None:
        return []
    return ["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups"]


def _ephemeral_range():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
            return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_ports(n):
    """n distinct TCP ports free right now on every address, chosen below
    the kernel's ephemeral range: a port from the ephemeral range can be
    taken, between this call and the daemon's bind, as the source port of
    some client's connection (a test's own attack sockets, say), and the
    daemon's listen then fails with EADDRINUSE."""
    lo, _ = _ephemeral_range()
    top = lo - 1 if lo > 12000 else 65535
    bottom = 10000 if lo > 12000 else 61000
    rnd = random.Random()
    socks, ports = [], []
    try:
        for _ in range(2000):
            if len(ports) == n:
                return ports
            port = rnd.randint(bottom, top)
            if port in ports:
                continue
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(port)
        raise TestFailure("no %d free TCP ports in %d..%d" % (n, bottom, top))
    finally:
        for s in socks:
            s.close()


def write_psk(path, key=None):
    with open(path, "w") as f:
        f.write((key or secrets.token_hex(32)) + "\n")
    os.chmod(path, 0o600)
    return path


def cluster_flags(peers, count, index, factor, psk, jump=1):
    """The [cluster] flags of node index of a cluster on the loopback;
    peers is the "host:port,..." list."""
    return ["--cluster-node-count=%d" % count, "--cluster-node-index=%d" % index,
            "--cluster-peers=" + peers,
            "--cluster-replication-factor=%d" % factor,
            "--cluster-replication-jump=%d" % jump,
            "--cluster-psk-file=" + psk]


def shards_arg(spec):
    """[(name, size), ...] -> 'name:size,...'"""
    return ",".join("%s:%d" % (n, s) for n, s in spec)


def run_test(fn):
    """Run fn(tmpdir) with the meson exit-code convention."""
    tmp = tempfile.mkdtemp(prefix="ckptd-test-")
    rc = 0
    try:
        fn(tmp)
        log("PASS")
    except TestFailure as e:
        log("FAIL: %s" % e)
        rc = 1
    except SkipTest as e:
        log("SKIP: %s" % e)
        rc = SKIP
    finally:
        # kill any ckptd left behind by this test
        subprocess.run(["pkill", "-KILL", "-f", "--", "--state-dir " + tmp], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(rc)


class SkipTest(Exception):
    pass


# ---- helpers added for multi-job / retention / ckptctl / crash / systemd tests ----

def wait_until(pred, timeout=5.0, interval=0.02, what="condition"):
    """Poll pred() until it returns a true value (returned) or fail after timeout.
    what may be a callable, called only on failure (to describe the final state)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise TestFailure("timed out after %.1fs waiting for %s"
                              % (timeout, what() if callable(what) else what))
        time.sleep(interval)


def save_node(d, job, step, ranks, world, layouts, seed=0, commit=True):
    """The ranks of one node (daemon d) save in parallel, each its shards
    layouts[rank] (odd ranks zero-copy), then its trainer commits."""
    procs = []
    for r in ranks:
        args = ["save", "--job", job, "--step", step, "--rank", r, "--world", world,
                "--shards", shards_arg(layouts[r]), "--seed", seed]
        if r % 2:
            args.append("--zero-copy")
        procs.append((r, d.rank_async(*args)))
    for r, p in procs:
        out, err = p.communicate(timeout=600)
        node = "node %d " % d.node if hasattr(d, "node") else ""
        check(p.returncode == 0, "%srank %d save of step %d failed (%d): %s\n"
              "--- daemon log ---\n%s" % (node, r, step, p.returncode, err,
                                          d.read_log()[-3000:]))
    if commit:
        d.rank("commit", "--job", job, "--step", step)


def step_dirs(state_dir, job):
    """Steps that have a directory under state_dir/jobs/<job>/, ascending."""
    path = os.path.join(state_dir, "jobs", job)
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit() and len(n) == 20)


def flip_byte(path, offset):
    """Corrupt one byte of a file on disk (XOR 0x5a), durably: the fault a
    test injects into a copy."""
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5a]))
        f.flush()
        os.fsync(f.fileno())


def step_path(state_dir, job, step):
    return os.path.join(state_dir, "jobs", job, "%020d" % step)


def ctl_json(d, *args):
    """ckptctl --json ARGS against daemon d, parsed."""
    import json
    p = d.ctl("--json", *args)
    try:
        return json.loads(p.stdout)
    except ValueError as e:
        raise TestFailure("ckptctl --json %s printed invalid JSON (%s): %r"
                          % (" ".join(map(str, args)), e, p.stdout))


def pool_at_rest(st):
    """Nothing holds pool memory in `ckptctl --json status` st but the memory
    tier (the newest committed steps it keeps, [pool] memory_tier): no window
    or read leaked.  Returns the bytes the tier holds."""
    pool, memory = st["pool"], st["memory"]
    check(pool["used_bytes"] == memory["bytes"] and pool["waiters"] == 0,
          "pool not at rest: %s bytes used, %s of them the memory tier's (%s)"
          % (pool["used_bytes"], memory["bytes"], st))
    return memory["bytes"]


# ---- raw protocol (ckpt-rawclient) ------------------------------------------------

CKPT_PROTO_MAGIC = 0x54504B43
CKPT_PROTO_VERSION = 2


def wire_name(s):
    """A name as the protocol carries it: u16 byte count, the bytes."""
    import struct
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<H", len(b)) + b


def wire_packet(typ, body, seq=0x5e97a11, version=CKPT_PROTO_VERSION):
    """A request packet encoded here, by hand (docs/protocol.md), so values
    libckpt refuses to send reach the daemon's own checks.  version: the
    header's (2 by default; COMMIT_ASYNC needs 4)."""
    import struct
    return struct.pack("<IHHII", CKPT_PROTO_MAGIC, version, typ, 16 + len(body),
                       seq) + body


def raw(d, *args, ping=True):
    """Run ckpt-rawclient; returns its output lines."""
    cmd = [RAWCLIENT, "--socket", d.socket] + (["--then-ping"] if ping else []) + \
        [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise TestFailure("%s exited %d: %s%s" % (" ".join(cmd)[:300], p.returncode, p.stdout,
                                                   p.stderr))
    lines = p.stdout.splitlines()
    if ping:
        # the daemon answers STATUS on the very connection that sent the bad
        # packet: it neither hung nor dropped it
        check(lines and lines[-1].startswith("PING OK"),
              "%s: daemon did not answer STATUS afterwards on the same connection: %s"
              % (" ".join(cmd)[:300], lines))
        lines = lines[:-1]
    return lines


def expect_error(lines, ename, code, snippet=None, label=None, seq=True, what=""):
    """The reply line (optionally the one with LABEL) is ERROR ename code."""
    prefix = (label + " ") if label else ""
    match = [i for i, l in enumerate(lines) if l.startswith(prefix + "ERROR ") or
             l.startswith(prefix + "OK ") or l.startswith(prefix + "CLOSED") or
             l.startswith(prefix + "TIMEOUT") or l.startswith(prefix + "BADREPLY") or
             l.startswith("SENDFAIL")]
    check(match, "%s: no reply%s in %s" % (what, " to " + label if label else "", lines))
    i = match[0]
    line = lines[i]
    want = "%sERROR %s %d " % (prefix, ename, code)
    check(line.startswith(want), "%s: expected %s..., got %r" % (what, want, line))
    msg = line[len(want):]
    check(len(msg) >= 10, "%s: error message too terse: %r" % (what, msg))
    if snippet:
        for s in ([snippet] if isinstance(snippet, str) else snippet):
            check(s in msg, "%s: message %r does not mention %r" % (what, msg, s))
    if seq:
        check(i + 1 < len(lines) and lines[i + 1] == "SEQ OK",
              "%s: error reply did not echo the request's seq: %s" % (what, lines))
    return msg


def expect_ok(lines, label=None, what=""):
    prefix = (label + " ") if label else ""
    check(any(l.startswith(prefix + "OK ") for l in lines),
          "%s: expected %sOK, got %s" % (what, prefix, lines))


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C_TABLE = _crc32c_table()


def crc32c(data):
    """CRC32C (Castagnoli) of bytes, as the daemon's manifests carry it."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---- numbered cases, each in its own directory (replication, fallback) ----------


class CaseCtx:
    """What one case of run_cases() started: its daemons (killed after
    the case) and cleanups (run after them, last added first)."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.daemons = []
        self.cleanups = []

    def cleanup(self):
        for d in self.daemons:
            if d.alive():
                d.kill()
        for fn in reversed(self.cleanups):
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - cleanup goes on
                log("   cleanup: %s" % e)
        self.daemons, self.cleanups = [], []


def show_daemon_logs(ctx, lines=40):
    """The last lines above debug level of each daemon's log: CI keeps only
    what the test prints, not the directory left for inspection."""
    for d in ctx.daemons:
        try:
            with open(d.log_path, errors="replace") as f:
                got = [ln.rstrip("\n") for ln in f if ": debug: " not in ln]
        except OSError as e:
            log("   (no log at %s: %s)" % (d.log_path, e))
            continue
        log("   --- last %d lines of %s (debug lines left out)" % (lines, d.log_path))
        for ln in got[-lines:]:
            log("   | " + ln)


def run_cases(cases, env_var, prefix, exes=(CKPTD, TESTRANK)):
    """Run the numbered cases (those in $env_var, comma-separated, if set),
    each in its own CaseCtx; exit status for the suite."""
    for exe in exes:
        if not os.access(exe, os.X_OK):
            log("FAIL: %s is not an executable" % exe)
            return 1
    wanted = os.environ.get(env_var)
    wanted = {int(x) for x in wanted.split(",")} if wanted else None
    tmp = tempfile.mkdtemp(prefix=prefix)
    failures, skipped = [], []
    t_all = time.monotonic()
    for num, title, fn in cases:
        if wanted and num not in wanted:
            continue
        log("== case %d: %s" % (num, title))
        ctx = CaseCtx(os.path.join(tmp, "c%d" % num))
        os.mkdir(ctx.tmp)
        t1 = time.monotonic()
        try:
            fn(ctx)
            log("   ok (%.1f s)" % (time.monotonic() - t1))
        except SkipTest as e:
            log("   skipped: %s" % e)
            skipped.append(num)
        except (TestFailure, OSError, subprocess.TimeoutExpired, ValueError) as e:
            log("   FAIL case %d (%.1f s): %s" % (num, time.monotonic() - t1, e))
            failures.append(num)
            show_daemon_logs(ctx)
            # again after the logs: CI keeps only the tail of the output
            log("   FAIL case %d: %s" % (num, e))
        except Exception:  # noqa: BLE001 - a bug in the test itself
            log("   FAIL case %d: the test raised\n%s" % (num, traceback.format_exc()))
            failures.append(num)
        finally:
            ctx.cleanup()
    log("total %.1f s" % (time.monotonic() - t_all))
    if failures:
        log("failed cases: %s; left for inspection: %s" % (", ".join(map(str, failures)), tmp))
        log("FAIL")
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    ran = [n for n, _, _ in cases if (not wanted or n in wanted)]
    if skipped and len(skipped) == len(ran):
        log("SKIP")
        return SKIP
    log("PASS")
    return 0
