# SPDX-License-Identifier: MIT
"""The metrics document of the tests that read it (test_metrics.py,
test_metrics_http.py, test_metrics_remote.py): fetching it over HTTP and
through `ckptctl metrics`, validating it with Debian's promtool (package
prometheus), and parsing it into samples to compare with what a test did.

A shared helper module, not a test: test modules import it (and harness.py),
never one another (STYLE.md "Python", tests/lint/test-imports.py).
"""
import http.client
import re
import shutil
import subprocess

from harness import SkipTest, TestFailure, check

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')


def require_promtool():
    """promtool's path; SkipTest when it is not installed."""
    path = shutil.which("promtool")
    if not path:
        raise SkipTest("promtool is not installed (Debian package prometheus; "
                       "scripts/deps.sh --test installs it)")
    return path


def promtool_check(text, what):
    """`promtool check metrics` must accept text with no complaint at all
    (it also lints names, units and HELP texts)."""
    p = subprocess.run([require_promtool(), "check", "metrics"], input=text,
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and not p.stdout.strip() and not p.stderr.strip(),
          "promtool check metrics on %s exited %d: %s%s" % (what, p.returncode, p.stdout,
                                                            p.stderr))


def http_get(port, path="/metrics", method="GET", host="127.0.0.1", timeout=10):
    """(status, headers dict, body text) of one request."""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        c.close()


def scrape(port):
    """The document over HTTP, checked for status and content type."""
    status, headers, body = http_get(port)
    check(status == 200, "GET /metrics answered %d: %s" % (status, body[:300]))
    check(headers.get("content-type", "").startswith("text/plain; version=0.0.4"),
          "GET /metrics content type %r" % headers.get("content-type"))
    return body


def ctl_metrics(d, user=None):
    """The document through `ckptctl metrics`."""
    return d.ctl("metrics", user=user).stdout


def parse(text):
    """{(name, ((label, value), ...sorted)): float} of every sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise TestFailure("not a sample line: %r" % line)
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(samples, name, **labels):
    """The value of one sample; fails naming what is there when missing."""
    key = (name, tuple(sorted(labels.items())))
    if key not in samples:
        near = sorted("%s%s" % (n, dict(l)) for n, l in samples if n == name)
        raise TestFailure("no sample %s%s; there are: %s" % (name, labels, near[:20]))
    return samples[key]


def expect(samples, name, want, **labels):
    got = value(samples, name, **labels)
    check(got == want, "%s%s is %s, expected %s" % (name, labels or "", got, want))
