#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Metrics (issue 14): a live daemon's metrics, over HTTP ([metrics]
listen) and through `ckptctl metrics`, pass `promtool check metrics` and
count what the test did.

  1. saves, commits and restores: saved bytes and saves, steps committed,
     steps and bytes per tier of the job, catalog rows, histogram counts,
     restored bytes, a refused request; a save held open shows in the
     staged tier and the pool; HTTP and ckptctl give the same document;
     another uid's `ckptctl metrics` has no series of root's job.
  2. the METRICS pages of one document are consistent, and an offset past
     its end is refused with a clear error (raw protocol).
  3. per-job series stay bounded: 40 jobs give 32 of their own and the
     rest summed under ckpt_job="/other", with totals intact.
  4. a replication between two daemons on the loopback: the step counts
     as replicated, the target is up and owed nothing.
  5. [metrics] listen empty (the default): nothing listens; a bad address
     stops the start with a message naming the key.

Skips (77) when promtool (Debian package prometheus) is missing.
The object-store half is test_metrics_remote.py (suite remote), hostile
HTTP clients test_metrics_http.py.
"""
import os
import socket
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from cluster import Cluster, wait_replicated  # noqa: E402
from harness import (CKPTD, Daemon, check, check_log_clean, free_ports, log,  # noqa: E402
                     run_cases, save_node, shards_arg, wait_until)
from metricsdoc import (ctl_metrics, expect, parse, promtool_check,  # noqa: E402
                        require_promtool, scrape, value)

MiB = 1 << 20
NOBODY = 65534


def metrics_daemon(ctx, name="m", extra=(), pool="64M", slot="4M"):
    port = free_ports(1)[0]
    d = Daemon(ctx.tmp, name=name, pool=pool, slot=slot,
               extra=["--metrics-listen=127.0.0.1:%d" % port] + list(extra))
    d.metrics_port = port
    ctx.daemons.append(d)
    return d.start()


def both(d, what):
    """(samples over HTTP, samples through ckptctl), each promtool-checked."""
    http_text = scrape(d.metrics_port)
    promtool_check(http_text, "GET /metrics (%s)" % what)
    ctl_text = ctl_metrics(d)
    promtool_check(ctl_text, "ckptctl metrics (%s)" % what)
    return parse(http_text), parse(ctl_text)


LAYOUTS = {0: [("w", 3 * MiB + 17), ("opt", 4096 + 5)], 1: [("w", 2 * MiB + 3), ("e", 0)]}


def case_counts(ctx):
    require_promtool()
    # another uid must reach the socket
    os.chmod(ctx.tmp, 0o755)
    os.chmod(os.path.dirname(ctx.tmp), 0o755)
    d = metrics_daemon(ctx, extra=["--socket-mode", "0666"])
    job, steps = "counted", 3
    for step in range(1, steps + 1):
        save_node(d, job, step, [0, 1], 2, LAYOUTS, seed=step)
    per_step = sum(s for r in LAYOUTS for _, s in LAYOUTS[r])
    # a restore: every byte of rank 0 of step 3 through READ
    d.rank("verify", "--job", job, "--step", 3, "--rank", 0, "--shards",
           shards_arg(LAYOUTS[0]), "--seed", 3)
    restored = sum(s for _, s in LAYOUTS[0])
    # a refused request: a step that does not exist
    p = d.rank("commit", "--job", job, "--step", 99, check_rc=False)
    check(p.returncode != 0, "commit of a step never saved succeeded")

    h, c = both(d, "after the saves")
    for s, what in ((h, "HTTP"), (c, "ckptctl")):
        log("   checking the %s document" % what)
        expect(s, "ckptd_saves_total", 2 * steps)
        expect(s, "ckptd_saved_bytes_total", steps * per_step)
        expect(s, "ckptd_steps_committed_total", steps)
        expect(s, "ckptd_steps", steps, ckpt_job=job, tier="local")
        expect(s, "ckptd_steps", steps, ckpt_job=job, tier="committed")
        expect(s, "ckptd_steps", 0, ckpt_job=job, tier="staged")
        expect(s, "ckptd_steps", 0, ckpt_job=job, tier="remote")
        expect(s, "ckptd_step_bytes", steps * per_step, ckpt_job=job, tier="committed")
        expect(s, "ckptd_unwritten_bytes", 0)
        expect(s, "ckptd_jobs", 1)
        expect(s, "ckptd_catalog_rows", steps, table="checkpoints")
        expect(s, "ckptd_catalog_rows", 2 * steps, table="ranks")
        expect(s, "ckptd_catalog_rows", steps * 4, table="shards")
        expect(s, "ckptd_save_staging_seconds_count", 2 * steps)
        expect(s, "ckptd_commit_seconds_count", steps)
        expect(s, "ckptd_restored_bytes_total", restored)
        check(value(s, "ckptd_restore_read_seconds_count") == value(s, "ckptd_restore_reads_total")
              >= 1, "restore reads and their histogram disagree")
        check(value(s, "ckptd_errors_total", kind="request") >= 1,
              "the refused commit is not counted")
        check(value(s, "ckptd_disk_written_bytes_total") >= steps * per_step,
              "fewer bytes written to disk than saved")
        expect(s, "ckptd_pool_slots", 16)
        expect(s, "ckptd_remote_enabled", 0)
    # the same document but for what moves between two renderings
    moving = ("ckptd_uptime_seconds", "ckptd_clients", "ckptd_metrics_http_requests_total",
              "ckptd_errors_total")
    diff = [k for k in set(h) | set(c) if k[0] not in moving and h.get(k) != c.get(k)]
    check(not diff, "HTTP and ckptctl documents differ in %s" % sorted(diff)[:10])

    # another uid sees the node, not root's job
    other = parse(ctl_metrics(d, user=NOBODY))
    check(not [k for k in other if dict(k[1]).get("ckpt_job") == job],
          "uid %d sees series of root's job %s" % (NOBODY, job))
    expect(other, "ckptd_pool_slots", 16)

    # a save held open: staged tier, pool slots in use
    held = [("big", 6 * MiB)]
    p = d.rank_async("save", "--job", job, "--step", 10, "--rank", 0, "--world", 1,
                     "--shards", shards_arg(held), "--zero-copy", "--hold", 4000)
    try:
        line = p.stdout.readline()
        if line.strip() != "holding":
            p.wait(timeout=30)
            check(False, "the held save printed %r, exit %s: %s" % (line, p.returncode,
                                                                    p.stderr.read()))
        s = parse(scrape(d.metrics_port))
        expect(s, "ckptd_steps", 1, ckpt_job=job, tier="staged")
        expect(s, "ckptd_step_bytes", 6 * MiB, ckpt_job=job, tier="staged")
        check(value(s, "ckptd_pool_slots_used") >= 1, "a held window uses no slot")
        expect(s, "ckptd_saves_active", 1)
    finally:
        p.kill()
        p.wait()
    # a clean exit: nothing leaked (the ASan build's LeakSanitizer), no report
    rc = d.stop()
    check(rc == 0, "ckptd exited %s on SIGTERM" % rc)
    check_log_clean(d)


def raw_call(sock, typ, body, seq, version=7):
    sock.send(struct.pack("<IHHII", 0x54504B43, version, typ, 16 + len(body), seq) + body)
    rep = sock.recv(70000)
    _, _, rtype, length, rseq = struct.unpack("<IHHII", rep[:16])
    check(length == len(rep) and rseq == seq, "bad reply header")
    return rtype, rep[16:]


def case_pages(ctx):
    d = metrics_daemon(ctx)
    save_node(d, "paged", 1, [0, 1], 2, LAYOUTS)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(10)
    s.connect(d.socket)
    rtype, body = raw_call(s, 1, struct.pack("<HH", 2, 7), 1)  # HELLO 2..7
    check(rtype == 0x8001 and struct.unpack("<H", body[:2])[0] == 7,
          "HELLO did not agree on version 7: type %#x" % rtype)

    def page(offset, seq):
        rtype, body = raw_call(s, 25, struct.pack("<Q", offset), seq)
        check(rtype == 0x8000 | 25, "METRICS at %d answered type %#x: %r"
              % (offset, rtype, body[:200]))
        total, off, length = struct.unpack("<QQI", body[:20])
        check(off == offset and len(body) == 20 + length, "page header %d %d %d"
              % (total, off, length))
        return total, body[20:]

    total, first = page(0, 2)
    check(total == len(first) and first.startswith(b"# HELP "),
          "a first page of %d bytes of %d" % (len(first), total))
    # something changes between the two requests: the page still comes
    # from the document the first one rendered
    save_node(d, "paged", 2, [0, 1], 2, LAYOUTS)
    total2, rest = page(1000, 3)
    check(total2 == total and rest == first[1000:], "offset 1000 is not the same document")
    rtype, body = raw_call(s, 25, struct.pack("<Q", total + 1), 4)
    check(rtype == 0xffff, "an offset past the end answered %#x" % rtype)
    msg = body[4:].decode(errors="replace")
    check("past the end of the metrics document" in msg, "past-the-end message %r" % msg)
    # a new document from offset 0 sees step 2
    total3, again = page(0, 5)
    check(b'ckptd_steps_committed_total 2' in again, "offset 0 did not render anew")
    check(total3 == len(again), "the new document is %d bytes of %d" % (len(again), total3))
    # version 6 has no METRICS: malformed there
    rtype, body = raw_call(s, 25, struct.pack("<Q", 0), 6, version=6)
    check(rtype == 0xffff, "METRICS in version 6 answered %#x" % rtype)
    s.close()
    # the document a connection held is freed with it
    check(d.stop() == 0, "ckptd did not exit cleanly")
    check_log_clean(d)


def case_bounded(ctx):
    require_promtool()
    d = metrics_daemon(ctx)
    jobs = ["job%02d" % i for i in range(40)]
    procs = [d.rank_async("save", "--job", j, "--step", 1, "--rank", 0, "--world", 1,
                          "--shards", "a:%d" % (1000 + i), "--commit")
             for i, j in enumerate(jobs)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        check(p.returncode == 0, "a save failed: %s" % err)
    text = scrape(d.metrics_port)
    promtool_check(text, "40 jobs")
    s = parse(text)
    named = {dict(k[1])["ckpt_job"] for k in s if k[0] == "ckptd_steps"}
    check(len(named) == 33 and "/other" in named,
          "%d ckpt_job values (want 32 jobs and /other): %s" % (len(named), sorted(named)))
    check(named - {"/other"} == set(jobs[:32]), "not the first 32 jobs by name")
    expect(s, "ckptd_steps", 8, ckpt_job="/other", tier="committed")
    total = sum(v for k, v in s.items() if k[0] == "ckptd_step_bytes" and
                dict(k[1])["tier"] == "committed")
    check(total == sum(1000 + i for i in range(40)), "committed bytes sum to %d" % total)


def case_replication(ctx):
    require_promtool()
    ports = free_ports(2)
    cl = Cluster(ctx, 2, 2, extra=None)
    for d, port in zip(cl.nodes, ports):
        d.extra.append("--metrics-listen=127.0.0.1:%d" % port)
        d.metrics_port = port
    cl.start()
    cl.wait_control_links()
    job = "replicated"
    layouts = {r: [("w", MiB + 7 * r), ("o", 4096 + r)] for r in range(cl.world)}
    for n, d in enumerate(cl.nodes):
        save_node(d, job, 1, cl.ranks_of(n), cl.world, layouts, commit=False)
    for d in cl.nodes:
        d.rank("commit", "--job", job, "--step", 1)
    for d in cl.nodes:
        wait_replicated(d, job, 1)
    d0 = cl.nodes[0]
    mine = sum(s for r in cl.ranks_of(0) for _, s in layouts[r])
    # the catalog's acknowledgement lands right after the WAIT answer
    wait_until(lambda: parse(scrape(d0.metrics_port)).get(
        ("ckptd_steps", (("ckpt_job", job), ("tier", "replicated")))) == 1,
        timeout=10, what="node 0 to count the step as replicated")
    h, c = both(d0, "node 0 after replication")
    for s in (h, c):
        expect(s, "ckptd_replication_enabled", 1)
        expect(s, "ckptd_steps", 1, ckpt_job=job, tier="replicated")
        expect(s, "ckptd_step_bytes", mine, ckpt_job=job, tier="replicated")
        expect(s, "ckptd_replication_target_up", 1, node="1")
        expect(s, "ckptd_replication_steps_owed", 0, node="1")
        expect(s, "ckptd_saved_bytes_total", mine)
        expect(s, "ckptd_steps_committed_total", 1)


def case_config(ctx):
    d = Daemon(ctx.tmp, name="off", pool="64M", slot="4M")
    ctx.daemons.append(d)
    d.start()
    check("metrics: serving" not in d.read_log(), "an endpoint without [metrics] listen")
    # ckptctl metrics works without the HTTP endpoint
    check(ctl_metrics(d).startswith("# HELP "), "ckptctl metrics without [metrics] listen")
    conf = os.path.join(ctx.tmp, "bad.conf")
    with open(conf, "w") as f:
        f.write("[metrics]\nlisten = 127.0.0.1\n")
    p = subprocess.run([CKPTD, "--config", conf, "--state-dir", os.path.join(ctx.tmp, "bad"),
                        "--socket", os.path.join(ctx.tmp, "bad.sock")],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode != 0 and "[metrics] listen" in p.stderr,
          "a listen address without a port: exit %d, %r" % (p.returncode, p.stderr))
    log("   bad address: %s" % p.stderr.strip().splitlines()[0])
    # taken port: a clear error at start, not a silent daemon without metrics
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    d2 = Daemon(ctx.tmp, name="busy", pool="64M", slot="4M",
                extra=["--metrics-listen=127.0.0.1:%d" % port])
    ctx.daemons.append(d2)
    try:
        d2.start(wait=False)
        rc = d2.proc.wait(timeout=30)
    finally:
        busy.close()
    check(rc != 0 and "metrics: cannot listen on 127.0.0.1 port %d" % port in d2.read_log(),
          "a taken port: exit %s, log %s" % (rc, d2.read_log()[-500:]))


CASES = [
    (1, "saves, commits, a restore: the counters and both documents", case_counts),
    (2, "METRICS pages come from one rendering", case_pages),
    (3, "per-job series are bounded", case_bounded),
    (4, "a replication between two daemons", case_replication),
    (5, "[metrics] listen: off by default, bad values refused", case_config),
]

if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_METRICS_CASES", "ckptd-metrics-"))
