# SPDX-License-Identifier: MIT
"""Python bindings for libckpt: hand checkpoint shards to ckptd and read
them back.

    import ckptd
    with ckptd.Client() as c:                      # $CKPT_SOCKET or the default
        with c.save("llama", step, rank, world) as s:
            s.write("model.pt", tensor_bytes)      # any bytes-like object
        c.commit("llama", step)                    # after the job's barrier
        step, world = c.latest("llama")
        step, world, newest = c.latest_rank("llama", rank)  # min over ranks
        data = c.read("llama", step, rank, "model.pt")

A thin ctypes layer over libckpt.so (found through $CKPT_LIBRARY, then the
system's library path): every failure raises CkptError carrying the errno
and the daemon's own message; it is also the builtin OSError subclass of
that errno (TimeoutError for ETIMEDOUT, FileNotFoundError for ENOENT, ...).
Objects are not thread-safe; use one Client per thread.

Deadlines (ckpt.h, "Deadlines"): each request waits for the daemon's reply
at most Client(timeout_ms=...) / set_timeout() / $CKPT_TIMEOUT_MS (default
60 s); wait() and commit() their own timeout_ms plus 250 ms.  Running out
raises TimeoutError (a CkptError) and closes the connection: later calls
raise CkptError ENOTCONN; open a new Client.
"""
import ctypes
import ctypes.util
import errno as _errno
import os

__all__ = ["Client", "Save", "CkptError", "STAGED", "LOCAL", "COMMITTED", "STEP_LATEST"]

STAGED, LOCAL, COMMITTED = 1, 2, 3
STEP_LATEST = (1 << 64) - 1  # CKPT_STEP_LATEST: no bound


def _load():
    path = os.environ.get("CKPT_LIBRARY") or ctypes.util.find_library("ckpt") or "libckpt.so.0"
    lib = ctypes.CDLL(path)
    c_p = ctypes.c_void_p
    sig = {
        "ckpt_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(c_p)]),
        "ckpt_disconnect": (None, [c_p]),
        "ckpt_last_error": (ctypes.c_char_p, [c_p]),
        "ckpt_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "ckpt_save_begin": (ctypes.c_int, [c_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32,
                                           ctypes.c_uint32, ctypes.POINTER(c_p)]),
        "ckpt_save_write": (ctypes.c_int, [c_p, ctypes.c_char_p, c_p, ctypes.c_uint64]),
        "ckpt_save_finish": (ctypes.c_int, [c_p]),
        "ckpt_save_abort": (None, [c_p]),
        "ckpt_wait": (ctypes.c_int, [c_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int,
                                     ctypes.c_uint32]),
        "ckpt_commit": (ctypes.c_int, [c_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32]),
        "ckpt_latest": (ctypes.c_int, [c_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_uint64),
                                       ctypes.POINTER(ctypes.c_uint32)]),
        "ckpt_latest_rank": (ctypes.c_int, [c_p, ctypes.c_char_p, ctypes.c_uint32,
                                            ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64),
                                            ctypes.POINTER(ctypes.c_uint32),
                                            ctypes.POINTER(ctypes.c_uint64)]),
        "ckpt_shard_list": (ctypes.c_int, [c_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32,
                                           ctypes.POINTER(c_p), ctypes.POINTER(ctypes.c_size_t)]),
        "ckpt_shard_list_free": (None, [c_p]),
        "ckpt_read": (ctypes.c_int64, [c_p, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint32,
                                       ctypes.c_char_p, ctypes.c_uint64, c_p, ctypes.c_uint64]),
    }
    # Newer than libckpt 0.1: bound only when the library has them.
    optional = {
        "ckpt_set_timeout": (ctypes.c_int, [c_p, ctypes.c_uint32]),
        "ckpt_save_replaced": (ctypes.c_int, [c_p]),
        "ckpt_commit_async": (ctypes.c_int, [c_p, ctypes.c_char_p, ctypes.c_uint64]),
    }
    for name, (res, args) in list(sig.items()) + list(optional.items()):
        f = getattr(lib, name, None)
        if f is None and name in optional:
            continue
        f.restype = res
        f.argtypes = args
    return lib


_lib = None


def _l():
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


