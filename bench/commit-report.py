# SPDX-License-Identifier: MIT
#
# commit-report.py — bench/commit.sh's tables: medians and p90 of the
# per-step lines ckpt-bench commit wrote (commit_step=S latency_s=...),
# printed and written into docs/BENCHMARKS.md between the bench/commit.sh
# markers.  Settings come from the environment commit.sh exports.
import math
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runs import write_section  # noqa: E402

env = os.environ
RES = env["RESULTS"]
BEGIN = "<!-- BEGIN bench/commit.sh results"
END = "<!-- END bench/commit.sh results -->"


def load(name, label="commit"):
    """(steps, modes) of RESULTS/name: one dict per timed step of the
    daemons `label` names ("commit": this build's, "base_commit": the
    base's), the commit modes ckpt-bench reported; None when the file does
    not exist."""
    path = os.path.join(RES, name)
    if not os.path.exists(path):
        return None
    steps, modes = [], set()
    with open(path) as f:
        for line in f:
            if line.startswith(label + "_step="):
                d = dict(kv.split("=", 1) for kv in line.split())
                steps.append({k: (float(v) if k.endswith("_s") and k != "nodes_s" else v)
                              for k, v in d.items()})
            m = re.match(label + r"_mode=(\S+)", line)
            if m:
                modes.add(m.group(1))
    return steps, modes


def p90(xs):
    """Nearest-rank 90th percentile."""
    s = sorted(xs)
    return s[max(0, math.ceil(0.9 * len(s)) - 1)]


def ms(v):
    return f"{v * 1e3:.3f} ms"


def stats(steps, key="latency_s"):
    xs = [s[key] for s in steps]
    return statistics.median(xs), p90(xs), min(xs), max(xs)


rows = []
for nodes in env["NODES"].split():
    got = load("single.txt" if nodes == "1" else f"nodes-{nodes}.txt")
    if not got or not got[0]:
        raise SystemExit(f"commit-report.py: no steps measured for {nodes} daemon(s)")
    steps, modes = got
    mode = "/".join(sorted(modes)) if int(nodes) > 1 else "single node"
    med, q90, lo, hi = stats(steps)
    call = statistics.median(s["call_s"] for s in steps)
    spread = statistics.median(s["latency_s"] - s["first_node_s"] for s in steps)
    rows.append((nodes, mode, str(len(steps)), ms(med), ms(q90), f"{ms(lo)} – {ms(hi)}",
                 ms(call), ms(spread)))
hdr = ("daemons", "commit", "steps", "latency median", "p90", "min – max",
       "ckpt_commit call (median)", "first → last node (median)")
table = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
table += ["| " + " | ".join(r) + " |" for r in rows]
if any("per-node" in r[1] for r in rows):
    table.append("")
    table.append("*per-node*: these daemons do not carry a commit on node 0 to the other "
                 "nodes, so every node was sent its own `ckpt_commit` at the same instant "
                 "(today's protocol, not a cluster-wide commit).")

compare = []
base = load("single.txt", "base_commit")
if base and base[0]:
    new_steps = load("single.txt")[0]
    bm, b90, _, _ = stats(base[0])
    nm, n90, _, _ = stats(new_steps)
    r = nm / bm
    compare = [
        "| build | steps | latency median | p90 |",
        "|---|---|---|---|",
        f"| base: {env['BASE_DESC']} | {len(base[0])} | {ms(bm)} | {ms(b90)} |",
        f"| new: {env['NEW_DESC']} | {len(new_steps)} | {ms(nm)} | {ms(n90)} |",
        "",
        f"new ÷ base, medians: **{r:.2f}** (p90: {n90 / b90:.2f}); target ≤ 1.10: "
        f"{'met' if r <= 1.10 else '**not met**'}.",
    ]

shard = int(env["SHARD_B"])
section = f"""{BEGIN} (generated; edit bench/commit.sh, not this block) -->
Command: `{env["CMDLINE"]}` — {env["DATE"]}, {env["DURATION"]} s in all.
Each step: {env["RPN"]} ranks per daemon, {env["SHARDS"]} shards of {shard >> 10} KiB per
rank, {env["WARMUP"]} untimed warm-up steps before each measurement; `--local-keep 2`;
state dirs on {env["FSTYPE"]} ({env["FSSRC"]}). Machine: {env["NPROC"]} CPUs
({env["CPU"]}), kernel {env["KERNEL"]}; load average {env["LOAD_START"]} at the start,
{env["LOAD_END"]} at the end (shared and noisy). Latency = the last rank's
`ckpt_wait(LOCAL)` returned → the last node's `ckpt_wait(COMMITTED)` returned
(one process, one clock).

{chr(10).join(table)}
"""
if compare:
    section += f"""
Single node, this build against the base: both daemons running side by
side, measured in turns step by step (which goes first alternating):

{chr(10).join(compare)}
"""
section += f"""
Coordinator cost at 2,048 nodes (`python3 bench/commit-cost.py`, sizes are
the script's variables):

{env["COST_TABLE"]}
{END}"""

print()
print("\n".join(table))
if compare:
    print()
    print("\n".join(compare))
print(f"\nraw results: {RES}")
with open(os.path.join(RES, "section.md"), "w") as f:
    f.write(section + "\n")

if env.get("DOCS", "1") == "1":
    path = env["DOCS_FILE"]
    write_section(path, BEGIN, END, section, "## Commit latency (issue 10) (`bench/commit.sh`)")
    print(f"updated {path}", file=sys.stderr)
