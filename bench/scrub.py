# SPDX-License-Identifier: MIT
#
# scrub.py — the measurements and the report of bench/scrub.sh (which sets
# the environment: see there).  One daemon; the scrub is switched through
# its config file and SIGHUP, its progress read from `ckptctl --json status`.
import json
import os
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import write_section  # noqa: E402

env = os.environ
WORK, RES = env["WORK"], env["RESULTS"]
SIZE_B = int(env["SIZE_B"])
RUNS = int(env["RUNS"])
SOCK = os.path.join(WORK, "ckptd.sock")
CONF = os.path.join(WORK, "ckptd.conf")
BEGIN = "<!-- BEGIN bench/scrub.sh results"
END = "<!-- END bench/scrub.sh results -->"
MB = 1e6


def die(msg):
    print("scrub.sh: " + msg, file=sys.stderr)
    sys.exit(1)


def write_conf(enabled, rate="50M", interval="1s"):
    with open(CONF + ".new", "w") as f:
        f.write("[scrub]\nenabled = %s\nrate = %s\ninterval = %s\n"
                % ("yes" if enabled else "no", rate, interval))
    os.replace(CONF + ".new", CONF)


def status():
    p = subprocess.run([env["CKPTCTL"], "--socket", SOCK, "--json", "status"],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["scrub"]


def reload(daemon, log_path, **kw):
    before = open(log_path).read().count("reload: done")
    write_conf(**kw)
    daemon.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while open(log_path).read().count("reload: done") == before:
        if time.monotonic() > deadline:
            die("ckptd did not reload")
        time.sleep(0.02)


def wait(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            die("timed out waiting for " + what)
        time.sleep(0.01)


def stage():
    p = subprocess.run([env["BENCH"], "--socket", SOCK, "--size", str(SIZE_B), "--tensors",
                        "64", "stage"], capture_output=True, text=True)
    if p.returncode != 0:
        die("ckpt-bench stage failed: " + p.stderr)
    for line in p.stdout.splitlines():
        if line.startswith("staging_s="):
            return float(line.split("=", 1)[1])
    die("ckpt-bench printed no staging_s")


def scrub_rate(daemon, log_path, rate, seconds):
    """Bytes verified per second over `seconds` of a running pass (or what
    is left of it, when at least half a second: else over the next)."""
    reload(daemon, log_path, enabled=True, rate=rate, interval="1s")
    for _ in range(5):
        s0 = wait(lambda: (lambda s: s if s["state"] == "running" and s["bytes_verified"] > 0
                           else None)(status()), 10, "the scrub to read")
        t0 = time.monotonic()
        last, tlast = s0, t0
        while True:
            s = status()
            t = time.monotonic()
            if s["state"] != "running" or s["pass"] != s0["pass"]:
                break
            last, tlast = s, t
            if t - t0 >= seconds:
                break
            time.sleep(0.02)
        if tlast - t0 >= min(0.5, seconds):
            return (last["bytes_verified"] - s0["bytes_verified"]) / (tlast - t0)
    die("every pass ended before it could be measured")


def fio_read():
    path = os.path.join(WORK, "fio-read.dat")
    common = ["--ioengine=io_uring", "--direct=1", "--bs=1M", "--iodepth=16",
              "--size=%d" % SIZE_B, "--output-format=json", "--filename=" + path]
    subprocess.run(["fio", "--name=layout", "--rw=write", "--end_fsync=1"] + common,
                   check=True, capture_output=True)
    p = subprocess.run(["fio", "--name=read", "--rw=read"] + common, check=True,
                       capture_output=True, text=True)
    os.unlink(path)
    return json.loads(p.stdout)["jobs"][0]["read"]["bw_bytes"]


def main():
    write_conf(enabled=False)
    pool = max(2 * SIZE_B, 1 << 30)
    log_path = os.path.join(RES, "ckptd.log")
    with open(log_path, "w") as logf:
        daemon = subprocess.Popen([env["CKPTD"], "--config", CONF, "--state-dir",
                                   os.path.join(WORK, "state"), "--socket", SOCK,
                                   "--pool-size", str(pool), "--pool-slot-size", "64M",
                                   "--local-keep", "2", "--log-level", "info"],
                                  stdout=logf, stderr=subprocess.STDOUT)
    try:
        wait(lambda: os.path.exists(SOCK), 30, "ckptd's socket")
        stage()  # two committed steps of SIZE: what the scrub reads
        t_start = time.time()
        load_start = open("/proc/loadavg").read().split()[:3]
        runs = []
        for run in range(1, RUNS + 1):
            print("scrub.sh: run %d/%d" % (run, RUNS), file=sys.stderr)
            r = {}
            reload(daemon, log_path, enabled=False)
            r["staging_idle_s"] = stage()
            reload(daemon, log_path, enabled=True, rate="unlimited", interval="1s")
            wait(lambda: (status() or {}).get("state") == "running", 10, "a scrub pass")
            r["staging_scrub_s"] = stage()
            r["scrub_default_mbps"] = scrub_rate(daemon, log_path, "50M", 4.0) / MB
            r["scrub_unlimited_mbps"] = scrub_rate(daemon, log_path, "unlimited", 1.5) / MB
            reload(daemon, log_path, enabled=False)
            r["fio_read_mbps"] = fio_read() / MB
            with open(os.path.join(RES, "run-%d.txt" % run), "w") as f:
                f.write("".join("%s=%.6f\n" % kv for kv in r.items()))
            runs.append(r)
        duration = time.time() - t_start
        load_end = open("/proc/loadavg").read().split()[:3]
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)

    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    ratio = med["staging_scrub_s"] / med["staging_idle_s"]
    rows = [
        ("staging %s, scrub running ÷ scrub off" % human(SIZE_B),
         "%.3f s" % med["staging_scrub_s"], "%.3f s" % med["staging_idle_s"], "%.2f" % ratio,
         "≤ 1.10", "met" if ratio <= 1.10 else "**missed**"),
        ("scrub at its default rate (50M = 52.4 MB/s) ÷ fio O_DIRECT read",
         "%.1f MB/s" % med["scrub_default_mbps"], "%.1f MB/s" % med["fio_read_mbps"],
         "%.3f" % (med["scrub_default_mbps"] / med["fio_read_mbps"]),
         "the rate (52.4 MB/s ±25 %)",
         "met" if abs(med["scrub_default_mbps"] / 52.4288 - 1) <= 0.25 else "**missed**"),
        ("scrub unlimited ÷ fio O_DIRECT read",
         "%.1f MB/s" % med["scrub_unlimited_mbps"], "%.1f MB/s" % med["fio_read_mbps"],
         "%.2f" % (med["scrub_unlimited_mbps"] / med["fio_read_mbps"]), "(info)", ""),
    ]
    per_run = "; ".join(
        "run %d: %.3f / %.3f s, %.1f / %.1f / %.1f MB/s" % (
            i + 1, r["staging_scrub_s"], r["staging_idle_s"], r["scrub_default_mbps"],
            r["scrub_unlimited_mbps"], r["fio_read_mbps"]) for i, r in enumerate(runs))
    table = "\n".join("| " + " | ".join(row) + " |" for row in rows)
    section = f"""{BEGIN} (generated; edit bench/scrub.sh, not this block) -->
Command: `{env["CMDLINE"]}` — {time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}, {duration:.0f} s for
{RUNS} runs (medians). {human(SIZE_B)} per checkpoint in 64 shards, two committed steps
({human(2 * SIZE_B)}) on this node for the scrub to read; ckptd {env["BUILD_TYPE"]} build; state dir
on {env["FSTYPE"]} ({env["FSSRC"]}, scheduler `{env["SCHED"]}`); {env["FIO_VERSION"]}. Machine:
{env["NPROC"]} CPUs ({env["CPU"]}), kernel {env["KERNEL"]}; load average {" ".join(load_start)}
at the start, {" ".join(load_end)} at the end (shared and noisy).

| measurement | ckptd | reference | ratio | target | |
|---|---|---|---|---|---|
{table}

Per run (scrub running / off staging; default / unlimited scrub / fio read): {per_run}.
{END}"""
    print(section)
    with open(os.path.join(RES, "section.md"), "w") as f:
        f.write(section + "\n")
    if env.get("DOCS", "1") == "1":
        path = env["DOCS_FILE"]
        write_section(path, BEGIN, END, section,
                      "## Background scrub (issue 12) (`bench/scrub.sh`)")
        print("updated " + path, file=sys.stderr)


def human(b):
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if b >= n and b % n == 0:
            return "%d %s" % (b // n, unit)
    return "%d B" % b


main()
