# SPDX-License-Identifier: MIT
"""Retention policies (keep_latest, keep_every by steps and by commit time,
pins) against real saved steps, and `ckptctl retention`.

1. keep_latest 2, keep_every 100: of steps 50..260 the disk and `ckptctl
   list` keep the newest two and the first committed step of each window
   of 100 step numbers; `ckptctl retention --dry-run` gives each kept step
   its reason ("kept: every 100 steps (window 100-199)").
2. A dry run that previews another policy (--keep-latest 1 --keep-every
   200) names exactly the steps that the pass after a SIGHUP with that
   policy removes, and nothing else goes; a real `ckptctl retention` then
   has nothing left to remove.
3. keep_every by time (2s windows): the commit times come from the
   daemon (ckptctl list), the expected survivors are computed from them
   independently, and the disk, the list and the dry run agree.
4. A pin keeps a step the policy drops ("kept: pinned"); unpinned, it goes.
5. Bad keep_every values: ckptd refuses to start with the exact error; a
   SIGHUP with one keeps the running policy; bad ckptctl arguments exit 2
   and change nothing."""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import (CKPTD, Daemon, check, ctl_json, log, run_test, shards_arg,  # noqa: E402
                     step_dirs, wait_until)


def layout(step):
    return [("w", 4096 + step)]


def save(d, job, step):
    d.rank("save", "--job", job, "--step", step, "--rank", 0, "--world", 1,
           "--shards", shards_arg(layout(step)), "--commit")


def expect(d, job, steps):
    wait_until(lambda: step_dirs(d.state_dir, job) == steps, 10,
               what=lambda: "%s step dirs %s (are %s)" % (job, steps,
                                                          step_dirs(d.state_dir, job)))
    got = sorted(c["step"] for c in ctl_json(d, "list", job))
    check(got == steps, "ckptctl list %s: %s, want %s" % (job, got, steps))
    newest = max(steps)
    out = d.rank("latest", "--job", job).stdout.split()
    check(int(out[0]) == newest, "LATEST of %s: %s, want %d" % (job, out, newest))
    d.rank("verify", "--job", job, "--step", newest, "--rank", 0, "--shards",
           shards_arg(layout(newest)))


def local_rows(d, *args):
    """{step: (action, reason)} of the local tier from ckptctl --json retention."""
    r = ctl_json(d, "retention", *args)
    return {e["step"]: (e["action"], e["reason"]) for e in r["steps"] if e["tier"] == "local"}, r


def write_config(path, keep_latest, keep_every):
    with open(path + ".new", "w") as f:
        f.write("[local]\nkeep_latest = %s\nkeep_every = %s\n" % (keep_latest, keep_every))
    os.rename(path + ".new", path)


def reload(d, cfg, keep_latest, keep_every, ok=True):
    marker = "reload: done" if ok else "reload: configuration invalid"
    before = d.read_log().count(marker)
    write_config(cfg, keep_latest, keep_every)
    d.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: d.read_log().count(marker) > before, 10,
               what="ckptd to log %r after SIGHUP" % marker)
    check(d.alive(), "ckptd died on SIGHUP")


