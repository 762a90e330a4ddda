# SPDX-License-Identifier: MIT
"""An on-path attacker between two ckptd daemons: a TCP proxy on the
loopback that understands peer frames (docs/peer-protocol.md) but not the
key, and alters, injects or replays them.

Why: the peer link must refuse what an attacker on the network can do
without the pre-shared key -- change a replica's bytes and recompute every
checksum, insert a well-formed frame, replay a recorded one.  Nothing in a
real network does that on demand, so this proxy does it (a fake to inject
a fault a real part cannot produce; both daemons are real).

The proxy sits where the connecting daemon (the sender of replicas) thinks
the listening one is.  It frames both directions: a 24-byte header, the
body the header's length names, and after the handshake (version 2 and
later: the client's frames after its AUTH, the server's after AUTH_OK) a
16-byte tag it can neither check nor make.  Version 1 frames have no tag,
so the proxy works against a daemon of either version, which is how a test
shows what an old daemon accepts.

Client-to-server tampering, set with `plan` (a list consumed one transfer
at a time; "pass" when empty):

  recrc      flip a byte of the first DATA payload of a rank transfer and
             rewrite the manifest in its RANK_BEGIN so every CRC matches the
             flipped bytes (shard CRC, block CRC, the manifest's end line);
             the header lengths stay right.  To do that the proxy holds all
             client frames from the RANK_BEGIN to its RANK_END (forwarding
             them afterwards in their order).
  flip       flip the same byte, leave everything else alone.

With tagged=False the proxy sits between daemons that both run with
`peer_frame_mac = no` (no tags after the handshake): there a flipped
payload byte reaches the receiver, whose block CRC check refuses it.

inject(frame) writes a frame of the test's making between two client
frames; replay_last(type) writes again, verbatim (tag included), the last
client frame of that type.  `pongs` lists the value of every PONG the
server sent, so a test sees whether an injected or replayed PING was
answered.
"""
import os
import socket
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Daemon, crc32c, free_ports  # noqa: E402

MAGIC = 0x45504B43
HDR = struct.Struct("<IHHIIQ")  # magic, version, type, length, stream, seq
TAG = 16
HELLO, HELLO_REPLY, AUTH, AUTH_OK, ERROR = 1, 2, 3, 4, 5
RANK_BEGIN, DATA, RANK_END, RANK_ACK = 6, 7, 8, 9
PING, PONG = 13, 14


def frame(version, typ, stream, seq, body, tag=b""):
    return HDR.pack(MAGIC, version, typ, len(body), stream, seq) + body + tag


class Frame:
    def __init__(self, hdr, body, tag):
        self.hdr, self.body, self.tag = hdr, body, tag
        _, self.version, self.type, self.length, self.stream, self.seq = HDR.unpack(hdr)

    def bytes(self):
        return self.hdr + self.body + self.tag


