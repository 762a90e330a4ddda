# SPDX-License-Identifier: MIT
"""Client-side deadlines (issue 9, item 4): with ckptd stopped (SIGSTOP),
every libckpt call returns -ETIMEDOUT within its deadline + 0.5 s, with a
message naming the call and the time, instead of blocking forever.

- The calls without a timeout of their own use the connection's deadline
  ($CKPT_TIMEOUT_MS here; ckpt_set_timeout() in one case); ckpt_wait() and
  ckpt_commit() use their timeout_ms + 250 ms, even when that is longer than
  the connection's deadline.
- After SIGCONT the documented state holds: the timed-out connection is
  closed (-ENOTCONN, naming the earlier timeout), a new connection works
  and sees the right data, and the daemon dropped the old connection's
  unfinished save (the same rank saves again).
- A full listen queue (connect() itself would block) is bounded too;
  CKPT_TIMEOUT_MS=0 keeps the old wait-forever behaviour; a bad
  CKPT_TIMEOUT_MS is refused with a clear error.
- ckptctl (--timeout, $CKPT_TIMEOUT_MS) and the Python binding
  (TimeoutError) do not hang either.
- A daemon that is merely slow to reach a tier still answers a long wait
  itself (its own -ETIMEDOUT), and the connection stays usable.

Against a libckpt without deadlines the calls hang: each case is then
reported as hung after a few seconds, and the test fails.
"""
import errno
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (CKPTCTL, Daemon, TestFailure, check, log, run_test,  # noqa: E402
                     wait_until)

DEADLINE = os.environ.get("CKPT_DEADLINE", "build/tests/ckpt-deadline")
SOURCE_ROOT = os.environ.get("CKPT_SOURCE_ROOT", ".")
JOB, STEP = "dl", 1
DEFAULT_MS = 1000      # $CKPT_TIMEOUT_MS for the cases below
WAIT_MS = 1500         # the timeout_ms given to ckpt_wait / ckpt_commit
GRACE_MS = 250         # CKPT_REPLY_GRACE_MS
SLACK_S = 0.5          # the bound: deadline + 0.5 s
HUNG_S = 6.0           # no answer by then: the call hangs

DEFAULT_CALLS = ["connect", "save_begin", "shard_begin", "shard_buffer", "shard_commit",
                 "save_write", "save_finish", "save_abort", "latest", "latest_rank",
                 "shard_list", "read", "map"]
SAVE_CALLS = {"save_begin", "shard_begin", "shard_buffer", "shard_commit", "save_write",
              "save_finish", "save_abort"}


class Stopped:
    """SIGSTOP the daemon for the with-block; SIGCONT on the way out, always."""

    def __init__(self, d):
        self.d = d

    def __enter__(self):
        os.kill(self.d.proc.pid, signal.SIGSTOP)
        wait_until(lambda: proc_state(self.d.proc.pid) == "T", 5, what="ckptd stopped")
        return self

    def __exit__(self, *exc):
        os.kill(self.d.proc.pid, signal.SIGCONT)


def proc_state(pid):
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


