# SPDX-License-Identifier: MIT
"""The background scrub ([scrub] in ckptd.conf(5), daemon/scrub/scrub.h).

1. Corruption: a job commits 5 ranks with the scrub off; then rank 0's
   shard w gets one flipped byte, rank 1's w is truncated, rank 2's b is
   deleted, rank 3's MANIFEST is replaced by rank 4's (wrong MANIFEST), and
   rank 4 stays intact.  The scrub is switched on by SIGHUP: its pass
   reports each of the four, with the shard, the block and what is wrong,
   in `ckptctl --json status` (scrub.copies_bad, last_findings), in
   `ckptctl status`, and in the log (the bad_copy hook: server_job_error);
   rank 4 is not reported.
2. A bad [scrub] value: ckptd refuses to start, naming the file and line;
   on SIGHUP the running configuration is kept.
   The scrub's thread (ckptd-scrub) reads at I/O class idle (ionice -p).
3. Rate: ~96 MiB committed, rate 20M: bytes verified over time, sampled
   from status, is within 25 % of 20 MiB/s (idle_priority = no, the
   thread at the default class: this disk is shared with other jobs).
4. Resume: the daemon is SIGKILLed in the middle of that pass; after the
   restart the same pass goes on from the recorded position (bytes
   verified right after the restart are not back at zero) and ends having
   verified the whole (not much more than once).
5. Pause: while a save is held open the scrub says "paused" and verifies
   nothing; once the save is done it goes on.
6. Unlimited: a whole pass over the same data takes much less than at
   20 MiB/s.
7. Retention under the scrub: with --local-keep 1, a step is committed
   while the scrub is in the middle of the previous one, which retention
   then removes: no finding (a file gone with its step is no bad copy),
   and the pass goes on to the new step.
8. Replica areas: two nodes replicating to each other (factor 2); a byte
   flipped in node 1's replica of node 0's rank 0 is reported by node 1's
   scrub, naming the area ("replica of node 0"); node 0's own copy and
   every other copy pass.
"""
import threading
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (CKPTD, CaseCtx, Daemon, TestFailure, check, check_log_clean,  # noqa: E402
                     ctl_json, flip_byte, log, log_lines, read_until, run_test, save_node,
                     step_path, wait_until)
from cluster import Cluster, replica_step_path, wait_replicated  # noqa: E402

MiB = 1 << 20


def write_config(path, enabled, rate="unlimited", interval="1s", idle=True):
    with open(path + ".new", "w") as f:
        f.write("# test config\n[scrub]\nenabled = %s\nrate = %s\ninterval = %s\n"
                "idle_priority = %s\n" % ("yes" if enabled else "no", rate, interval,
                                          "yes" if idle else "no"))
    os.rename(path + ".new", path)


def scrub_ionice(d):
    """ionice -p of the daemon's scrub thread (named ckptd-scrub)."""
    task = "/proc/%d/task" % d.proc.pid
    for tid in os.listdir(task):
        try:
            with open(os.path.join(task, tid, "comm")) as f:
                if f.read().strip() != "ckptd-scrub":
                    continue
        except OSError:
            continue
        return subprocess.run(["ionice", "-p", tid], capture_output=True, text=True).stdout
    raise TestFailure("ckptd has no thread named ckptd-scrub")


def reload(d, cfg, ok=True, **kw):
    marker = "reload: done" if ok else "reload: configuration invalid"
    before = d.read_log().count(marker)
    write_config(cfg, **kw)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: d.read_log().count(marker) > before, 10,
               what="ckptd to log %r after SIGHUP" % marker)
    check(d.alive(), "ckptd died on SIGHUP")


def scrub(d):
    s = ctl_json(d, "status")["scrub"]
    check(s is not None, "status has no scrub section although it is enabled")
    return s


