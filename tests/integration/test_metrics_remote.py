#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Metrics of the object-store tier (issue 14) against a real radosgw
(tests/s3/radosgw.sh; skips without Ceph or without promtool).

A daemon with [metrics] listen saves and commits two steps of a job; the
metrics taken while the first is still owed to the store count it in
the backlog; once both reached tier remote, GET /metrics and `ckptctl
metrics` pass `promtool check metrics`, count both steps in tier remote,
owe nothing, and ckptd_remote_uploaded_bytes_total equals the bytes of
the shards uploaded (the upload rate is rate() of it).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import check, free_ports, log, run_cases, save_node  # noqa: E402
from metricsdoc import (ctl_metrics, expect, parse, promtool_check,  # noqa: E402
                        require_promtool, scrape, value)
from objstore import start_store, wait_remote  # noqa: E402

MiB = 1 << 20
JOB = "flushed"
LAYOUT = {0: [("w", 6 * MiB + 17), ("opt", 4096 + 5), ("e", 0)]}


def case_flush(ctx):
    require_promtool()
    rctx = start_store(ctx)
    ctx.cleanups.append(rctx.cleanup)
    bucket = "metrics"
    rctx.store.s3.create_bucket(bucket)
    port = free_ports(1)[0]
    d = rctx.daemon("mr", bucket, pool="64M", slot="4M",
                    flags=["--metrics-listen=127.0.0.1:%d" % port]).start()
    ctx.daemons.append(d)
    per_step = sum(s for _, s in LAYOUT[0])

    save_node(d, JOB, 1, [0], 1, LAYOUT, seed=1)
    s = parse(scrape(port))
    expect(s, "ckptd_remote_enabled", 1)
    remote1 = value(s, "ckptd_steps", ckpt_job=JOB, tier="remote")
    backlog = value(s, "ckptd_remote_backlog_bytes")
    # the flush may be under way (objects and parts done count off) or
    # already done: then it owes nothing
    check((remote1 == 0 and 0 <= backlog <= per_step) or (remote1 == 1 and backlog == 0),
          "step 1 just committed: %d steps remote, backlog %d bytes (step: %d)"
          % (remote1, backlog, per_step))
    log("   right after the commit: backlog %d bytes" % backlog)
    wait_remote(d, JOB, 1)
    save_node(d, JOB, 2, [0], 1, LAYOUT, seed=2)
    wait_remote(d, JOB, 2)

    http_text = scrape(port)
    promtool_check(http_text, "GET /metrics after the flush")
    ctl_text = ctl_metrics(d)
    promtool_check(ctl_text, "ckptctl metrics after the flush")
    for text in (http_text, ctl_text):
        s = parse(text)
        expect(s, "ckptd_steps", 2, ckpt_job=JOB, tier="remote")
        expect(s, "ckptd_step_bytes", 2 * per_step, ckpt_job=JOB, tier="remote")
        expect(s, "ckptd_remote_backlog_bytes", 0)
        expect(s, "ckptd_remote_steps_pending", 0)
        expect(s, "ckptd_remote_steps_failed", 0)
        expect(s, "ckptd_remote_uploaded_bytes_total", 2 * per_step)
        expect(s, "ckptd_saved_bytes_total", 2 * per_step)
        expect(s, "ckptd_steps_committed_total", 2)
        expect(s, "ckptd_errors_total", 0, kind="remote")
        check(value(s, "ckptd_remote_requests_total") >= 6,
              "fewer object-store requests than objects")
    log("   uploaded %d bytes in %d requests" % (value(s, "ckptd_remote_uploaded_bytes_total"),
                                                 value(s, "ckptd_remote_requests_total")))


CASES = [
    (1, "a flush to radosgw in the metrics", case_flush),
]

if __name__ == "__main__":
    sys.exit(run_cases(CASES, "CKPT_METRICS_REMOTE_CASES", "ckptd-metrics-remote-"))