class _ShardInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 256), ("size", ctypes.c_uint64),
                ("crc32c", ctypes.c_uint32)]


_KINDS = {}


class CkptError(OSError):
    """A libckpt call failed: .errno is the errno, str() has the daemon's words.

    An instance is also the builtin subclass OSError picks for the errno
    (TimeoutError, FileNotFoundError, PermissionError, ...), so callers may
    catch either."""

    def __new__(cls, code, what, detail):
        if cls is CkptError:
            builtin = type(OSError(code, ""))
            if builtin is not OSError:
                cls = _KINDS.get(builtin)
                if cls is None:
                    cls = _KINDS[builtin] = type("Ckpt" + builtin.__name__,
                                                 (CkptError, builtin), {})
        # OSError takes its arguments in __new__ when a subclass overrides it
        return super().__new__(cls, code, "%s: %s" % (
            what, detail or _l().ckpt_strerror(-code).decode()))

    def __init__(self, code, what, detail):
        pass


def _enc(s):
    return s.encode() if isinstance(s, str) else bytes(s)


def _buffer_address(data):
    """(address, length, keepalive) of a bytes-like object without copying it."""
    mv = memoryview(data).cast("B")
    if mv.readonly:
        # ctypes needs a writable buffer to take an address; a read-only
        # object (bytes) is copied once into one.
        buf = ctypes.create_string_buffer(mv.tobytes(), mv.nbytes)
        return ctypes.addressof(buf), mv.nbytes, buf
    buf = (ctypes.c_char * mv.nbytes).from_buffer(mv)
    return ctypes.addressof(buf), mv.nbytes, (buf, mv)


class Client:
    """A connection to ckptd.  timeout_ms: how long each request waits for
    the daemon's reply (None: $CKPT_TIMEOUT_MS or 60 s; 0: forever); the
    connect itself always uses $CKPT_TIMEOUT_MS or 60 s."""

    def __init__(self, socket_path=None, timeout_ms=None):
        self._c = ctypes.c_void_p()
        r = _l().ckpt_connect(_enc(socket_path) if socket_path else None, ctypes.byref(self._c))
        if r < 0:
            msg = _l().ckpt_last_error(None)
            raise CkptError(-r, "connect", msg.decode() if msg else None)
        if timeout_ms is not None:
            self.set_timeout(timeout_ms)

    def set_timeout(self, timeout_ms):
        """Deadline of each later request without a timeout of its own (0: none)."""
        if not hasattr(_l(), "ckpt_set_timeout"):
            raise CkptError(_errno.EOPNOTSUPP, "set_timeout", "this libckpt predates deadlines")
        self._check(_l().ckpt_set_timeout(self._c, timeout_ms), "set_timeout")

    def _check(self, r, what):
        if r < 0:
            msg = _l().ckpt_last_error(self._c)
            raise CkptError(-r, what, msg.decode() if msg else None)
        return r

    def close(self):
        if self._c:
            _l().ckpt_disconnect(self._c)
            self._c = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def save(self, job, step, rank, world_size):
        s = ctypes.c_void_p()
        self._check(_l().ckpt_save_begin(self._c, _enc(job), step, rank, world_size,
                                         ctypes.byref(s)), "save_begin")
        return Save(self, s)

    def wait(self, job, step, tier=LOCAL, timeout_ms=60000):
        self._check(_l().ckpt_wait(self._c, _enc(job), step, tier, timeout_ms), "wait")

    def commit(self, job, step, timeout_ms=60000):
        self._check(_l().ckpt_commit(self._c, _enc(job), step, timeout_ms), "commit")

    def commit_async(self, job, step):
        """Ask the daemon to commit (job, step) once every rank is saved,
        whoever is still connected then, and return as soon as it has
        recorded the request: a trainer may exit right after
        (docs/commit.md).  wait(job, step, COMMITTED) or commit() wait for
        the commit itself.  CkptError EOPNOTSUPP when libckpt (before 0.5)
        or ckptd (protocol version < 4) has no commit requests."""
        if not hasattr(_l(), "ckpt_commit_async"):
            raise CkptError(_errno.EOPNOTSUPP, "commit_async",
                            "this libckpt predates ckpt_commit_async()")
        self._check(_l().ckpt_commit_async(self._c, _enc(job), step), "commit_async")

    def latest(self, job):
        step, world = ctypes.c_uint64(), ctypes.c_uint32()
        self._check(_l().ckpt_latest(self._c, _enc(job), ctypes.byref(step), ctypes.byref(world)),
                    "latest")
        return step.value, world.value

    def latest_rank(self, job, rank, below=None):
        """(step, world_size, newest): the newest committed step below `below`
        (None: no bound) that rank `rank` can be restored from, and the
        newest committed step the daemon knows of; step != newest means it
        fell back to an older step.  Take the minimum step over all ranks."""
        step, world, newest = ctypes.c_uint64(), ctypes.c_uint32(), ctypes.c_uint64()
        bound = STEP_LATEST if below is None else below
        self._check(_l().ckpt_latest_rank(self._c, _enc(job), rank, bound, ctypes.byref(step),
                                          ctypes.byref(world), ctypes.byref(newest)),
                    "latest_rank")
        return step.value, world.value, newest.value

    def shards(self, job, step, rank):
        """[(name, size, crc32c), ...] sorted by name."""
        lst, n = ctypes.c_void_p(), ctypes.c_size_t()
        self._check(_l().ckpt_shard_list(self._c, _enc(job), step, rank, ctypes.byref(lst),
                                         ctypes.byref(n)), "shard_list")
        try:
            arr = ctypes.cast(lst, ctypes.POINTER(_ShardInfo))
            return [(arr[i].name.decode(), arr[i].size, arr[i].crc32c) for i in range(n.value)]
        finally:
            _l().ckpt_shard_list_free(lst)

    def read_into(self, job, step, rank, shard, buf, offset=0):
        """Read len(buf) bytes from offset into a writable buffer; returns the count."""
        addr, length, keep = _buffer_address(buf)
        r = _l().ckpt_read(self._c, _enc(job), step, rank, _enc(shard), offset, addr, length)
        del keep
        return self._check(r, "read")

    def read(self, job, step, rank, shard, offset=0, length=None):
        """bytes [offset, offset+length) of a shard (to its end by default)."""
        if length is None:
            sizes = {n: s for n, s, _ in self.shards(job, step, rank)}
            if shard not in sizes:
                raise CkptError(_errno.ENOENT, "read", "no shard %r in rank %d" % (shard, rank))
            length = max(sizes[shard] - offset, 0)
        buf = bytearray(length)
        n = self.read_into(job, step, rank, shard, buf, offset)
        return bytes(buf[:n])