def corruption(tmp):
    cfg = os.path.join(tmp, "corrupt.conf")
    write_config(cfg, enabled=False)
    d = Daemon(tmp, name="corrupt", extra=["--config", cfg]).start()
    check(ctl_json(d, "status")["scrub"] is None, "scrub off: status must say null")
    job = "scrubbed"
    layouts = {r: [("w", 3 * MiB + 4096 * r + 1), ("b", 1000 + r)] for r in range(5)}
    save_node(d, job, 1, range(5), 5, layouts)
    step = step_path(d.state_dir, job, 1)
    flip_byte(os.path.join(step, "rank-0", "w"), 2 * MiB + 17)  # block 2
    os.truncate(os.path.join(step, "rank-1", "w"), 1 * MiB)
    os.unlink(os.path.join(step, "rank-2", "b"))
    with open(os.path.join(step, "rank-4", "MANIFEST"), "rb") as f:
        other = f.read()
    with open(os.path.join(step, "rank-3", "MANIFEST"), "wb") as f:
        f.write(other)

    reload(d, cfg, enabled=True)
    s = wait_until(lambda: (lambda s: s if s["state"] == "waiting" and s["pass"] >= 1 and
                            s["copies_verified"] == 5 else None)(scrub(d)), 20,
                   what=lambda: "a scrub pass over 5 copies (status %s)" % scrub(d))
    check(s["copies_bad"] == 4, "copies_bad %d, want 4: %s" % (s["copies_bad"], s))
    # a pass a second: the next may have run already, finding the same four
    check(s["findings"] >= 4 and s["findings"] % 4 == 0, "findings %d, want 4 a pass: %s"
          % (s["findings"], s))
    want = {
        0: "job %s step 1 rank 0: shard w: block 2 (bytes %d to %d) failed its CRC32C"
           % (job, 2 * MiB, 3 * MiB - 1),
        1: "job %s step 1 rank 1: shard w: the file is %d bytes, MANIFEST says %d"
           % (job, MiB, 3 * MiB + 4096 + 1),
        2: "job %s step 1 rank 2: shard b: the file is missing" % job,
        3: "job %s step 1 rank 3: MANIFEST is another rank's: it names job %s step 1 rank 4"
           % (job, job),
    }
    for r, text in want.items():
        check(text in s["last_findings"],
              "status last_findings lacks %r: %r" % (text, s["last_findings"]))
        lines = log_lines(d, "error: scrub: " + text.replace("(", r"\(").replace(")", r"\)"))
        check(lines, "the log has no error line %r" % text)
    check(not log_lines(d, "scrub: job %s step 1 rank 4" % job), "rank 4 is intact, was reported")
    io = scrub_ionice(d)
    check(io.startswith("idle"), "the scrub thread reads at %r, not at class idle" % io)
    text = d.ctl("status").stdout
    check("scrub:" in text and "4 bad" in text and "bad copies found" in text,
          "ckptctl status does not show the scrub's findings:\n%s" % text)
    log("corruption: ok (%s)" % s["last_findings"][:120])

    # a bad value on SIGHUP: refused, the running values stay
    reload(d, cfg, ok=False, enabled=True, rate="10K")
    check(log_lines(d, r"corrupt.conf:4: \[scrub\] rate = 10K is out of range \(unlimited, "
                    r"or 1M\.\.1T\)"), "the reload error does not name the line")
    check(scrub(d)["rate"] == 0, "a refused reload changed the rate")
    d.stop()
    check_log_clean(d)

    # ... and at start: ckptd exits, naming the line
    bad = os.path.join(tmp, "bad.conf")
    write_config(bad, enabled=True, interval="0s")
    p = subprocess.run([CKPTD, "--config", bad, "--state-dir", os.path.join(tmp, "bad-state"),
                        "--socket", os.path.join(tmp, "bad.sock")], capture_output=True,
                       text=True, timeout=30)
    check(p.returncode != 0 and "bad.conf:5: [scrub] interval = 0ms is out of range (1s..8760h)"
          in p.stderr, "ckptd with interval = 0s: rc %d, stderr %r" % (p.returncode, p.stderr))
    log("config errors: ok")


def sample_rate(d, seconds):
    """Bytes verified per second over `seconds` of running, from status."""
    s0 = wait_until(lambda: (lambda s: s if s["state"] == "running" and
                             s["bytes_verified"] > 0 else None)(scrub(d)), 10,
                    what="the scrub to be running")
    t0 = time.monotonic()
    time.sleep(seconds)
    s1 = scrub(d)
    t1 = time.monotonic()
    check(s1["state"] == "running" and s1["pass"] == s0["pass"],
          "the pass ended or stopped while measured: %s" % s1)
    return (s1["bytes_verified"] - s0["bytes_verified"]) / (t1 - t0), s1