def by_steps(tmp):
    cfg = os.path.join(tmp, "steps.conf")
    write_config(cfg, 2, 100)
    d = Daemon(tmp, name="steps", extra=["--config", cfg]).start()
    job = "every-steps"
    steps = [50, 120, 150, 180, 210, 250, 260]
    for s in steps:
        save(d, job, s)
    # newest 2: 250 260; windows 0-99: 50, 100-199: 120, 200-299: 210
    expect(d, job, [50, 120, 210, 250, 260])
    rows, _ = local_rows(d, job, "--dry-run")
    want = {
        260: ("kept", "kept: newest 2"),
        250: ("kept", "kept: newest 2"),
        210: ("kept", "kept: every 100 steps (window 200-299)"),
        120: ("kept", "kept: every 100 steps (window 100-199)"),
        50: ("kept", "kept: every 100 steps (window 0-99)"),
    }
    check(rows == want, "dry run: %s, want %s" % (rows, want))
    text = d.ctl("retention", job, "--dry-run").stdout
    check("job %s, local:" % job in text and "kept: every 100 steps (window 100-199)" in text,
          "human dry run: %r" % text)

    # a preview of keep_latest 1, keep_every 200: what the pass after the
    # reload removes, exactly
    rows, r = local_rows(d, job, "--dry-run", "--keep-latest", 1, "--keep-every", 200)
    goes = sorted(s for s, (a, _) in rows.items() if a == "goes")
    kept = sorted(s for s, (a, _) in rows.items() if a == "kept")
    check(goes == [120, 250] and kept == [50, 210, 260] and r["removed"] == 0,
          "preview: goes %s kept %s" % (goes, kept))
    check(rows[250] == ("goes", "goes: older than the newest 1 and not the first of its window "
                                "(every 200)"), "reason of 250: %s" % (rows[250],))
    check(rows[210] == ("kept", "kept: every 200 steps (window 200-399)"),
          "reason of 210: %s" % (rows[210],))
    expect(d, job, [50, 120, 210, 250, 260])  # a dry run removes nothing
    reload(d, cfg, 1, 200)
    expect(d, job, kept)
    # applying now finds nothing more to remove
    rows, r = local_rows(d, job)
    check(r["removed"] == 0 and all(a == "kept" for a, _ in rows.values()),
          "retention applied after the reload: %s" % r)

    # pins: 50 is the first of its window (kept anyway); pin 260, save
    # 270 and 280: 260 would go (not the first of 200-399), the pin keeps it
    d.ctl("pin", job, 260)
    save(d, job, 270)
    save(d, job, 280)
    expect(d, job, [50, 210, 260, 280])
    rows, _ = local_rows(d, job, "--dry-run")
    check(rows[260] == ("kept", "kept: pinned"), "pinned row: %s" % (rows[260],))
    d.ctl("unpin", job, 260)
    expect(d, job, [50, 210, 280])

    # a bad value on SIGHUP keeps the running policy
    reload(d, cfg, 1, "6x", ok=False)
    check("[local] keep_every: '6x': a duration takes the unit s, m, h or d (6h), a step count "
          "none" in d.read_log(), "the bad value is not reported")
    save(d, job, 290)
    expect(d, job, [50, 210, 290])

    # ckptctl argument errors: exit 2, nothing changes
    for args, text in ((["retention", job, "--keep-latest", 1], "give them with --dry-run"),
                       (["retention", job, "--dry-run", "--keep-latest", 0],
                        "--keep-latest must be at least 1"),
                       (["retention", job, "--dry-run", "--keep-every", "5"],
                        "--keep-every needs --keep-latest N"),
                       (["retention", job, "--dry-run", "--keep-latest", 1, "--keep-every",
                         "5y"], "--keep-every: '5y': a duration takes the unit"),
                       (["retention", job, "extra"], "usage: retention")):
        p = d.ctl(*args, check_rc=False)
        check(p.returncode == 2 and text in p.stderr,
              "ckptctl %s: rc %d %r" % (args, p.returncode, p.stderr))
    p = d.ctl("retention", "nope", "--dry-run", check_rc=False)
    check(p.returncode == 1 and "no job named 'nope' on this node" in p.stderr,
          "retention of a missing job: %r" % p.stderr)
    expect(d, job, [50, 210, 290])
    # every job: both jobs' rows when no job is named
    r = ctl_json(d, "retention", "--dry-run")
    check({e["job"] for e in r["steps"]} == {job}, "every job: %s" % r)
    check(d.stop() == 0, "ckptd did not exit cleanly")


def by_time(tmp):
    window = 2
    d = Daemon(tmp, name="time", extra=["--local-keep-latest", "1", "--local-keep-every",
                                        "%ds" % window]).start()
    job = "every-2s"
    committed_at = {}
    for i in range(1, 9):
        save(d, job, i)
        for c in ctl_json(d, "list", job):
            committed_at.setdefault(c["step"], c["committed_at"])
        time.sleep(0.6)
    check(len(committed_at) == 8, "commit times: %s" % committed_at)
    # independently: the newest, and of the others the lowest step of each
    # window of commit time (windows from the epoch)
    first = {}
    for s in sorted(committed_at):
        first.setdefault(committed_at[s] // window, s)
    want = sorted(set(first.values()) | {8})
    log("commit times %s: keep %s" % (committed_at, want))
    check(len(want) < 8, "some step must go (commit times %s)" % committed_at)
    expect(d, job, want)
    rows, _ = local_rows(d, job, "--dry-run")
    for s in want:
        if s == 8:
            check(rows[s] == ("kept", "kept: newest 1"), "row %d: %s" % (s, rows[s]))
        else:
            start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(committed_at[s] // window * window))
            check(rows[s] == ("kept", "kept: every %ds (window from %s UTC)" % (window, start)),
                  "row %d: %s" % (s, rows[s]))
    check(d.stop() == 0, "ckptd did not exit cleanly")


def bad_start(tmp):
    for args, text in ((["--local-keep-every", "0"],
                        "[local] keep_every: '0' is not a step count (1000) or a duration (6h), "
                        "or off"),
                       (["--remote-keep-every", "6h"],
                        "[remote] keep_every = 6h: the store's retention knows no commit times; "
                        "give a step count (1000)")):
        p = subprocess.run([CKPTD, "--state-dir", os.path.join(tmp, "bad"), "--socket",
                            os.path.join(tmp, "bad.sock")] + args, capture_output=True, text=True,
                           timeout=60)
        check(p.returncode != 0 and text in p.stderr,
              "ckptd %s: rc %d %r" % (args, p.returncode, p.stderr))


def main(tmp):
    bad_start(tmp)
    by_steps(tmp)
    by_time(tmp)


run_test(main)
