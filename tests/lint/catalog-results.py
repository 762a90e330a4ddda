#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fail when a catalog_* result is dropped without a word outside catalog/.

STYLE.md: every error is handled or its discard explained.  The catalog is
an index of files that are already durable, so dropping one of its results
is often right, but the reader must be told why.  This reads daemon/*.c
(catalog/ excepted) with comments and strings blanked, and for every call
catalog_xxx(...) that starts a statement (after ; { } else, or as the body
of an if/for/while):
  - written bare: an error ("handle it, or (void) it with the reason");
  - written (void)catalog_xxx(...): the line before must end a comment.
Calls whose value is used (assigned, tested, returned, passed) are handled.

Usage: catalog-results.py DAEMON_DIR [-v]
"""
import glob
import os
import re
import sys


def blank(src):
    keep_lines = lambda m: re.sub(r'[^\n]', ' ', m.group())
    src = re.sub(r'/\*.*?\*/', keep_lines, src, flags=re.S)
    src = re.sub(r'//[^\n]*', keep_lines, src)
    return re.sub(r'"(\\.|[^"\\\n])*"', keep_lines, src)


def starts_statement(before):
    if not before or before[-1] in ';{}' or re.search(r'\belse$', before):
        return True
    if before[-1] != ')':
        return False
    depth, i = 0, len(before) - 1
    while i >= 0:
        if before[i] == ')':
            depth += 1
        elif before[i] == '(':
            depth -= 1
            if depth == 0:
                break
        i -= 1
    head = before[:i].rstrip()
    return bool(re.search(r'\b(if|for|while)$', head))


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root, verbose = sys.argv[1], '-v' in sys.argv[2:]
    files = sorted(f for f in glob.glob(os.path.join(root, '**', '*.c'), recursive=True)
                   if os.sep + 'catalog' + os.sep not in f)
    if not files:
        print(f'catalog-results: no sources under {root}', file=sys.stderr)
        return 2
    bad, voided, used = [], 0, 0
    for path in files:
        with open(path, encoding='utf-8') as fh:
            raw = fh.read()
        src, lines = blank(raw), raw.split('\n')
        for m in re.finditer(r'\bcatalog_[a-z_]+\s*\(', src):
            before = src[:m.start()].rstrip()
            lineno = src.count('\n', 0, m.start()) + 1
            where = f'{os.path.relpath(path, root)}:{lineno}: {m.group().rstrip("(").strip()}'
            if before.endswith('(void)'):
                voided += 1
                prev = lineno - 2
                while prev >= 0 and not lines[prev].strip():
                    prev -= 1
                if prev < 0 or not lines[prev].rstrip().endswith('*/'):
                    bad.append(f'{where}: (void) without a comment saying why')
            elif starts_statement(before):
                bad.append(f'{where}: result dropped; handle it, or (void) it with the reason')
            else:
                used += 1
                if verbose:
                    print(f'{where}: used')
    for b in bad:
        print(f'catalog-results: {b}')
    print(f'catalog-results: {used} used, {voided} discarded with a reason, '
          f'{len(bad)} wrong ({len(files)} files)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