def rate_resume_pause(tmp):
    cfg = os.path.join(tmp, "rate.conf")
    # the rate is measured with the scrub at the default I/O class: at class
    # idle it gets only the disk's spare time, and this machine's disk is
    # shared with other jobs (docs/BENCHMARKS.md, bench/scrub.sh)
    write_config(cfg, enabled=False, rate="20M", interval="1h", idle=False)
    d = Daemon(tmp, name="rate", extra=["--config", cfg]).start()
    job = "big"
    layouts = {r: [("w", 24 * MiB), ("x", 8192 + r)] for r in range(4)}
    save_node(d, job, 1, range(4), 4, layouts)
    # the interval runs from the daemon's first start: the first pass comes
    # when it is switched on
    reload(d, cfg, enabled=True, rate="20M", interval="2s", idle=False)
    wait_until(lambda: scrub(d)["state"] == "running", 10, what="the first pass to start")
    # no second pass in this part
    reload(d, cfg, enabled=True, rate="20M", interval="1h", idle=False)
    rate, s = sample_rate(d, 2.0)
    total = s["bytes_total"]
    check(total == sum(sz for r in layouts for _, sz in layouts[r]),
          "bytes_total %d, want the committed bytes" % total)
    want = 20 * MiB
    check(0.75 * want <= rate <= 1.25 * want,
          "scrub at rate 20M read %.1f MiB/s (want 20 +- 25 %%)" % (rate / MiB))
    io = scrub_ionice(d)
    check(not io.startswith("idle"), "idle_priority = no, yet the scrub reads at %r" % io)
    log("rate: %.1f MiB/s at 20M" % (rate / MiB))

    # SIGKILL in the middle of the pass, then restart: the pass goes on
    time.sleep(0.5)
    before = scrub(d)
    check(before["state"] == "running" and before["bytes_verified"] < total,
          "the pass must still run: %s" % before)
    d.kill()
    d.start()
    after = scrub(d)
    check(after["pass"] == before["pass"], "pass %d after the restart, was %d"
          % (after["pass"], before["pass"]))
    # the position is written at least once a second: at most that much
    # (20 MiB at 20M) plus one read is done again
    check(after["bytes_verified"] >= before["bytes_verified"] - 24 * MiB and
          after["bytes_verified"] > 0,
          "after the restart the pass is back at %d bytes verified, it was at %d"
          % (after["bytes_verified"], before["bytes_verified"]))
    check(log_lines(d, "scrub: resuming pass %d at job %s" % (before["pass"], job)),
          "the log does not say the pass resumed")
    log("resume: %d MiB verified before the kill, %d after the restart"
        % (before["bytes_verified"] >> 20, after["bytes_verified"] >> 20))

    # a save held open pauses it
    hold = d.raw_async("hold-windows", "holder", 1, 1, MiB, 20000)
    read_until(hold, "HOLDING", "hold-windows")
    s = wait_until(lambda: (lambda s: s if s["state"] == "paused" else None)(scrub(d)), 5,
                   what=lambda: "the scrub to pause while a save is open: %s" % scrub(d))
    time.sleep(1.0)
    s2 = scrub(d)
    check(s2["state"] == "paused" and s2["bytes_verified"] <= s["bytes_verified"] + 5 * MiB,
          "paused, yet the scrub verified %d more bytes" % (s2["bytes_verified"] -
                                                             s["bytes_verified"]))
    hold.stdin.write("\n")
    hold.stdin.flush()
    hold.communicate(timeout=30)
    s3 = wait_until(lambda: (lambda s: s if s["state"] != "paused" and
                             s["bytes_verified"] > s2["bytes_verified"] or
                             s["pass"] > s2["pass"] else None)(scrub(d)), 10,
                    what=lambda: "the scrub to go on after the save: %s" % scrub(d))
    log("pause: ok (%s after the save)" % s3["state"])

    end = wait_until(lambda: (lambda s: s if s["state"] == "waiting" else None)(scrub(d)), 15,
                     what=lambda: "the pass to end: %s" % scrub(d))
    check(end["copies_verified"] == 4 and end["copies_bad"] == 0,
          "pass over 4 good copies: %s" % end)
    check(total <= end["bytes_verified"] <= total + 24 * MiB,
          "the resumed pass verified %d bytes of %d: it started over" % (end["bytes_verified"],
                                                                       total))

    # unlimited: a whole pass in much less than the 4.8 s it takes at 20M
    reload(d, cfg, enabled=True, rate="unlimited", interval="1s", idle=False)
    first = end["pass"]
    t0 = time.monotonic()
    wait_until(lambda: scrub(d)["pass"] > first, 5, what="the next pass to start")
    # and no pass after it (a slow machine's pass may take over a second)
    reload(d, cfg, enabled=True, rate="unlimited", interval="1h", idle=False)
    fast = wait_until(lambda: (lambda s: s if s["state"] == "waiting" else None)(scrub(d)), 10,
                      interval=0.01, what="the unlimited pass to end")
    took = time.monotonic() - t0
    check(fast["bytes_verified"] == total, "unlimited pass verified %d of %d"
          % (fast["bytes_verified"], total))
    check(took < total / (20 * MiB) / 2, "unlimited pass took %.2f s (at 20M: %.1f s)"
          % (took, total / (20 * MiB)))
    log("unlimited: a pass of %d MiB in %.2f s (measured %.0f MiB/s overall)"
        % (total >> 20, took, fast["rate_measured"] / MiB))
    d.stop()
    check_log_clean(d)
    check(not log_lines(d, "error: scrub:"), "the scrub reported good copies as bad")


