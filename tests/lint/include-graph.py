#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fail on an include circle in daemon/ (STYLE.md: dependencies point one way).

Reads the #include "..." lines of every daemon/ source and header and checks
two graphs:

  modules  one node per folder of daemon/ (catalog, io, local, peer, ...),
           plus "top" for daemon/*.c|h (config, daemon, main, ckptctl).
           An edge A -> B when a file of A includes a header of B.
  headers  one node per daemon/ header; an edge when one includes another.

A cycle in either is printed with the include lines that make it, and the
exit status is 1.  Includes that do not resolve to a daemon/ file (proto/,
system headers, generated ckptd-config.h) are outside the graph.

Usage: include-graph.py DAEMON_DIR
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def module_of(rel):
    return rel.split('/')[0] if '/' in rel else 'top'


def find_cycle(graph):
    """A list of nodes forming a cycle (first == last), or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {n: WHITE for n in graph}
    stack = []

    def visit(n):
        colour[n] = GREY
        stack.append(n)
        for m in sorted(graph[n]):
            if colour.get(m, WHITE) == GREY:
                return stack[stack.index(m):] + [m]
            if colour.get(m, WHITE) == WHITE:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        colour[n] = BLACK
        return None

    for n in sorted(graph):
        if colour[n] == WHITE:
            c = visit(n)
            if c:
                return c
    return None


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if name.endswith(('.c', '.h')):
                path = os.path.join(dirpath, name)
                files[os.path.relpath(path, root)] = path
    if not any(f.endswith('.h') for f in files):
        print(f'include-graph: no headers under {root}', file=sys.stderr)
        return 2

    modules, headers, why = {}, {}, {}
    for rel, path in sorted(files.items()):
        with open(path, encoding='utf-8') as fh:
            text = fh.read()
        src = module_of(rel)
        modules.setdefault(src, set())
        if rel.endswith('.h'):
            headers.setdefault(rel, set())
        for lineno, inc in ((text.count('\n', 0, m.start()) + 1, m.group(1))
                            for m in INCLUDE.finditer(text)):
            if inc not in files:
                continue
            dst = module_of(inc)
            if dst != src:
                modules[src].add(dst)
                why.setdefault((src, dst), f'{rel}:{lineno}: #include "{inc}"')
            if rel.endswith('.h'):
                headers[rel].add(inc)
                why.setdefault((rel, inc), f'{rel}:{lineno}: #include "{inc}"')

    failed = False
    for name, graph in (('modules', modules), ('headers', headers)):
        cycle = find_cycle(graph)
        if cycle:
            failed = True
            print(f'include-graph: a circle between {name}: {" -> ".join(cycle)}')
            for a, b in zip(cycle, cycle[1:]):
                print(f'  {why[(a, b)]}')
    if failed:
        return 1
    order = ', '.join(f'{m} -> {{{", ".join(sorted(modules[m]))}}}'
                      for m in sorted(modules) if modules[m])
    print(f'include-graph: {len(files)} files, no circle; {order}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