class Save:
    """One rank's save; finish() (or leaving a with-block) hands it over."""

    def __init__(self, client, handle):
        self._client = client
        self._s = handle

    def write(self, shard, data):
        """Copy a bytes-like object (bytes, bytearray, memoryview, numpy
        array, ...) into the daemon's shared memory as one shard."""
        addr, length, keep = _buffer_address(data)
        r = _l().ckpt_save_write(self._s, _enc(shard), addr, length)
        del keep
        self._client._check(r, "save_write %s" % shard)

    @property
    def replaced(self):
        """True when this save replaces an earlier copy of its rank (the step
        is not committed, and the rank was saved before), False when it is
        the rank's first copy.  Ask before finish().  CkptError EOPNOTSUPP
        when libckpt (before 0.4) or ckptd (protocol version 2) cannot say."""
        if not self._s:
            raise CkptError(_errno.EINVAL, "replaced", "the save is finished or aborted")
        if not hasattr(_l(), "ckpt_save_replaced"):
            raise CkptError(_errno.EOPNOTSUPP, "replaced",
                            "this libckpt predates ckpt_save_replaced()")
        r = _l().ckpt_save_replaced(self._s)
        if r < 0:
            raise CkptError(-r, "replaced", "ckptd speaks protocol version 2 only: it cannot "
                            "say whether a save replaced an earlier copy"
                            if r == -_errno.EOPNOTSUPP else None)
        return r == 1

    def finish(self):
        s, self._s = self._s, None
        self._client._check(_l().ckpt_save_finish(s), "save_finish")

    def abort(self):
        if self._s:
            _l().ckpt_save_abort(self._s)
            self._s = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None and self._s:
            self.finish()
        else:
            self.abort()
