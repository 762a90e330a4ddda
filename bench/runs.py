# SPDX-License-Identifier: MIT
#
# runs.py — what the bench reports share: the per-run key=value files a
# bench script writes (run-1.txt, run-2.txt, ...), in run order.
import glob
import os
import re


def load_runs(directory):
    """One dict per run-N.txt in directory, by N; values that are numbers."""
    runs = []
    for path in sorted(glob.glob(os.path.join(directory, "run-*.txt")),
                       key=lambda p: int(re.search(r"run-(\d+)", p).group(1))):
        d = {}
        with open(path) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                try:
                    d[k] = float(v)
                except ValueError:
                    pass
        runs.append(d)
    return runs


def write_section(path, begin, end, section, heading):
    """Put section (which starts with begin and ends with end) into the
    markdown file at path in place of the block between those markers, or
    append it under heading when there is none yet; atomically."""
    with open(path) as f:
        text = f.read()
    if begin in text and end in text:
        a = text.index(begin)
        b = text.index(end) + len(end)
        text = text[:a] + section + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + heading + "\n\n" + section + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