def _readn(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _read_frame(sock, authed):
    hdr = _readn(sock, HDR.size)
    magic, version, _, length, _, _ = HDR.unpack(hdr)
    if magic != MAGIC:
        raise EOFError
    body = _readn(sock, length) if length else b""
    tag = _readn(sock, TAG) if authed and version >= 2 else b""
    return Frame(hdr, body, tag)


def _manifest_offset(body):
    """Where the manifest starts in a RANK_BEGIN body (see the layout)."""
    n = struct.unpack_from("<H", body, 0)[0]
    return 2 + n + 8 + 4 + 4 + 4 + 1 + 4


def _flip(data_frame):
    body = bytearray(data_frame.body)
    body[24] ^= 0x5A  # the payload's first byte, after the 24-byte data header
    return Frame(data_frame.hdr, bytes(body), data_frame.tag)


def _recrc(begin, data_frame):
    """The RANK_BEGIN with the manifest's CRCs recomputed for the flipped
    first block of data_frame's shard (the shard must be one block)."""
    shard = struct.unpack_from("<I", data_frame.body, 0)[0]
    off = _manifest_offset(begin.body)
    text = begin.body[off:].decode()
    lines = text.split("\n")
    crc = "%08x" % crc32c(data_frame.body[24:])
    k = -1
    for i, ln in enumerate(lines):
        if ln.startswith("shard "):
            k += 1
            if k == shard:
                f = ln.split(" ")
                lines[i] = " ".join(f[:3] + [crc])
                if lines[i + 1].startswith("blocks "):
                    lines[i + 1] = "blocks " + crc
    end = [i for i, ln in enumerate(lines) if ln.startswith("end ")][0]
    head = "\n".join(lines[:end]) + "\n"
    new = head + "end %08x\n" % crc32c(head.encode())
    body = begin.body[:off] + new.encode()
    assert len(body) == len(begin.body)
    return Frame(begin.hdr, body, begin.tag)


class PeerProxy:
    def __init__(self, upstream_port, host="127.0.0.1", tagged=True):
        self.upstream = (host, upstream_port)
        # False: both daemons run with peer_frame_mac = no, no frame has a tag
        self.tagged = tagged
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((host, 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.plan = []
        self.tampered = []      # (kind, connection, stream) per altered transfer
        self.acks = []          # (connection, stream, status) of every RANK_ACK
        self.pongs = []
        self.errors = []        # messages of every server ERROR
        self.connections = 0    # accepted so far; a connection's number is its count
        self.closed = 0
        self.closed_ids = set()
        self.last = {}          # client frame type -> its last Frame
        self.cur = None         # (client sock, server sock, write lock, state)
        self.stopping = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self):
        self.stopping = True
        self.lsock.close()

    def ready(self):
        """The current connection finished its handshake both ways."""
        with self.lock:
            c = self.cur
            return bool(c and c[3]["c_authed"] and c[3]["s_authed"])

    def _accept(self):
        while not self.stopping:
            try:
                cs, _ = self.lsock.accept()
            except OSError:
                return
            try:
                ss = socket.create_connection(self.upstream, timeout=5)
                ss.settimeout(None)
            except OSError:
                cs.close()
                continue
            with self.lock:
                self.connections += 1
                state = {"c_authed": False, "s_authed": False, "id": self.connections}
                conn = (cs, ss, threading.Lock(), state)
                self.cur = conn
            threading.Thread(target=self._c2s, args=(conn,), daemon=True).start()
            threading.Thread(target=self._s2c, args=(conn,), daemon=True).start()

    def _shut(self, conn):
        cs, ss, _, _ = conn
        for s in (cs, ss):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        with self.lock:
            if conn[3]["id"] not in self.closed_ids:
                self.closed_ids.add(conn[3]["id"])
                self.closed += 1
            if self.cur is conn:
                self.cur = None

    def _send(self, conn, sock, frames):
        with conn[2]:
            sock.sendall(b"".join(f.bytes() for f in frames))

    def _c2s(self, conn):
        cs, ss, _, state = conn
        held = None  # frames of a transfer being tampered with
        kind = None
        try:
            while True:
                f = _read_frame(cs, state["c_authed"] and self.tagged)
                if f.type == AUTH:
                    self._send(conn, ss, [f])
                    state["c_authed"] = True
                    continue
                with self.lock:
                    self.last[f.type] = f
                if held is None and f.type == RANK_BEGIN:
                    with self.lock:
                        kind = self.plan.pop(0) if self.plan else "pass"
                    if kind != "pass":
                        held = [f]
                        continue
                if held is not None:
                    held.append(f)
                    if f.type == RANK_END and f.stream == held[0].stream:
                        self._send(conn, ss, self._tamper(kind, held, state["id"]))
                        held = None
                    continue
                self._send(conn, ss, [f])
        except (EOFError, OSError):
            pass
        self._shut(conn)

    def _tamper(self, kind, held, conn_id):
        begin = held[0]
        i = next(i for i, f in enumerate(held) if f.type == DATA and f.stream == begin.stream)
        held[i] = _flip(held[i])
        if kind == "recrc":
            held[0] = _recrc(begin, held[i])
        with self.lock:
            self.tampered.append((kind, conn_id, begin.stream))
        return held

    def _s2c(self, conn):
        cs, ss, _, state = conn
        try:
            while True:
                f = _read_frame(ss, state["s_authed"] and self.tagged)
                with self.lock:
                    if f.type == PONG:
                        self.pongs.append(struct.unpack_from("<Q", f.body, 0)[0])
                    elif f.type == RANK_ACK:
                        self.acks.append((state["id"], f.stream,
                                          struct.unpack_from("<i", f.body, 0)[0]))
                    elif f.type == ERROR:
                        n = struct.unpack_from("<H", f.body, 8)[0]
                        self.errors.append(f.body[10:10 + n].decode(errors="replace"))
                cs.sendall(f.bytes())
                if f.type == AUTH_OK:
                    state["s_authed"] = True
        except (EOFError, OSError):
            pass
        self._shut(conn)

    def inject(self, typ, body, stream=0, seq=1 << 40):
        """Write a well-formed frame of the proxy's making to the server,
        between two client frames.  After the handshake it gets a tag of
        random bytes (the proxy has no key).  False: no connection."""
        with self.lock:
            conn = self.cur
        if not conn:
            return False
        v = self.last[HELLO].version if HELLO in self.last else 2
        tag = os.urandom(TAG) if v >= 2 else b""
        f = Frame(HDR.pack(MAGIC, v, typ, len(body), stream, seq), body, tag)
        self._send(conn, conn[1], [f])
        return True

    def replay_last(self, typ):
        """Write the client's last frame of type typ to the server again,
        verbatim.  The frame, or None."""
        with self.lock:
            conn, f = self.cur, self.last.get(typ)
        if not conn or not f:
            return None
        self._send(conn, conn[1], [f])
        return f


def two_daemons(tmp, proxy, psk, prefix, extra=()):
    """Node 0 and node 1 of a cluster of two (replication factor 2, not
    started), node 0 reaching node 1 through proxy: node 1 listens on the
    proxy's upstream port.  extra: flags both get."""
    p0 = next(p for p in free_ports(3) if p != proxy.upstream[1])
    peers = "127.0.0.1:%d,127.0.0.1:%d" % (p0, proxy.port)
    common = ["--cluster-node-count=2", "--cluster-peers=" + peers,
              "--cluster-replication-factor=2", "--cluster-psk-file=" + psk] + list(extra)
    n0 = Daemon(tmp, name=prefix + "0", pool="64M", slot="4M",
                extra=common + ["--cluster-node-index=0"])
    n1 = Daemon(tmp, name=prefix + "1", pool="64M", slot="4M",
                extra=common + ["--cluster-node-index=1",
                                "--cluster-listen=127.0.0.1:%d" % proxy.upstream[1]])
    n0.node, n1.node = 0, 1
    return n0, n1
