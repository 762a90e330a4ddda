#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fail when a config key, a ckptctl command or a metric is not in its man page.

The operator reads the man pages, not the source: every key of the config
table (daemon/config.c keys[]) must be named in bold in ckptd.conf(5), every
command of ckptctl's command table (daemon/ctl/main.c commands[]) in
ckptctl(1), and every metric family the daemon exposes
(daemon/server/exposition.c) in ckptd(8).  The lists are read from the
source, so a key, command or metric added without its documentation fails
here, with its name and where it is defined.

"Named in bold" means a roff line `.B name`, `.BR name ...` (or `.BR a ", "
name ...`, where every other word is bold) or `\\fBname\\fR` inline: a name
that is only mentioned in passing in another entry's prose is not
documented.

Before reading the tree it checks itself on a few snippets, so that a
broken check cannot pass for want of finding anything.

Usage: man-coverage.py SOURCE_ROOT
"""
import os
import re
import sys

KEY = re.compile(r'\.section\s*=\s*"([a-z_]+)",\s*\.name\s*=\s*"([a-z_0-9]+)"')
COMMAND = re.compile(r'^\s*\{\s*"([a-z][a-z-]*)",\s*"', re.M)
METRIC = re.compile(r'"(ckptd_[a-z0-9_]+)"')
INLINE_BOLD = re.compile(r'\\fB(.*?)\\f[RPI]')


def roff_words(text):
    """The set of words set in bold anywhere in a roff page."""
    bold = set()
    for line in text.splitlines():
        line_plain = line.replace('\\-', '-').replace('\\(em', ' ')
        if line_plain.startswith('.B ') or line_plain.startswith('.BR ') or \
                line_plain.startswith('.BI '):
            macro, _, rest = line_plain.partition(' ')
            words = re.findall(r'"[^"]*"|\S+', rest)
            # .B: all bold; .BR/.BI: the 1st, 3rd, ... words.
            picked = words if macro == '.B' else words[0::2]
            for w in picked:
                bold.update(re.findall(r'[A-Za-z0-9_\[\]-]+', w.strip('"')))
        for m in INLINE_BOLD.finditer(line_plain):
            bold.update(re.findall(r'[A-Za-z0-9_\[\]-]+', m.group(1)))
    return bold


def missing(names, page_text):
    """The names (in order, without repeats) that page_text does not set in bold."""
    bold = roff_words(page_text)
    out = []
    for n in names:
        if n not in bold and n not in out:
            out.append(n)
    return out


def self_test():
    page = ('.TP\n.B size\nthe pool\n.BR "a" ", " b_c " gauges"\n'
            'text \\fBcluster\\fR here, and stop_timeout in prose\n')
    assert missing(['size', 'b_c', 'a', 'cluster'], page) == [], page
    assert missing(['stop_timeout'], page) == ['stop_timeout']
    assert missing(['gauges'], page) == ['gauges'], 'a roman word of .BR is not bold'
    src = ('{ .section = "pool", .name = "size", .type = TYPE_SIZE,\n'
           '  .section = "daemon", .name = "stop_timeout", x }')
    assert KEY.findall(src) == [('pool', 'size'), ('daemon', 'stop_timeout')]
    assert COMMAND.findall('        { "status", "status [--watch]",\n'
                           '        { "", 1 },\n') == ['status']
    assert METRIC.findall('gauge(t, "ckptd_clients", "x"); "ckptd_a_total"') == \
        ['ckptd_clients', 'ckptd_a_total']


def read(root, rel):
    with open(os.path.join(root, rel), encoding='utf-8') as f:
        return f.read()


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    self_test()
    root = sys.argv[1]
    checks = [
        ('daemon/config.c', 'docs/ckptd.conf.5', 'config key',
         lambda s: [name for _, name in KEY.findall(s)]),
        ('daemon/ctl/main.c', 'docs/ckptctl.1', 'ckptctl command',
         lambda s: COMMAND.findall(s[s.index('commands[]'):])),
        ('daemon/server/exposition.c', 'docs/ckptd.8', 'metric',
         lambda s: METRIC.findall(s)),
    ]
    failed = 0
    for src, page, what, extract in checks:
        names = extract(read(root, src))
        if not names:
            print(f'{src}: found no {what}s: the pattern no longer matches the source')
            failed += 1
            continue
        for name in missing(names, read(root, page)):
            print(f'{page}: {what} {name!r} ({src}) is not documented (not set in bold)')
            failed += 1
        print(f'{page}: {len(set(names))} {what}s checked')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
