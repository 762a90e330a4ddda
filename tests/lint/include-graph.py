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
exit status is 1.

Within a folder listed in LAYERS the files also keep to their layers: a file
may include only its own header and those of lower layers (peer/: link knows
nothing of ranks, transfer nothing of replication or restores, replication
and neighbour_restore nothing of each other).  A file of such a folder that
is in no layer fails too, so that a new one gets a place.  Includes that do not resolve to a daemon/ file (proto/,
system headers, generated ckptd-config.h) are outside the graph.

A header listed in PRIVATE is the inside of one module split over several
files: only the files of its folder named after the module (remote/s3.c,
remote/s3_*.c) may include it.

Usage: include-graph.py DAEMON_DIR
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


# folder: layers, lowest first; each a list of file stems (x.c and x.h)
LAYERS = {
    'peer': [['auth', 'rkeys', 'replica_area'], ['framemac'], ['link'], ['transfer'],
             ['replication', 'neighbour_restore'], ['peers']],
}


# private header: the module whose files (STEM.c, STEM_*.c|h) alone include it
PRIVATE = {
    'remote/s3_internal.h': 's3',
}


def private_errors(includes):
    """Lines naming an include of a private header from outside its module."""
    errors = []
    for rel in sorted(includes):
        for lineno, inc in includes[rel]:
            owner = PRIVATE.get(inc)
            if owner is None:
                continue
            stem = stem_of(rel)
            if module_of(rel) != module_of(inc) or not (stem == owner or
                                                         stem.startswith(owner + '_')):
                errors.append(f'{rel}:{lineno}: #include "{inc}": private to '
                              f'{module_of(inc)}/{owner}*.c')
    return errors


def stem_of(rel):
    return os.path.splitext(os.path.basename(rel))[0]


def layer_errors(files, includes):
    """Lines saying which include breaks a folder's layering."""
    errors = []
    for folder, layers in LAYERS.items():
        rank = {stem: i for i, layer in enumerate(layers) for stem in layer}
        for rel in sorted(files):
            if module_of(rel) != folder:
                continue
            src = stem_of(rel)
            if src not in rank:
                errors.append(f'{rel}: in no layer of {folder}/ (add it to LAYERS)')
                continue
            for lineno, inc in includes.get(rel, []):
                if module_of(inc) != folder or stem_of(inc) == src:
                    continue
                dst = stem_of(inc)
                if dst not in rank or rank[dst] >= rank[src]:
                    errors.append(f'{rel}:{lineno}: #include "{inc}": {folder}/{dst} is not '
                                  f'below {folder}/{src}')
    return errors


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

    modules, headers, why, includes = {}, {}, {}, {}
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
            includes.setdefault(rel, []).append((lineno, inc))
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
    for line in layer_errors(files, includes):
        failed = True
        print(f'include-graph: a layer broken: {line}')
    for line in private_errors(includes):
        failed = True
        print(f'include-graph: a private header included: {line}')
    if failed:
        return 1
    order = ', '.join(f'{m} -> {{{", ".join(sorted(modules[m]))}}}'
                      for m in sorted(modules) if modules[m])
    print(f'include-graph: {len(files)} files, no circle; {order}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
