# SPDX-License-Identifier: MIT
#
# replication-overlap.py — part 3 of bench/replication.sh: did step A's
# replication really run while the trainer staged step B, and what did
# `ckptctl status` say then?
#
# Why from the daemon's log: ckpt-bench prints B's staging time only after
# B reached tier local, long after the staging itself ended, so the script
# cannot ask the daemon "at the end of the staging".  The daemon's log gives
# A's commit and A's "replicated to node 1" on one clock; B's staging began
# when A's commit returned and lasted stage_busy_s.  A poller that ran
# `ckptctl --json status` every 50 ms (lines "EPOCH JSON") gives the daemon's
# own answer at the last poll before the staging ended.
#
#   replication-overlap.py NODE0_LOG JOB STAGE_FILE POLL_FILE  -> key=value lines
import json
import re
import sys
from datetime import datetime

log_path, job, stage_path, poll_path = sys.argv[1:5]
stage = {}
for line in open(stage_path):
    k, _, v = line.strip().partition("=")
    stage[k] = v


def ts(line):
    m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}) ", line)
    return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S.%f").timestamp() if m else None


t_commit = t_repl = None
for line in open(log_path):
    if re.search(rf": job {re.escape(job)} step \d+: committed", line):
        t_commit = ts(line)
    elif re.search(rf"peers: job {re.escape(job)} step \d+ replicated to node", line):
        t_repl = ts(line)
if t_commit is None or t_repl is None or "stage_busy_s" not in stage:
    sys.exit(0)
t_end = t_commit + float(stage.get("stage_busy_after_commit_s", 0)) + float(stage["stage_busy_s"])
print("stage_repl_s=%.3f" % (t_repl - t_commit))
print("stage_repl_left_s=%.3f" % (t_repl - t_end))

last = None
for line in open(poll_path):
    t, _, rest = line.partition(" ")
    try:
        t = float(t)
        rep = json.loads(rest)["replication"]
    except (ValueError, KeyError, TypeError):
        continue
    if t_commit <= t <= t_end and rep is not None:
        last = (t, rep["pending"])
if last is not None:
    print("stage_pending_after=%d" % last[1])
    print("stage_pending_poll_before_end_s=%.3f" % (t_end - last[0]))
