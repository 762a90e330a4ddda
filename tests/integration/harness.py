# SPDX-License-Identifier: MIT
"""Shared helpers for ckptd integration tests.

Every test starts a real ckptd (the binary meson built, $CKPTD) on a fresh
temporary state directory and socket, and drives it with real clients:
ckpt-testrank ($CKPT_TESTRANK, the public libckpt API), ckpt-rawclient
($CKPT_RAWCLIENT, raw protocol) and ckptctl ($CKPTCTL).

Exit codes follow meson: 0 pass, 1 fail, 77 skip.
"""
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time

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
                 extra=None, env=None):
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
        self.proc = None

    def args(self):
        return [CKPTD, "--state-dir", self.state_dir, "--socket", self.socket,
                "--pool-size", self.pool, "--pool-slot-size", self.slot,
                "--log-level", "debug"] + self.extra

    def start(self, wait=True, timeout=30):
        self.logf = open(self.log_path, "a")
        self.proc = subprocess.Popen(self.args(), stdout=self.logf, stderr=subprocess.STDOUT,
                                     env=self.env)
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

    def ctl(self, *args, check_rc=True):
        cmd = [CKPTCTL, "--socket", self.socket] + [str(a) for a in args]
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


def step_dirs(state_dir, job):
    """Steps that have a directory under state_dir/jobs/<job>/, ascending."""
    path = os.path.join(state_dir, "jobs", job)
    try:
        names = os.listdir(path)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if n.isdigit() and len(n) == 20)


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


# ---- peers: ports and keys for clusters of daemons on this machine ----

def free_ports(n):
    """n TCP ports free on the loopback right now (held together while
    chosen, so they are distinct)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def write_psk(path, key=None):
    with open(path, "w") as f:
        f.write((key or secrets.token_hex(32)) + "\n")
    os.chmod(path, 0o600)
    return path


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


def check_sanitizer_clean(d):
    """A daemon killed by the test cannot report leaks, but ASan/UBSan
    errors land in its log as they happen."""
    text = d.read_log()
    for pat in ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer"):
        check(pat not in text, "node %s log (%s) has a sanitizer report:\n%s"
              % (getattr(d, "node", "?"), d.log_path, text[text.find(pat) - 200:][:3000]))