def retention_under_scrub(tmp):
    cfg = os.path.join(tmp, "keep.conf")
    write_config(cfg, enabled=False, rate="20M", interval="1h", idle=False)
    d = Daemon(tmp, name="keep", extra=["--config", cfg, "--local-keep", "1"]).start()
    job = "kept"
    spec = [("a", 16 * MiB), ("b", 16 * MiB), ("c", 16 * MiB)]
    save_node(d, job, 1, [0], 1, {0: spec})
    reload(d, cfg, enabled=True, rate="20M", interval="1s", idle=False)
    wait_until(lambda: scrub(d)["bytes_verified"] > 4 * MiB, 10, what="the scrub in step 1")
    reload(d, cfg, enabled=True, rate="unlimited", interval="1h", idle=False)
    save_node(d, job, 2, [0], 1, {0: spec})
    wait_until(lambda: not os.path.exists(step_path(d.state_dir, job, 1)), 10,
               what="retention to remove step 1")
    s = wait_until(lambda: (lambda s: s if s["state"] == "waiting" else None)(scrub(d)), 15,
                   what=lambda: "the pass to end: %s" % scrub(d))
    check(s["copies_bad"] == 0 and s["findings"] == 0 and not log_lines(d, "error: scrub:"),
          "a step removed by retention under the scrub was reported: %s" % s)
    # step 2's rank, and step 1's too when the unlimited scrub finished it
    # before retention removed it (the save pauses the scrub, not always
    # before the end of step 1)
    check(s["copies_verified"] in (1, 2), "the pass verified %d copies, want step 2's rank "
          "(and maybe step 1's): %s" % (s["copies_verified"], s))
    log("retention under the scrub: ok (%d MiB verified)" % (s["bytes_verified"] >> 20))
    d.stop()
    check_log_clean(d)


def replica_area(tmp):
    ctx = CaseCtx(tmp)
    try:
        cl = Cluster(ctx, 2, 2, prefix="r", extra=["--scrub-rate=unlimited",
                                                     "--scrub-interval=1s"]).start()
        cl.wait_control_links()
        job = "replicated"
        layouts = {r: [("w", 2 * MiB + 4096 * r + 3), ("s", 100 + r)] for r in range(cl.world)}
        errors = []

        def one(d):
            try:
                save_node(d, job, 1, cl.ranks_of(d.node), cl.world, layouts)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        ts = [threading.Thread(target=one, args=(d,)) for d in cl.nodes]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(not errors, "saves failed: %s" % errors)
        for d in cl.nodes:
            wait_replicated(d, job, 1)
        n1 = cl.nodes[1]
        flip_byte(os.path.join(replica_step_path(n1.state_dir, 0, job, 1), "rank-0", "w"),
                  MiB + 5)
        want = ("job %s step 1 rank 0 (replica of node 0): shard w: block 1 (bytes %d to %d) "
                "failed its CRC32C" % (job, MiB, 2 * MiB - 1))
        wait_until(lambda: want in scrub(n1)["last_findings"], 15,
                   what=lambda: "node 1's scrub to report %r (status %s)" % (want, scrub(n1)))
        # one whole pass more (a pass a second) over all 4 copies of each node
        p0 = {d.node: scrub(d)["pass"] for d in cl.nodes}
        for d in cl.nodes:
            wait_until(lambda: scrub(d)["pass"] >= p0[d.node] + 2, 15,
                       what="node %d's next whole pass" % d.node)
        s1 = scrub(n1)
        check(s1["copies_bad"] <= 1 and s1["bytes_total"] == sum(
            sz for r in layouts for _, sz in layouts[r]),
            "node 1 holds 4 copies (its 2 ranks and node 0's 2), one bad: %s" % s1)
        for d in cl.nodes:
            others = [ln for ln in log_lines(d, "error: scrub: ") if want not in ln]
            check(not others, "node %d reported good copies as bad: %s" % (d.node, others))
        check(scrub(cl.nodes[0])["findings"] == 0, "node 0's copies are good")
        log("replica area: ok")
        for d in cl.nodes:
            d.stop()
            check_log_clean(d)
    finally:
        ctx.cleanup()


def main(tmp):
    corruption(tmp)
    rate_resume_pause(tmp)
    retention_under_scrub(tmp)
    replica_area(tmp)


if __name__ == "__main__":
    run_test(main)
