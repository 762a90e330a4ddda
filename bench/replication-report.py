# SPDX-License-Identifier: MIT
#
# replication-report.py — the medians, the table and the summary line of
# bench/replication.sh, from its per-run key=value files; what it needs
# comes from the environment bench/replication.sh exports.  Ratios are of
# the medians; the limit of a run is min(iperf3, fio write) of that run.
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import load_runs  # noqa: E402

env = os.environ
runs = load_runs(env["RESULTS"])
for d in runs:
    if "fio_write_mbps" in d and "iperf3_mbps" in d:
        d["limit_mbps"] = min(d["fio_write_mbps"], d["iperf3_mbps"])
    for k in ("repl", "repl_sep", "restore", "restore_sep"):
        if f"{k}_mbps" in d and "limit_mbps" in d:
            d[f"{k}_ratio"] = d[f"{k}_mbps"] / d["limit_mbps"]
    if "stage_busy_s" in d and "stage_idle_s" in d:
        d["stage_ratio"] = d["stage_busy_s"] / d["stage_idle_s"]
if not runs:
    raise SystemExit("replication-report.py: no runs in " + env["RESULTS"])


def med(k):
    vals = [r[k] for r in runs if k in r]
    return statistics.median(vals) if vals else None


def fmt(v, f):
    return "n/a" if v is None else f % v


def met(ok):
    return "—" if ok is None else ("yes" if ok else "**no**")


gib = int(env["STEP_B"]) / (1 << 30)
lim, fio, ipf = med("limit_mbps"), med("fio_write_mbps"), med("iperf3_mbps")
rows = []
rp = med("repl_mbps")
r1 = rp / lim if rp and lim else None
rows.append((f"1. replication of a {gib:g} GiB step ({env['RANKS']} ranks x {env['SHARDS']} shards), "
             "commit → tier replicated ÷ limit",
             fmt(rp, "%.0f MB/s") + fmt(med("repl_s"), " (%.2f s)"), fmt(lim, "%.0f MB/s"),
             fmt(r1, "%.2f"), "≥ 0.80", met(None if r1 is None else r1 >= 0.80)))
loop = env.get("DEVICES") == "loop"
rows.append(("1a. the limit: min(fio O_DIRECT write on " +
             ("node 1's own device" if loop else "the shared filesystem") +
             ", iperf3 loopback 1 stream)", "—",
             f"{fmt(fio, '%.0f')} / {fmt(ipf, '%.0f')} MB/s", "—", "(info)", "—"))
fsh = med("fio_write_shared_mbps")
if fsh:
    rows.append(("1a'. shared-disk variant: fio O_DIRECT write on the scratch dir's filesystem "
                 "(the loop images' backing disk); replication ÷ min(it, iperf3)", "—",
                 f"{fsh:.0f} MB/s", fmt(rp / min(fsh, ipf) if rp and ipf else None, "%.2f"),
                 "(info)", "—"))
mw, mr = med("fio_mixed_write_mbps"), med("fio_mixed_read_mbps")
if mw:
    rows.append(("1b. replication ÷ fio write with a concurrent fio read on the same disk (both "
                 "daemons share one disk here: node 0 reads the step while node 1 writes it)",
                 fmt(rp, "%.0f MB/s"), f"{mw:.0f} MB/s (read meanwhile {fmt(mr, '%.0f')} MB/s)",
                 fmt(rp / mw if rp else None, "%.2f"), "(info)", "—"))
rows.append(("1c. of 1: the commit call itself", fmt(med("repl_commit_s"), "%.3f s"), "—", "—",
             "(info)", "—"))
rows.append(("1d. daemon CPU s per GB replicated: sender (node 0) / receiver (node 1); "
             "reference: fio's own CPU per GB written",
             f"{fmt(med('repl_sender_cpu_s_per_gb'), '%.3f')} / "
             f"{fmt(med('repl_receiver_cpu_s_per_gb'), '%.3f')} s/GB",
             fmt(med("fio_write_cpu_s_per_gb"), "%.3f s/GB"), "—", "(info)", "—"))
rps = med("repl_sep_mbps")
r1s = rps / lim if rps and lim else None
if rps:
    rows.append(("1s. the same replication with node 0's state dir on a tmpfs: the sender's reads "
                 "(what its memory tier does not hold) no longer share node 1's disk (as on two "
                 "machines), which only writes, like the limit's fio",
                 fmt(rps, "%.0f MB/s") + fmt(med("repl_sep_s"), " (%.2f s)"),
                 fmt(lim, "%.0f MB/s"), fmt(r1s, "%.2f"), "≥ 0.80",
                 met(None if r1s is None else r1s >= 0.80)))
    rows.append(("1t. of 1s: daemon CPU s per GB replicated, sender / receiver",
                 f"{fmt(med('repl_sep_sender_cpu_s_per_gb'), '%.3f')} / "
                 f"{fmt(med('repl_sep_receiver_cpu_s_per_gb'), '%.3f')} s/GB",
                 "—", "—", "(info)", "—"))
