#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Fail when an integration test module imports another test module.

STYLE.md "Python": integration tests share one harness (harness.py and the
shared helper modules next to it: cluster.py, objstore.py, peerproxy.py)
instead of each file growing its own, and a test module never imports
another test module.  Importing one couples two tests: an edit to one
breaks the other, importing runs its module-level code, and what one test
needs stays hidden in a file nobody reads as a library.

This parses every *.py of DIR (tests/integration) and reports, with file
and line, each import of a module named test_* anywhere in a file (at the
top or inside a function): `import test_x`, `from test_x import y`,
`from . import test_x`, importlib.import_module("test_x") and
__import__("test_x").  A shared helper module may not import a test module
either.  A file that does not parse fails too: it cannot be checked.

Before reading DIR it checks itself on a few snippets, so that a broken
check cannot pass for want of finding anything.

Usage: test-imports.py DIR
"""
import ast
import os
import sys


def is_test_module(name):
    """Whether a dotted module name is (inside) a test_* module."""
    return bool(name) and any(part.startswith('test_') for part in name.split('.'))


def imported_names(tree):
    """(line, module name, how it was written) of every import in tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, f'import {alias.name}'
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ''
            yield node.lineno, mod, f'from {"." * node.level}{mod} import ...'
            # from . import test_x: the names are modules; in an absolute
            # from-import they are a module's functions (harness has none
            # named test_*, but a helper named so is no test module)
            for alias in (node.names if node.level else ()):
                yield (node.lineno, alias.name,
                       f'from {"." * node.level}{mod} import {alias.name}')
        elif isinstance(node, ast.Call):
            fn = node.func
            called = (fn.id if isinstance(fn, ast.Name) else
                      fn.attr if isinstance(fn, ast.Attribute) else None)
            if called in ('import_module', '__import__') and node.args and \
                    isinstance(node.args[0], ast.Constant) and \
                    isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value, f'{called}({node.args[0].value!r})'


def offences(path, text):
    """Lines saying which import of path (its source text) names a test
    module; a file that does not parse is one line too."""
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as e:
        return [f'{path}:{e.lineno}: does not parse ({e.msg}), so its imports cannot be checked']
    return [f'{path}:{line}: {how}: a test module imports test module {name} '
            f'(move what both need into harness.py or a shared module)'
            for line, name, how in imported_names(tree) if is_test_module(name)]


SELF_CHECK = {
    'import test_replication\n': 1,
    'from test_replication import Cluster, layout\n': 1,
    'def f():\n    import test_remote\n    return test_remote.Ctx\n': 1,
    'from . import test_remote\n': 1,
    'import importlib\nm = importlib.import_module("test_remote")\n': 1,
    'm = __import__("test_remote")\n': 1,
    'import os, harness\nfrom cluster import Cluster\nfrom harness import run_test\n'
    'def test_x():\n    pass\n': 0,
    'from harness import test_helper\n': 0,
    'from .sub import test_x\n': 1,
}


def self_check():
    """Errors of this check on snippets whose answer is known."""
    errors = []
    for text, want in SELF_CHECK.items():
        got = len(offences('<self-check>', text))
        if got != want:
            errors.append(f'self-check: {want} offence(s) expected, {got} found in:\n{text}')
    return errors


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    errors = self_check()
    if errors:
        print('\n'.join(f'test-imports: {e}' for e in errors))
        return 1
    root = sys.argv[1]
    try:
        names = sorted(n for n in os.listdir(root) if n.endswith('.py'))
    except OSError as e:
        print(f'test-imports: {root}: {e}', file=sys.stderr)
        return 2
    tests = [n for n in names if n.startswith('test_')]
    if not tests:
        print(f'test-imports: no test_*.py under {root}', file=sys.stderr)
        return 2
    for name in names:
        path = os.path.join(root, name)
        with open(path, encoding='utf-8') as fh:
            errors += offences(path, fh.read())
    if errors:
        print('\n'.join(f'test-imports: {e}' for e in errors))
        return 1
    shared = [n for n in names if n not in tests]
    print(f'test-imports: {len(tests)} test modules import no test module '
          f'(shared: {", ".join(shared)})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
