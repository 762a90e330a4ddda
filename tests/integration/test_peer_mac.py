#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Peer frames are authenticated after the handshake (issue 9, item 7).

Why: the PSK handshake proves who is at the other end of a peer link, but
without a MAC on every frame an attacker on the path (a compromised switch,
an ARP-spoofing neighbour) could change a replica's bytes and recompute
every CRC, or insert and replay frames.  A replica is what a node restores
from after losing its disk, so a silently altered one is a corrupt restore.

Two real daemons of one cluster (node 0 replicates to node 1) talk through
a proxy (peerproxy.py) that plays the attacker without the key.  What a
user relies on:

1. an altered transfer (a DATA payload byte flipped and every CRC in the
   manifest recomputed to match) is refused by the receiver, which logs it
   naming the sending node; the replica files on the receiver are absent
   or equal to the sender's, never the altered bytes; the sender reports
   it (log, and `ckptctl status` on its peers line);
2. the same with only the payload flipped (the DATA frame's own MAC);
3. once the proxy stops tampering, the transfer is retried and the replica
   is byte-for-byte the sender's;
4. a well-formed PING injected by the proxy is refused (never answered);
5. a recorded PING replayed verbatim, tag included, is refused;
6. a daemon of peer protocol version 1 is refused at HELLO with an ERROR it
   can read (version 1 framing) and a log line naming both versions.

On a daemon without frame MACs (peer protocol version 1) case 1 stores the
altered replica and case 4 answers the injected PING: the test fails there.
"""
import os
import socket
import struct
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from harness import (Daemon, check, check_log_clean, free_ports, log,  # noqa: E402
                     run_test, shards_arg, step_path, wait_until, write_psk)
import peerproxy  # noqa: E402

JOB = "mac.job"
STEP = 1
# One block each (<= 1 MiB), so the proxy can recompute every CRC; an
# empty shard too.
SHARDS = [("weights", 300000), ("state", 5000), ("empty", 0)]
SEED = 7


def replica_dir(d):
    return os.path.join(d.state_dir, "replica", "node-0", "jobs", JOB, "%020d" % STEP, "rank-0")


def local_dir(d):
    return os.path.join(step_path(d.state_dir, JOB, STEP), "rank-0")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check_nothing_corrupt(sender, receiver, what):
    """Every replica shard file on the receiver is absent or the sender's bytes."""
    rdir, ldir = replica_dir(receiver), local_dir(sender)
    for name, _ in SHARDS:
        p = os.path.join(rdir, name)
        if os.path.exists(p):
            check(read(p) == read(os.path.join(ldir, name)),
                  "%s: the receiver stored an altered replica: %s differs from the sender's "
                  "file\n--- receiver log ---\n%s" % (what, p, receiver.read_log()[-3000:]))


def outcome(proxy, n):
    """The n-th tampered transfer was answered (RANK_ACK) or its link closed."""
    with proxy.lock:
        if len(proxy.tampered) < n:
            return None
        _, conn, stream = proxy.tampered[n - 1]
        acks = [s for c, st, s in proxy.acks if (c, st) == (conn, stream)]
        if acks:
            return "ack %d" % acks[-1]
        if conn in proxy.closed_ids:
            return "closed"
    return None


def peers_line(d):
    """The peers: line of ckptctl status and the per-target line below it."""
    lines = d.ctl("status").stdout.splitlines()
    i = next((i for i, ln in enumerate(lines) if ln.startswith("peers:")), None)
    return " ".join(lines[i:i + 2]) if i is not None else ""


def hello_v1():
    """A HELLO of peer protocol version 1 from node 0 of 2."""
    body = struct.pack("<II", 0, 2) + os.urandom(32) + struct.pack("<H", 0)
    return peerproxy.frame(1, peerproxy.HELLO, 0, 1, body)


def frame_mac_switch(tmp):
    """[cluster] peer_frame_mac = no, on trusted networks: both nodes must say
    so (the handshake MAC covers the setting), and then frames go untagged."""
    psk = write_psk(os.path.join(tmp, "psk-switch"))

    def pair(tag, off0, off1):
        p0, p1 = free_ports(2)
        common = ["--cluster-node-count=2", "--cluster-replication-factor=2",
                  "--cluster-psk-file=" + psk,
                  "--cluster-peers=127.0.0.1:%d,127.0.0.1:%d" % (p0, p1)]
        nodes = []
        for i, off in enumerate((off0, off1)):
            d = Daemon(tmp, name="%s%d" % (tag, i), pool="64M", slot="4M",
                       extra=common + ["--cluster-node-index=%d" % i] +
                       (["--cluster-peer-frame-mac=no"] if off else []))
            d.node = i
            nodes.append(d.start())
        return nodes

    log("7. node 0 without frame MACs, node 1 with them: the handshake fails, saying why")
    a0, a1 = pair("mix", True, False)
    try:
        wait_until(lambda: "peer_frame_mac differs" in a0.read_log(), 20,
                   what="node 0 naming the setting when node 1 refuses it")
        check("carry no MAC" in a0.read_log(), "node 0 did not warn that its frames go "
              "unauthenticated")
        check("authenticated" not in " ".join(ln for ln in a1.read_log().splitlines()
                                             if "link from node 0" in ln),
              "node 1 authenticated a node with another peer_frame_mac")
    finally:
        for d in (a0, a1):
            check_log_clean(d)
            d.kill()

    log("8. both without frame MACs: replication works, untagged")
    b0, b1 = pair("off", True, True)
    try:
        b0.rank("save", "--job", JOB, "--step", STEP, "--rank", 0, "--world", 1,
                "--shards", shards_arg(SHARDS), "--seed", SEED)
        b0.rank("commit", "--job", JOB, "--step", STEP)
        p = b0.rank("wait", "--job", JOB, "--step", STEP, "--tier", "replicated",
                    "--timeout", 60000, check_rc=False, timeout=90)
        check(p.returncode == 0, "no replication between two nodes without frame MACs: %s\n%s"
              % (p.stderr, b0.read_log()[-3000:]))
        for name, _ in SHARDS:
            check(read(os.path.join(replica_dir(b1), name)) ==
                  read(os.path.join(local_dir(b0), name)),
                  "replica shard %s differs from the sender's" % name)
        for d in (b0, b1):
            check_log_clean(d)
            rc = d.stop()
            check(rc == 0, "node %d exited %s on SIGTERM" % (d.node, rc))
    finally:
        for d in (b0, b1):
            d.kill()


def main(tmp):
    two_nodes(tmp)
    frame_mac_switch(tmp)


def two_nodes(tmp):
    p1 = free_ports(1)[0]
    proxy = peerproxy.PeerProxy(p1)
    psk = write_psk(os.path.join(tmp, "psk"))
    # node 0 reaches node 1 through the proxy; node 1 listens on its own port
    n0, n1 = peerproxy.two_daemons(tmp, proxy, psk, "n")
    try:
        body(tmp, proxy, n0, n1, p1)
    finally:
        proxy.close()
        for d in (n0, n1):
            d.kill()


def body(tmp, proxy, n0, n1, p1):
    proxy.plan = ["recrc", "flip"]
    n0.start()
    n1.start()
    wait_until(proxy.ready, 30, what="the link from node 0 through the proxy")

    log("1. node 0 saves and commits; the proxy alters the transfer and fixes every CRC")
    n0.rank("save", "--job", JOB, "--step", STEP, "--rank", 0, "--world", 1,
            "--shards", shards_arg(SHARDS), "--seed", SEED)
    n0.rank("commit", "--job", JOB, "--step", STEP)
    res = wait_until(lambda: outcome(proxy, 1), 30, what="the altered transfer's outcome")
    log("   altered transfer (manifest CRCs recomputed): %s" % res)
    time.sleep(0.3)  # an acknowledged rank is renamed into place before its RANK_ACK
    check_nothing_corrupt(n0, n1, "payload flipped, CRCs recomputed")
    check(res == "closed", "the receiver answered the altered transfer with %s instead of "
          "refusing it" % res)
    wait_until(lambda: "from node 0" in n1.read_log() and "failed its MAC" in n1.read_log(),
               10, what="node 1 logging the refused frame, naming node 0")

    log("2. the proxy flips a payload byte only")
    res = wait_until(lambda: outcome(proxy, 2), 30, what="the second altered transfer")
    log("   altered transfer (payload only): %s" % res)
    time.sleep(0.3)
    check_nothing_corrupt(n0, n1, "payload flipped")
    check(res == "closed", "the receiver answered the altered DATA with %s" % res)
    wait_until(lambda: "(DATA) from node 0" in n1.read_log(), 10,
               what="node 1 logging the DATA frame that failed its MAC")
    log_n0 = n0.read_log()
    check("failed its MAC" in log_n0,
          "the sender does not report the refusal in its log:\n%s" % log_n0[-3000:])
    line = peers_line(n0)
    check("last link error" in line and "MAC" in line,
          "node 0's status does not say why its link went down: %r" % line)

    log("3. the proxy stops tampering: the retried transfer lands intact")
    p = n0.rank("wait", "--job", JOB, "--step", STEP, "--tier", "replicated", "--timeout", 60000,
                check_rc=False, timeout=90)
    check(p.returncode == 0, "replication did not complete after the attack stopped: %s\n"
          "--- node 0 ---\n%s\n--- node 1 ---\n%s" % (p.stderr, n0.read_log()[-3000:],
                                                      n1.read_log()[-3000:]))
    for name, size in SHARDS:
        rp = os.path.join(replica_dir(n1), name)
        check(os.path.isfile(rp), "the replica lacks shard %s" % name)
        check(read(rp) == read(os.path.join(local_dir(n0), name)),
              "replica shard %s differs from the sender's" % name)

    log("4. an injected PING is refused")
    wait_until(proxy.ready, 30, what="the link to come back")
    closed = proxy.closed
    check(proxy.inject(peerproxy.PING, struct.pack("<Q", 0xC0FFEE)), "no link to inject into")
    time.sleep(2)
    check(0xC0FFEE not in proxy.pongs, "node 1 answered a PING the proxy made up")
    check(proxy.closed > closed, "node 1 kept the link after an injected frame")
    wait_until(lambda: "(PING) from node 0" in n1.read_log(), 10,
               what="node 1 logging the injected PING")

    log("5. a replayed PING is refused")
    wait_until(proxy.ready, 30, what="the link to come back")
    with proxy.lock:
        proxy.last.pop(peerproxy.PING, None)
    # node 0 pings every 5 s
    wait_until(lambda: peerproxy.PING in proxy.last, 15, what="a PING from node 0")
    f = proxy.last[peerproxy.PING]
    value = struct.unpack_from("<Q", f.body, 0)[0]
    wait_until(lambda: value in proxy.pongs, 5, what="the PONG to node 0's PING")
    closed = proxy.closed
    check(proxy.replay_last(peerproxy.PING) is not None, "nothing to replay")
    time.sleep(2)
    check(proxy.pongs.count(value) == 1, "node 1 answered a replayed PING")
    check(proxy.closed > closed, "node 1 kept the link after a replayed frame")

    log("6. a daemon of peer protocol version 1 is refused at HELLO, in words it can read")
    s = socket.create_connection(("127.0.0.1", p1), timeout=5)
    s.sendall(hello_v1())
    hdr = peerproxy._readn(s, peerproxy.HDR.size)
    _, version, typ, length, _, _ = peerproxy.HDR.unpack(hdr)
    err = peerproxy._readn(s, length)
    s.close()
    code = struct.unpack_from("<i", err, 0)[0]
    n = struct.unpack_from("<H", err, 8)[0]
    msg = err[10:10 + n].decode()
    check(typ == peerproxy.ERROR and version == 1 and code == -93,
          "a version 1 HELLO got type %d version %d (error %d) back, not a version 1 ERROR "
          "-EPROTONOSUPPORT" % (typ, version, code))
    # the daemon speaks version 3 since the cluster-wide commit (issue 10)
    check("version 3" in msg and "version 1" in msg, "the ERROR does not name both versions: %r"
          % msg)
    wait_until(lambda: "speaks peer protocol version 1" in n1.read_log(), 5,
               what="node 1 logging the version 1 peer")
    check(n0.alive() and n1.alive(), "a daemon died")
    for d in (n0, n1):
        check_log_clean(d)
        rc = d.stop()
        check(rc == 0, "node %d exited %s on SIGTERM:\n%s" % (d.node, rc, d.read_log()[-3000:]))


if __name__ == "__main__":
    run_test(main)