rs = med("restore_mbps")
r2 = rs / lim if rs and lim else None
rows.append((f"2. restore of a lost node: empty state dir, start → {gib:g} GiB step back "
             "(pulled from node 1) ÷ limit",
             fmt(rs, "%.0f MB/s") + fmt(med("restore_s"), " (%.2f s)"), fmt(lim, "%.0f MB/s"),
             fmt(r2, "%.2f"), "≥ 0.80", met(None if r2 is None else r2 >= 0.80)))
rows.append(("2a. daemon CPU s per GB restored: sender (node 1) / receiver (node 0, from its "
             "socket up, pool ready); the receiver's start-up apart (start → socket up) and its "
             "whole life per GB",
             f"{fmt(med('restore_sender_cpu_s_per_gb'), '%.3f')} / "
             f"{fmt(med('restore_receiver_cpu_s_per_gb'), '%.3f')} s/GB; start-up "
             f"{fmt(med('restore_receiver_startup_cpu_s'), '%.3f')} s; life "
             f"{fmt(med('restore_receiver_life_cpu_s_per_gb'), '%.3f')} s/GB",
             "—", "—", "(info)", "—"))
rsk = med("restore_start_to_socket_s")
rest = None
if rsk is not None and med("restore_s"):
    rest = int(env["STEP_B"]) / (med("restore_s") - rsk) / 1e6 if med("restore_s") > rsk else None
    rows.append(("2b. of 2: start → the daemon's socket up (pool set-up, catalogs); the rate from "
                 "there on ÷ limit", f"{rsk:.2f} s; " + fmt(rest, "%.0f MB/s"),
                 fmt(lim, "%.0f MB/s"), fmt(rest / lim if rest and lim else None, "%.2f"),
                 "(info)", "—"))
if mw and rs:
    rows.append(("2c. restore ÷ fio write with a concurrent fio read on the same disk (node 1 reads "
                 "while node 0 writes); from start / from the socket up",
                 fmt(rs, "%.0f MB/s") + " / " + fmt(rest if rsk is not None else None, "%.0f MB/s"),
                 f"{mw:.0f} MB/s", f"{rs / mw:.2f}" + (f" / {rest / mw:.2f}" if rsk is not None and rest else ""),
                 "(info)", "—"))
rss = med("restore_sep_mbps")
r2s = rss / lim if rss and lim else None
if rss:
    rows.append(("2d. the same restore with node 1's state dir on a tmpfs: node 1's reads no longer "
                 "share node 0's disk (as on two machines), which only writes, like the limit's fio",
                 fmt(rss, "%.0f MB/s") + fmt(med("restore_sep_s"), " (%.2f s)"),
                 fmt(lim, "%.0f MB/s"), fmt(r2s, "%.2f"), "≥ 0.80",
                 met(None if r2s is None else r2s >= 0.80)))
    rows.append(("2e. of 2d: start → socket up; daemon CPU s per GB restored, sender / receiver",
                 fmt(med("restore_sep_start_to_socket_s"), "%.2f s; ") +
                 f"{fmt(med('restore_sep_sender_cpu_s_per_gb'), '%.3f')} / "
                 f"{fmt(med('restore_sep_receiver_cpu_s_per_gb'), '%.3f')} s/GB",
                 "—", "—", "(info)", "—"))
si, sb = med("stage_idle_s"), med("stage_busy_s")
r3 = sb / si if si and sb else None
r3_runs = med("stage_ratio")
rows.append((f"3. staging {int(env['STAGE_B']) / (1 << 30):g} GiB right after a commit, during its "
             "replication ÷ with the daemons idle",
             fmt(sb, "%.3f s"), fmt(si, "%.3f s"),
             fmt(r3, "%.2f") + fmt(r3_runs, " (median of the runs' ratios: %.2f)"), "≤ 1.10",
             met(None if r3 is None else r3 <= 1.10)))
pend = [int(r["stage_pending_after"]) for r in runs if "stage_pending_after" in r]
pend_runs = sum(1 for r in runs if "stage_busy_s" in r)
if pend_runs:
    before = [r["stage_pending_poll_before_end_s"] for r in runs
              if "stage_pending_poll_before_end_s" in r]
    rows.append(("3a. `ckptctl --json status` (polled every 50 ms), last answer before B's "
                 "staging ended: step copies owed (per run; how long before the end)",
                 " / ".join(f"{int(r['stage_pending_after'])} ({r['stage_pending_poll_before_end_s']:.2f} s)"
                            if "stage_pending_after" in r else "no poll in time" for r in runs),
                 "—", "—", "> 0",
                 "yes" if len(pend) == pend_runs and all(p > 0 for p in pend) else "**no**"))
left = [r["stage_repl_left_s"] for r in runs if "stage_repl_left_s" in r]
if left:
    rows.append(("3b. A's replication (node 0's log): still running for this long after B's "
                 "staging ended (per run); A took in all",
                 " / ".join(f"{v:.2f} s" for v in left) + "; " + fmt(med("stage_repl_s"), "%.2f s"),
                 "—", "—", "> 0", "yes" if all(v > 0 for v in left) else "**no**"))