class Helper:
    """ckpt-deadline CALL, spoken to line by line (see tests/helpers/deadline.c)."""

    def __init__(self, d, call, env=None, args=()):
        self.call = call
        e = d.client_env(env)
        self.p = subprocess.Popen([DEADLINE, call, "--job", JOB, "--step", str(STEP)]
                                  + [str(a) for a in args],
                                  env=e, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.buf = b""

    def line(self, timeout):
        """The next line, or None if none came within timeout seconds."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.p.stdout.fileno(), 4096)
            if not chunk:
                raise TestFailure("%s: helper exited (%s): %s" % (
                    self.call, self.p.wait(), self.p.stderr.read().decode()))
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def send(self, word):
        self.p.stdin.write((word + "\n").encode())
        self.p.stdin.flush()

    def expect(self, prefix, timeout=10):
        line = self.line(timeout)
        check(line is not None and line.startswith(prefix),
              "%s: expected '%s ...' from the helper, got %r" % (self.call, prefix, line))
        return line[len(prefix):].strip()

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def parse_result(text):
    rc, ms, msg = (text.split(" ", 2) + [""])[:3]
    return int(rc), int(ms), msg


def one_call(d, call, env, deadline_ms, args=(), failures=None):
    """Run call against the stopped daemon; check the result and the state
    after SIGCONT.  Appends a description to failures instead of raising,
    so one run shows every call that hangs."""
    try:
        one_call_checked(d, call, env, deadline_ms, args, failures)
    except TestFailure as e:
        failures.append(str(e))


def one_call_checked(d, call, env, deadline_ms, args, failures):
    h = Helper(d, call, env, args)
    try:
        h.expect("ready")
        with Stopped(d):
            h.send("go")
            line = h.line(deadline_ms / 1000.0 + HUNG_S)
        if line is None:
            failures.append("%s: still blocked %.1f s after a %d ms deadline (hangs)"
                            % (call, deadline_ms / 1000.0 + HUNG_S, deadline_ms))
            return
        check(line.startswith("result "), "%s: unexpected %r" % (call, line))
        rc, ms, msg = parse_result(line[len("result "):])
        what = "ckpt_" + call
        problems = []
        if rc != -errno.ETIMEDOUT:
            problems.append("returned %d, not -ETIMEDOUT" % rc)
        if not deadline_ms - 50 <= ms <= deadline_ms + SLACK_S * 1000:
            problems.append("took %d ms, not %d ms .. +%d ms" % (ms, deadline_ms,
                                                                 SLACK_S * 1000))
        want = "%s: no reply from ckptd within %d ms" % (what, deadline_ms)
        if not msg.startswith(want):
            problems.append("message %r does not start with %r" % (msg, want))
        h.send("after")
        if call == "connect":
            old = h.expect("old")
            if old != "none":
                problems.append("a failed connect left a connection: %r" % old)
        else:
            orc, omsg = (h.expect("old").split(" ", 1) + [""])[:2]
            if int(orc) != -errno.ENOTCONN or "closed after an earlier failure" not in omsg \
                    or want not in omsg:
                problems.append("the timed-out connection answered %s %r, not -ENOTCONN "
                                "naming the timeout" % (orc, omsg))
        new = h.expect("new")
        if new != "0 %d" % STEP:
            problems.append("a new connection's ckpt_latest gave %r, not step %d" % (new, STEP))
        if call in SAVE_CALLS:
            resave = h.expect("resave")
            if resave != "0":
                problems.append("saving the rank again on a new connection gave %s: the "
                                "daemon kept the closed connection's save" % resave)
        if problems:
            failures.append("%s: %s" % (call, "; ".join(problems)))
        else:
            log("%-13s -ETIMEDOUT after %4d ms (deadline %d): %s" % (call, ms, deadline_ms,
                                                                       msg[:60]))
    finally:
        h.close()


def main(tmp):
    d = Daemon(tmp, name="dl", pool="64M", slot="8M").start()
    d.rank("save", "--job", JOB, "--step", STEP, "--rank", 0, "--world", 1,
           "--shards", "a:4096", "--commit")
    env = {"CKPT_TIMEOUT_MS": str(DEFAULT_MS)}
    failures = []

    # every call without a timeout argument: the connection's deadline
    for call in DEFAULT_CALLS:
        one_call(d, call, env, DEFAULT_MS, failures=failures)
    # ckpt_wait / ckpt_commit: their own timeout + the grace, also when that
    # is longer than the connection's deadline (1750 > 1000)
    for call in ("wait", "commit"):
        one_call(d, call, env, WAIT_MS + GRACE_MS, args=("--timeout", WAIT_MS),
                 failures=failures)
        one_call(d, call, env, GRACE_MS, args=("--timeout", 0), failures=failures)
    # ckpt_set_timeout() overrides the environment's default (60 s here)
    one_call(d, "latest", {"CKPT_TIMEOUT_MS": ""}, 700, args=("--set-timeout", 700),
             failures=failures)

    for case in (check_backlog_full, check_no_deadline, check_bad_env, check_ckptctl,
                 check_python, check_slow_daemon):
        try:
            case(d, env, failures)
        except TestFailure as e:
            failures.append("%s: %s" % (case.__name__, e))

    for f in failures:
        log("FAILED " + f)
    check(not failures, "%d of the deadline cases failed (above)" % len(failures))
    check(d.alive(), "ckptd died")
    check(d.stop() == 0, "unclean exit")


def check_backlog_full(d, env, failures):
    """The daemon's listen queue is full, so connect() itself would wait."""
    h = Helper(d, "connect", env)
    queued = []
    try:
        h.expect("ready")
        with Stopped(d):
            for _ in range(4096):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
                s.setblocking(False)
                try:
                    s.connect(d.socket)
                except BlockingIOError:
                    s.close()
                    break
                queued.append(s)
            else:
                failures.append("backlog: 4096 connections queued and no end in sight")
                return
            h.send("go")
            line = h.line(DEFAULT_MS / 1000.0 + HUNG_S)
        if line is None:
            failures.append("connect (listen queue full): still blocked %.1f s later (hangs)"
                            % (DEFAULT_MS / 1000.0 + HUNG_S))
            return
        rc, ms, msg = parse_result(line[len("result "):])
        want = "ckpt_connect: ckptd at %s did not accept the connection within %d ms" % (
            d.socket, DEFAULT_MS)
        if rc != -errno.ETIMEDOUT or not DEFAULT_MS - 50 <= ms <= DEFAULT_MS + SLACK_S * 1000 \
                or not msg.startswith(want):
            failures.append("connect (listen queue full, %d queued): %d after %d ms: %r"
                            % (len(queued), rc, ms, msg))
        else:
            log("connect with a full listen queue (%d queued): -ETIMEDOUT after %d ms"
                % (len(queued), ms))
        for s in queued:
            s.close()
        queued = []
        h.send("after")
        h.expect("old")
        check(h.expect("new") == "0 %d" % STEP, "no new connection after the backlog drained")
    finally:
        for s in queued:
            s.close()
        h.close()


def check_no_deadline(d, env, failures):
    """CKPT_TIMEOUT_MS=0: no client deadline, as before; the call completes
    once the daemon runs again."""
    h = Helper(d, "latest", {"CKPT_TIMEOUT_MS": "0"})
    try:
        h.expect("ready")
        with Stopped(d):
            h.send("go")
            early = h.line(2.0)
        if early is not None:
            failures.append("CKPT_TIMEOUT_MS=0 should wait for the daemon, got %r" % early)
            return
        rc, ms, msg = parse_result(h.expect("result", 10))
        if rc != 0:
            failures.append("CKPT_TIMEOUT_MS=0: after SIGCONT ckpt_latest gave %d %r"
                            % (rc, msg))
        else:
            log("CKPT_TIMEOUT_MS=0 waits for the stopped daemon (%d ms) and then succeeds" % ms)
    finally:
        h.close()


def check_bad_env(d, env, failures):
    h = Helper(d, "connect", {"CKPT_TIMEOUT_MS": "soon"})
    try:
        h.expect("ready")
        h.send("go")
        rc, ms, msg = parse_result(h.expect("result", 10))
        if rc != -errno.EINVAL or "CKPT_TIMEOUT_MS='soon' is not a number" not in msg:
            failures.append("CKPT_TIMEOUT_MS=soon: connect gave %d %r" % (rc, msg))
    finally:
        h.close()


def check_ckptctl(d, env, failures):
    for args, env in ((["--timeout", "1s"], {}), ([], {"CKPT_TIMEOUT_MS": str(DEFAULT_MS)})):
        cmd = [CKPTCTL, "--socket", d.socket] + args + ["status"]
        e = dict(os.environ)
        e.update(env)
        how = " ".join(args) or "CKPT_TIMEOUT_MS=%d" % DEFAULT_MS
        with Stopped(d):
            t0 = time.monotonic()
            try:
                p = subprocess.run(cmd, env=e, capture_output=True, text=True,
                                   timeout=DEFAULT_MS / 1000.0 + HUNG_S)
            except subprocess.TimeoutExpired:
                failures.append("ckptctl status (%s): hangs" % how)
                continue
            took = time.monotonic() - t0
        if p.returncode != 1 or "no reply from ckptd" not in p.stderr \
                or "within %d ms" % DEFAULT_MS not in p.stderr or took > 1 + SLACK_S + 0.1:
            failures.append("ckptctl status (%s): exit %d after %.2f s: %s"
                            % (how, p.returncode, took, p.stderr.strip()))
        else:
            log("ckptctl status (%s): exit 1 after %.2f s: %s" % (how, took, p.stderr.strip()))
    p = subprocess.run([CKPTCTL, "--socket", d.socket, "--timeout", "later", "status"],
                       capture_output=True, text=True, timeout=30)
    if p.returncode != 2 or "--timeout 'later'" not in p.stderr:
        failures.append("ckptctl --timeout later: exit %d %s" % (p.returncode, p.stderr))


PY_CLIENT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import ckptd
c = ckptd.Client(timeout_ms=600)
print("ready", flush=True)
sys.stdin.readline()
out = {}
try:
    c.latest(sys.argv[2])
except Exception as e:
    out = {"type": type(e).__name__, "timeout": isinstance(e, TimeoutError),
           "ckpt": isinstance(e, ckptd.CkptError), "errno": e.errno, "msg": str(e)}
print(json.dumps(out), flush=True)
sys.stdin.readline()
try:
    c.latest(sys.argv[2])
    out = {}
except Exception as e:
    out = {"errno": e.errno, "msg": str(e)}
print(json.dumps(out), flush=True)
"""


def check_python(d, env, failures):
    """The binding: Client(timeout_ms=...) and TimeoutError."""
    if os.environ.get("CKPT_SANITIZE", "none") != "none":
        # an instrumented libckpt.so cannot be loaded into python (the
        # sanitizer runtime must come first); the plain build runs this
        log("python binding: skipped in a sanitizer build")
        return
    p = subprocess.Popen([sys.executable, "-c", PY_CLIENT,
                          os.path.join(SOURCE_ROOT, "client", "python"), JOB],
                         env=d.client_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        if line != "ready":
            failures.append("python: %r %s" % (line, p.stderr.read()))
            return
        with Stopped(d):
            p.stdin.write("go\n")
            p.stdin.flush()
            r, _, _ = select.select([p.stdout], [], [], 0.6 + HUNG_S)
            if not r:
                failures.append("python: Client.latest() hangs against a stopped daemon")
                return
            first = json.loads(p.stdout.readline())
        p.stdin.write("after\n")
        p.stdin.flush()
        second = json.loads(p.stdout.readline())
        if not (first.get("timeout") and first.get("ckpt") and first["errno"] == errno.ETIMEDOUT
                and "ckpt_latest: no reply from ckptd within 600 ms" in first["msg"]):
            failures.append("python: first call raised %r" % first)
        elif second.get("errno") != errno.ENOTCONN:
            failures.append("python: the call after the timeout raised %r" % second)
        else:
            log("python: %s: %s; then errno %d" % (first["type"], first["msg"][:70],
                                                   second["errno"]))
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()


def check_slow_daemon(d, env, failures):
    """A running daemon whose wait legitimately runs out answers itself, even
    past the connection's deadline (1.5 s > 1 s): the daemon's -ETIMEDOUT,
    and the connection stays usable."""
    d.rank("save", "--job", JOB, "--step", 7, "--rank", 0, "--world", 2, "--shards", "a:4096")
    h = Helper(d, "wait", env, args=("--step", 7, "--timeout", WAIT_MS))
    try:
        h.expect("ready")
        h.send("go")  # the daemon keeps running; step 7 never commits
        rc, ms, msg = parse_result(h.expect("result", WAIT_MS / 1000.0 + HUNG_S))
        h.send("after")
        old = h.expect("old")
        if rc != -errno.ETIMEDOUT or "did not reach tier committed in time" not in msg \
                or ms < WAIT_MS - 50 or not old.startswith("0"):
            failures.append("slow daemon: a 1.5 s wait on a step that never commits gave "
                            "%d after %d ms (%r), then %r on the same connection"
                            % (rc, ms, msg, old))
        else:
            log("a running daemon's own wait timeout arrives (%d ms: %s); the connection "
                "still works" % (ms, msg[:60]))
    finally:
        h.close()


if __name__ == "__main__":
    run_test(main)