ci, cb = med("control_stage_idle_s"), med("control_stage_busy_s")
if ci and cb:
    rows.append(("3c. control, a lone daemon without replication: staging right after a commit "
                 "÷ idle", f"{cb:.3f} s", f"{ci:.3f} s", f"{cb / ci:.2f}", "(info)", "—"))

hdr = ("measurement", "ckptd", "reference", "ratio", "target", "met?")
table = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
table += ["| " + " | ".join(r) + " |" for r in rows]

per_run_keys = ["fio_write_mbps", "fio_write_shared_mbps", "fio_mixed_write_mbps", "iperf3_mbps", "repl_mbps", "repl_ratio", "repl_sep_mbps", "repl_sep_ratio", "restore_mbps",
                "restore_ratio", "restore_sep_mbps", "restore_sep_ratio", "stage_idle_s", "stage_busy_s", "stage_ratio",
                "stage_pending_after", "stage_repl_left_s", "stage_repl_s", "control_stage_idle_s",
                "control_stage_busy_s", "repl_sender_cpu_s_per_gb", "repl_receiver_cpu_s_per_gb",
                "restore_sender_cpu_s_per_gb", "restore_receiver_cpu_s_per_gb",
                "restore_start_to_socket_s", "restore_receiver_startup_cpu_s"]
per_run_keys = [k for k in per_run_keys if any(k in r for r in runs)]
per_run = ["| run | " + " | ".join(per_run_keys) + " |", "|" + "---|" * (len(per_run_keys) + 1)]
for i, r in enumerate(runs, 1):
    per_run.append(f"| {i} | " + " | ".join(f"{r[k]:.4g}" if k in r else "—"
                                             for k in per_run_keys) + " |")

head = (f"bench/replication.sh: {env['RUNS']} runs, medians; {gib:g} GiB step "
        f"({env['RANKS']} ranks x {env['SHARDS']} shards x {int(env['SHARD_B']) >> 20} MiB), "
        f"pool {int(env['POOL_B']) >> 20} MiB / slot {int(env['SLOT_B']) >> 20} MiB; "
        f"{env['NPROC']} CPUs, kernel {env['KERNEL']}; scratch dir on {env['FSTYPE']} "
        f"({env['FSSRC']}), state dirs: {env.get('DEVICE_DESC', '?')}; "
        f"shmem huge pages: {env.get('SHMEM_POLICY') or '?'}; build {env['BUILD']} ({env['BUILDTYPE']}); {env['FIO_VERSION']}, "
        f"{env['IPERF_VERSION']} ({env['IPERF_S']} s); load {env['LOAD_START']} -> "
        f"{env['LOAD_END']}; {env['DURATION']} s")
print()
print(head)
print()
print("\n".join(table))
print()
print("MB/s are 10^6 bytes per second; CPU per GB is per 10^9 bytes.")
print()
print("\n".join(per_run))

summary = {"runs": env["RUNS"], "step_bytes": env["STEP_B"], "stage_bytes": env["STAGE_B"]}
summary["devices"] = env.get("DEVICES", "shared")
for k in ("repl_mbps", "repl_sep_mbps", "restore_mbps", "restore_sep_mbps", "fio_write_mbps", "fio_write_shared_mbps",
          "fio_mixed_write_mbps", "iperf3_mbps", "limit_mbps",
          "stage_idle_s", "stage_busy_s", "control_stage_idle_s", "control_stage_busy_s",
          "repl_sender_cpu_s_per_gb", "repl_receiver_cpu_s_per_gb",
          "restore_sender_cpu_s_per_gb", "restore_receiver_cpu_s_per_gb"):
    v = med(k)
    summary[k] = "na" if v is None else "%.4f" % v
summary["repl_ratio"] = "na" if r1 is None else "%.3f" % r1
summary["repl_sep_ratio"] = "na" if r1s is None else "%.3f" % r1s
summary["restore_ratio"] = "na" if r2 is None else "%.3f" % r2
summary["restore_sep_ratio"] = "na" if r2s is None else "%.3f" % r2s
summary["stage_ratio"] = "na" if r3 is None else "%.3f" % r3
summary["stage_ratio_median_of_runs"] = "na" if r3_runs is None else "%.3f" % r3_runs
summary["stage_overlapped"] = "na" if not left else "%d/%d" % (sum(v > 0 for v in left), len(left))
summary["stage_pending_seen"] = "na" if not pend_runs else "%d/%d" % (sum(p > 0 for p in pend), pend_runs)
line = "REPL_BENCH " + " ".join(f"{k}={v}" for k, v in summary.items())
print()
print(line)
with open(env["RAW"], "a") as f:
    f.write(line + "\n")
with open(os.path.join(env["RESULTS"], "table.md"), "w") as f:
    f.write(head + "\n\nCommand: `" + env["CMDLINE"] + "`\n\n" + "\n".join(table) + "\n\n" +
            "\n".join(per_run) + "\n\n" + line + "\n")
print(f"raw results: {env['RESULTS']}")
