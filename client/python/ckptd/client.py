# SPDX-License-Identifier: MIT
"""Client, Save, ShardWriter and Mapping: libckpt's API in Python.

One :class:`Client` is one connection to the node's ckptd.  A rank saves
with :meth:`Client.save` (a :class:`Save`: whole shards from any buffer or
tensor with :meth:`Save.write` / :meth:`Save.writev`, or zero-copy windows
with :meth:`Save.shard`), then commits; a restore finds the step
(:meth:`Client.latest`, :meth:`Client.latest_rank`), lists the rank's shards
and reads them (:meth:`Client.read`, :meth:`Client.read_into`) or maps them
(:meth:`Client.map`).

Copies: a contiguous object is copied once, by libckpt, straight into the
daemon's shared-memory slot (CRC32C folded into that copy); a strided one
is copied once too, element range by element range into the slot windows.
Reads land in the caller's memory directly.  See docs/python.md.

The GIL: every libckpt call goes through ctypes.CDLL, which releases the GIL
for the call, so copies, reads, waits and commits do not stop other Python
threads.  A Client may be shared between threads (libckpt serialises calls
on a connection) but the error message of a failure is per connection, so
give each thread its own Client when they work in parallel.  A Save and its
ShardWriters belong to one thread at a time.
"""
from __future__ import annotations

import contextlib
import ctypes
import enum
import errno as _errno
import os
import warnings
import weakref
from typing import (Any, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple,
                    Union)

from . import _buffers, _lib
from .errors import Error

__all__ = ["Client", "Save", "ShardWriter", "Mapping", "Tier", "StepState", "RemoteState",
           "ShardInfo", "JobInfo", "StepInfo", "Latest", "RankStep",
           "STAGED", "LOCAL", "COMMITTED", "REMOTE", "REPLICATED", "STEP_LATEST"]

Name = Union[str, bytes]
PathLike = Union[str, bytes, "os.PathLike[str]"]


class Tier(enum.IntEnum):
    """Tiers a step can be waited for (enum ckpt_wait_tier), in order of
    durability."""
    STAGED = 1       #: every shard is in daemon-owned memory
    LOCAL = 2        #: on this node's disk, fsynced
    COMMITTED = 3    #: local and committed
    REMOTE = 4       #: in the object store, the step's COMMIT object written
    REPLICATED = 5   #: committed and held by every neighbour the rule names


STAGED, LOCAL, COMMITTED, REMOTE, REPLICATED = (Tier.STAGED, Tier.LOCAL, Tier.COMMITTED,
                                                Tier.REMOTE, Tier.REPLICATED)
#: CKPT_STEP_LATEST: "no bound" for latest_rank(below=...)
STEP_LATEST = (1 << 64) - 1


class StepState(enum.IntEnum):
    """A step's state on this node (enum ckpt_step_state)."""
    SAVING = 1     #: some rank still staging or writing
    LOCAL = 2      #: every rank here is on disk, not committed
    COMMITTED = 3
    FAILED = 4     #: a rank's save failed or was aborted


class RemoteState(enum.IntEnum):
    """A step's copy in the object store (enum ckpt_step_remote)."""
    NONE = 0       #: not flushed, or no store configured
    FLUSHING = 1
    MANIFEST = 2   #: this node's part is up, the step's COMMIT is not
    DONE = 3       #: the step's COMMIT object exists
    FAILED = 4


class ShardInfo(NamedTuple):
    """One shard of a rank: a tuple (name, size, crc32c)."""
    name: str
    size: int
    crc32c: int


class Latest(NamedTuple):
    """Client.latest(): a tuple (step, world_size)."""
    step: int
    world_size: int


class RankStep(NamedTuple):
    """Client.latest_rank(): a tuple (step, world_size, newest); step !=
    newest means the rank fell back to an older step."""
    step: int
    world_size: int
    newest: int


class JobInfo(NamedTuple):
    """A job the daemon knows (struct ckpt_job_info)."""
    name: str
    uid: int                         #: owner
    latest_committed: Optional[int]  #: None: no committed step
    checkpoints: int
    committed: int
    bytes_local: int                 #: on this node's disk
    errors: int                      #: since the job was created


class StepInfo(NamedTuple):
    """A step of a job on this node (struct ckpt_step_info)."""
    step: int
    world_size: int
    ranks_local: int                 #: ranks of it on this node's disk
    state: Union[StepState, int]     #: an int for a state newer than this package
    remote_state: Union[RemoteState, int]
    pinned: bool
    replicas: int                    #: replication targets holding every rank of this node
    bytes: int
    shards: int
    committed_at: Optional[int]      #: unix seconds; None: not committed


def _enc(s: Name, what: str = "name") -> bytes:
    if isinstance(s, str):
        return s.encode()
    if isinstance(s, (bytes, bytearray)):
        return bytes(s)
    raise TypeError("%s must be str or bytes, not %s" % (what, type(s).__name__))


def _uint(v: int, bits: int, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        v = int(v.__index__()) if hasattr(v, "__index__") else v
        if not isinstance(v, int):
            raise TypeError("%s must be an int, not %s" % (what, type(v).__name__))
    if v < 0 or v >= 1 << bits:
        raise ValueError("%s %d is out of range (0 .. 2^%d - 1)" % (what, v, bits))
    return v


def _enum(kind: Any, v: int) -> Any:
    try:
        return kind(v)
    except ValueError:
        return v


class Client:
    """A connection to the node's ckptd.

    socket_path: None means $CKPT_SOCKET, else the per-user socket, else
    /run/ckptd/ckptd.sock (ckpt_connect()).  timeout_ms: how long each
    request waits for the daemon's reply (None: $CKPT_TIMEOUT_MS or 60 s;
    0: forever); connecting itself uses $CKPT_TIMEOUT_MS or 60 s.  Running
    out raises TimeoutError (an :class:`Error`) and closes the connection:
    later calls raise Error ENOTCONN; open a new Client.

    A context manager: leaving the block closes the connection (unfinished
    saves are aborted).  Raises :class:`Error` (FileNotFoundError /
    ConnectionRefusedError when no daemon listens).
    """

    def __init__(self, socket_path: Optional[PathLike] = None,
                 timeout_ms: Optional[int] = None) -> None:
        self._c = ctypes.c_void_p()
        self._saves: "weakref.WeakSet[Save]" = weakref.WeakSet()
        path = os.fsencode(socket_path) if socket_path is not None else None
        r = _lib.lib().ckpt_connect(path, ctypes.byref(self._c))
        if r < 0:
            raise Error(-r, "connect", _lib.last_error(None))
        if timeout_ms is not None:
            self.set_timeout(timeout_ms)

    # ---- plumbing -----------------------------------------------------------

    def _conn(self, what: str) -> ctypes.c_void_p:
        if not self._c:
            raise Error(_errno.ENOTCONN, what, "the Client is closed")
        return self._c

    def _check(self, r: int, what: str) -> int:
        if r < 0:
            raise Error(-r, what, _lib.last_error(self._c) if self._c else None)
        return r

    def _optional(self, symbol: str, what: str) -> Any:
        if not _lib.has(symbol):
            raise Error(_errno.EOPNOTSUPP, what,
                        "this libckpt (%s) has no %s() (added in libckpt %s)"
                        % (_lib.library_path(), symbol, _lib.since(symbol)))
        return getattr(_lib.lib(), symbol)

    def close(self) -> None:
        """Abort unfinished saves, close the connection (idempotent).
        Mappings stay valid until they are closed."""
        if self._c:
            for s in list(self._saves):
                s.abort()
            _lib.lib().ckpt_disconnect(self._c)
            self._c = ctypes.c_void_p()

    @property
    def closed(self) -> bool:
        return not self._c

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def set_timeout(self, timeout_ms: int) -> None:
        """Deadline of each later request without a timeout of its own, in
        ms (0: none).  Error EOPNOTSUPP with a libckpt before 0.3."""
        f = self._optional("ckpt_set_timeout", "set_timeout")
        self._check(f(self._conn("set_timeout"), _uint(timeout_ms, 32, "timeout_ms")),
                    "set_timeout")

    # ---- save -----------------------------------------------------------------

    def save(self, job: Name, step: int, rank: int, world_size: int) -> "Save":
        """Begin saving rank `rank` of `world_size` for (job, step); the job
        is created on first use and belongs to the caller's uid.  Returns a
        :class:`Save` (a context manager: finish() on success, abort() on an
        exception).  FileExistsError when the step is already committed."""
        s = ctypes.c_void_p()
        self._check(_lib.lib().ckpt_save_begin(self._conn("save_begin"), _enc(job, "job"),
                                               _uint(step, 63, "step"), _uint(rank, 32, "rank"),
                                               _uint(world_size, 32, "world_size"),
                                               ctypes.byref(s)), "save_begin")
        save = Save(self, s)
        self._saves.add(save)
        return save

    def commit(self, job: Name, step: int, timeout_ms: int = 60000) -> None:
        """Commit (job, step) once every rank of it is on disk, on every node
        of the job; waits at most timeout_ms (TimeoutError naming the
        missing ranks).  Any rank may call it, once or all; idempotent.
        CorruptError when a rank's save was torn."""
        self._check(_lib.lib().ckpt_commit(self._conn("commit"), _enc(job, "job"),
                                           _uint(step, 63, "step"),
                                           _uint(timeout_ms, 32, "timeout_ms")), "commit")

    def commit_async(self, job: Name, step: int) -> None:
        """Ask for (job, step) to be committed as soon as every rank is on
        disk, without waiting: the daemons complete the commit by themselves
        even if this process dies.  Follow with wait(job, step, COMMITTED)
        to know.  Error EOPNOTSUPP when libckpt lacks ckpt_commit_async()."""
        f = self._optional("ckpt_commit_async", "commit_async")
        self._check(f(self._conn("commit_async"), _enc(job, "job"), _uint(step, 63, "step")),
                    "commit_async")

    def wait(self, job: Name, step: int, tier: Union[Tier, int] = LOCAL,
             timeout_ms: int = 60000) -> None:
        """Wait until every rank this node holds of (job, step) reaches
        `tier`, at most timeout_ms (0: just check).  TimeoutError,
        FileNotFoundError (no such step), or the error that made the step
        fail (CorruptError for a torn shard)."""
        self._check(_lib.lib().ckpt_wait(self._conn("wait"), _enc(job, "job"),
                                         _uint(step, 63, "step"), int(tier),
                                         _uint(timeout_ms, 32, "timeout_ms")), "wait")

    # ---- restore --------------------------------------------------------------

    def latest(self, job: Name) -> Latest:
        """(step, world_size) of the newest committed step of job that
        the job can restore from (a step with a rank recorded with no good
        copy left on that node is passed over); FileNotFoundError when
        there is none (or no such job)."""
        step, world = ctypes.c_uint64(), ctypes.c_uint32()
        self._check(_lib.lib().ckpt_latest(self._conn("latest"), _enc(job, "job"),
                                           ctypes.byref(step), ctypes.byref(world)), "latest")
        return Latest(step.value, world.value)

    def latest_rank(self, job: Name, rank: int, below: Optional[int] = None) -> RankStep:
        """(step, world_size, newest): the newest committed step below
        `below` (None: no bound) that rank `rank` can be restored from, and
        the newest committed step the daemon knows of; step != newest means
        it fell back to an older step.  Take the minimum step over all
        ranks (ckpt.h, ckpt_latest_rank())."""
        f = self._optional("ckpt_latest_rank", "latest_rank")
        step, world, newest = ctypes.c_uint64(), ctypes.c_uint32(), ctypes.c_uint64()
        bound = STEP_LATEST if below is None else _uint(below, 64, "below")
        self._check(f(self._conn("latest_rank"), _enc(job, "job"), _uint(rank, 32, "rank"),
                      bound, ctypes.byref(step), ctypes.byref(world), ctypes.byref(newest)),
                    "latest_rank")
        return RankStep(step.value, world.value, newest.value)

    def shards(self, job: Name, step: int, rank: int) -> List[ShardInfo]:
        """The shards of one rank of a committed step, sorted by name."""
        lst, n = ctypes.c_void_p(), ctypes.c_size_t()
        self._check(_lib.lib().ckpt_shard_list(self._conn("shard_list"), _enc(job, "job"),
                                               _uint(step, 63, "step"), _uint(rank, 32, "rank"),
                                               ctypes.byref(lst), ctypes.byref(n)),
                    "shard_list")
        try:
            arr = ctypes.cast(lst, ctypes.POINTER(_lib.ShardInfoC))
            return [ShardInfo(arr[i].name.decode(), arr[i].size, arr[i].crc32c)
                    for i in range(n.value)]
        finally:
            _lib.lib().ckpt_shard_list_free(lst)

    def _read_at(self, job: bytes, step: int, rank: int, shard: bytes, offset: int,
                 address: int, length: int) -> int:
        r = _lib.lib().ckpt_read(self._conn("read"), job, step, rank, shard, offset,
                                 address, length)
        return self._check(r, "read %s" % shard.decode(errors="replace"))

    def read_into(self, job: Name, step: int, rank: int, shard: Name, dest: Any,
                  offset: int = 0) -> int:
        """Read len(dest) bytes of a shard from `offset` into dest: any
        writable buffer (bytearray, memoryview, numpy array, mmap, ...) or a
        CPU torch tensor of any dtype (dest's numel() * element_size()
        bytes).  A contiguous dest is read straight into its memory; a
        strided one (a transposed or sliced tensor/array) through a bounce
        buffer of at most 8 MiB.  Returns the bytes read (fewer only at the
        shard's end).  CorruptError when a block fails its CRC32C."""
        j, sh = _enc(job, "job"), _enc(shard, "shard")
        step, rank = _uint(step, 63, "step"), _uint(rank, 32, "rank")
        offset = _uint(offset, 64, "offset")
        with _buffers.sink(dest) as s:
            if s.address is not None:
                return self._read_at(j, step, rank, sh, offset, s.address, s.nbytes)
            return _buffers.read_strided(
                s, lambda off, addr, n: self._read_at(j, step, rank, sh, off, addr, n), offset)

    def read(self, job: Name, step: int, rank: int, shard: Name, offset: int = 0,
             length: Optional[int] = None) -> bytes:
        """Bytes [offset, offset+length) of a shard (to its end by default),
        read straight into the bytes object returned."""
        if length is None:
            sizes = {i.name: i.size for i in self.shards(job, step, rank)}
            name = shard.decode() if isinstance(shard, bytes) else shard
            if name not in sizes:
                raise Error(_errno.ENOENT, "read",
                            "no shard '%s' in rank %d of step %d" % (name, rank, step))
            length = max(sizes[name] - offset, 0)
        length = _uint(length, 63, "length")
        out = _new_bytes(length)
        dest = _buffers.window_array(_bytes_as(out), length) if length else bytearray()
        n = self.read_into(job, step, rank, shard, dest, offset)
        return out if n == length else out[:n]

    def map(self, job: Name, step: int, rank: int, shard: Name) -> "Mapping":
        """Map a whole shard of a committed step read-only, without a copy
        (verified against its CRC32C once: CorruptError).  Returns a
        :class:`Mapping` (memoryview, tensor(), numpy()); close it, or use
        it as a context manager."""
        addr, size = ctypes.c_void_p(), ctypes.c_uint64()
        self._check(_lib.lib().ckpt_map(self._conn("map"), _enc(job, "job"),
                                        _uint(step, 63, "step"), _uint(rank, 32, "rank"),
                                        _enc(shard, "shard"), ctypes.byref(addr),
                                        ctypes.byref(size)), "map")
        return Mapping(addr.value or 0, size.value)

    # ---- pins and listings ----------------------------------------------------

    def pin(self, job: Name, step: int) -> None:
        """Keep (job, step) whatever retention says, here and in the object
        store.  The job's owner or root (PermissionError)."""
        f = self._optional("ckpt_pin", "pin")
        self._check(f(self._conn("pin"), _enc(job, "job"), _uint(step, 63, "step"), 1), "pin")

    def unpin(self, job: Name, step: int) -> None:
        """Let retention delete (job, step) again."""
        f = self._optional("ckpt_pin", "unpin")
        self._check(f(self._conn("unpin"), _enc(job, "job"), _uint(step, 63, "step"), 0),
                    "unpin")

    def jobs(self) -> List[JobInfo]:
        """The jobs this daemon knows that the caller may see (its own;
        root: all)."""
        f = self._optional("ckpt_jobs", "jobs")
        lst, n = ctypes.POINTER(_lib.JobInfoC)(), ctypes.c_size_t()
        self._check(f(self._conn("jobs"), ctypes.byref(lst), ctypes.byref(n)), "jobs")
        try:
            return [JobInfo(j.name.decode(), j.uid,
                            None if j.latest_committed < 0 else j.latest_committed,
                            j.checkpoints, j.committed, j.bytes_local, j.errors)
                    for j in (lst[i] for i in range(n.value))]
        finally:
            _lib.lib().ckpt_jobs_free(lst)

    def steps(self, job: Name) -> List[StepInfo]:
        """The steps of job on this node, newest first."""
        f = self._optional("ckpt_steps", "steps")
        lst, n = ctypes.POINTER(_lib.StepInfoC)(), ctypes.c_size_t()
        self._check(f(self._conn("steps"), _enc(job, "job"), ctypes.byref(lst),
                      ctypes.byref(n)), "steps")
        try:
            return [StepInfo(s.step, s.world_size, s.ranks_local, _enum(StepState, s.state),
                             _enum(RemoteState, s.remote_state), bool(s.pinned), s.replicas,
                             s.bytes, s.shards, s.committed_at or None)
                    for s in (lst[i] for i in range(n.value))]
        finally:
            _lib.lib().ckpt_steps_free(lst)


# A bytes object is immutable once shared; read() fills a fresh one before
# anyone else can see it (as CPython's own readers do), saving the copy a
# bytearray -> bytes conversion would make.
_bytes_new = ctypes.pythonapi.PyBytes_FromStringAndSize
_bytes_new.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t]
_bytes_new.restype = ctypes.py_object
_bytes_as = ctypes.pythonapi.PyBytes_AsString
_bytes_as.argtypes = [ctypes.py_object]
_bytes_as.restype = ctypes.c_void_p


def _new_bytes(n: int) -> bytes:
    """A fresh bytes object of n (unset) bytes, not yet seen by anyone."""
    return bytes(_bytes_new(None, n)) if n else b""  # bytes(b) is b itself


class Save:
    """One rank's save (from :meth:`Client.save`).  Add shards with
    :meth:`write`, :meth:`writev` or :meth:`shard`; :meth:`finish` hands
    the bytes to the daemon (then the process may exit), :meth:`abort`
    drops them.  As a context manager: finish() when the block succeeds,
    abort() when it raises.  Use from one thread at a time."""

    def __init__(self, client: Client, handle: ctypes.c_void_p) -> None:
        self._client = client
        self._s: Optional[ctypes.c_void_p] = handle

    def _handle(self, what: str) -> ctypes.c_void_p:
        if not self._s:
            raise Error(_errno.EINVAL, what, "the save is finished or aborted")
        self._client._conn(what)
        return self._s

    def write(self, shard: Name, data: Any) -> None:
        """Save `data` as one shard: any object with the buffer protocol
        (bytes and other read-only buffers included, without a copy of
        their own), a numpy array, or a CPU torch tensor of any dtype.  Its
        bytes are copied once into the daemon's shared memory (libckpt,
        CRC32C folded in).  A strided tensor or array (transposed, sliced
        with a step, expanded, a conjugate view) is saved in C order: its
        elements are copied straight into the slot windows, range by range,
        with no temporary copy of the whole.  ValueError for a tensor on
        another device; TypeError for an object without bytes."""
        name = _enc(shard, "shard")
        what = "save_write %s" % name.decode(errors="replace")
        with _buffers.source(data, what) as src:
            if src.address is not None:
                self._client._check(_lib.lib().ckpt_save_write(self._handle(what), name,
                                                               src.address, src.nbytes), what)
            else:
                self._write_windows(name, [src], what)

    def writev(self, shard: Name, pieces: Iterable[Any]) -> None:
        """Save one shard made of several buffers/tensors back to back (a
        packed shard of small tensors), each copied once: through libckpt's
        ckpt_save_writev() when every piece is contiguous and the library
        has it (0.5), else through the zero-copy windows.  Pieces are what
        write() accepts."""
        name = _enc(shard, "shard")
        what = "save_writev %s" % name.decode(errors="replace")
        with contextlib.ExitStack() as stack:
            srcs = [stack.enter_context(_buffers.source(p, what)) for p in pieces]
            if _lib.has("ckpt_save_writev") and all(s.address is not None for s in srcs):
                iov = (_lib.IOVec * max(len(srcs), 1))()
                for i, s in enumerate(srcs):
                    iov[i].iov_base = s.address or None
                    iov[i].iov_len = s.nbytes
                self._client._check(_lib.lib().ckpt_save_writev(self._handle(what), name, iov,
                                                                len(srcs)), what)
            else:
                self._write_windows(name, srcs, what)

    def _write_windows(self, name: bytes, srcs: Sequence[_buffers.Source], what: str) -> None:
        """The sources back to back into a new shard's windows."""
        w = self._begin(name, sum(s.nbytes for s in srcs), what)
        i, base = 0, 0  # srcs[i] starts at shard offset base
        while not w.done:
            off, addr, length = w._window()
            end = off + length
            while off < end:
                while base + srcs[i].nbytes <= off:  # skip sources before off (and empty ones)
                    base += srcs[i].nbytes
                    i += 1
                s = srcs[i]
                stop = min(end, base + s.nbytes)
                s.copy_out(off - base, stop - base, addr + (off - w._offset))
                off = stop
            w.commit()

    def _begin(self, name: bytes, size: int, what: str) -> "ShardWriter":
        h = ctypes.c_void_p()
        self._client._check(_lib.lib().ckpt_shard_begin(self._handle(what), name,
                                                        _uint(size, 64, "size"),
                                                        ctypes.byref(h)), what)
        return ShardWriter(self, name.decode(errors="replace"), size, h)

    def shard(self, name: Name, size: int) -> "ShardWriter":
        """Declare a shard of `size` bytes to fill in place (zero-copy): a
        :class:`ShardWriter` whose windows point into the daemon's shared
        memory."""
        n = _enc(name, "shard")
        return self._begin(n, size, "shard_begin %s" % n.decode(errors="replace"))

    @property
    def replaced(self) -> bool:
        """True when this save replaces an earlier copy of its rank (the step
        is not committed, and the rank was saved before), False when it is
        the rank's first copy.  Ask before finish().  Error EOPNOTSUPP when
        libckpt (before 0.4) or ckptd (protocol version 2) cannot say."""
        h = self._handle("replaced")
        f = self._client._optional("ckpt_save_replaced", "replaced")
        r: int = f(h)
        if r < 0:
            raise Error(-r, "replaced", "ckptd speaks protocol version 2 only: it cannot say "
                        "whether a save replaced an earlier copy"
                        if r == -_errno.EOPNOTSUPP else None)
        return r == 1

    @property
    def finished(self) -> bool:
        """Whether finish() or abort() ran."""
        return not self._s

    def finish(self) -> None:
        """Every shard is staged: from now on the daemon owns the bytes.
        Error EPROTO when a shard from shard() is not completely committed.
        The save is over either way."""
        h = self._handle("save_finish")
        self._s = None
        self._client._saves.discard(self)
        self._client._check(_lib.lib().ckpt_save_finish(h), "save_finish")

    def abort(self) -> None:
        """Abandon the save: nothing of it is kept (idempotent)."""
        if self._s:
            h, self._s = self._s, None
            self._client._saves.discard(self)
            if self._client._c:
                _lib.lib().ckpt_save_abort(h)

    def __del__(self) -> None:
        # a save dropped unfinished keeps nothing (and frees libckpt's state)
        with contextlib.suppress(Exception):
            self.abort()

    def __enter__(self) -> "Save":
        return self

    def __exit__(self, exc_type: Optional[type], *exc: object) -> None:
        if exc_type is None and self._s:
            self.finish()
        else:
            self.abort()


class ShardWriter:
    """A shard filled in place, window by window (ckpt_shard_begin()).

        w = save.shard("weights", size)
        for offset, window in w:           # window: writable memoryview
            window[:] = produce(offset, len(window))
            w.commit()

    Each window is a writable memoryview into a shared-memory slot, starting
    at `offset` in the shard; fill it and commit() it before asking for the
    next.  Never touch a window after committing it: the daemon checks the
    CRC32C taken at commit, and a change makes the save fail as torn
    (CorruptError from wait()/commit()).  A window not committed within the
    daemon's lease (20 s) fails the save (Error ETIME)."""

    def __init__(self, save: Save, name: str, size: int, handle: ctypes.c_void_p) -> None:
        self._save = save
        self.name = name
        self.size = size
        self._h = handle
        self._committed = 0
        self._open: Optional[memoryview] = None
        self._offset = 0
        self._length = 0

    @property
    def done(self) -> bool:
        """Whether every byte of the shard is committed."""
        return self._committed >= self.size

    @property
    def committed(self) -> int:
        """Bytes committed so far."""
        return self._committed

    def _window(self) -> Tuple[int, int, int]:
        what = "shard_buffer %s" % self.name
        self._save._handle(what)
        buf, off, length = ctypes.c_void_p(), ctypes.c_uint64(), ctypes.c_uint64()
        self._save._client._check(_lib.lib().ckpt_shard_buffer(self._h, ctypes.byref(buf),
                                                               ctypes.byref(off),
                                                               ctypes.byref(length)), what)
        self._offset, self._length = off.value, length.value
        return off.value, buf.value or 0, length.value

    def window(self) -> Tuple[int, memoryview]:
        """(offset, writable memoryview) of the current window; the same one
        again until commit().  Error ERANGE when the shard is complete."""
        off, addr, length = self._window()
        if self._open is None:
            self._open = memoryview(_buffers.window_array(addr, length)).cast("B")
        return off, self._open

    def commit(self) -> bool:
        """Commit the current window (CRC32C taken now); True when the shard
        is complete."""
        what = "shard_commit %s" % self.name
        self._save._handle(what)
        r = self._save._client._check(_lib.lib().ckpt_shard_commit(self._h), what)
        self._committed += self._length
        if self._open is not None:
            with contextlib.suppress(BufferError):  # a caller still holds a slice of it
                self._open.release()
            self._open = None
        return r == 1

    def __iter__(self) -> Iterator[Tuple[int, memoryview]]:
        while not self.done:
            before = self._committed
            yield self.window()
            if self._committed == before:
                raise Error(_errno.EPROTO, "shard %s" % self.name,
                            "commit() each window before asking for the next")


class _MapOwner:
    """Unmaps a mapping when the last object made from it goes away."""

    def __init__(self, address: int, size: int) -> None:
        self.address, self.size = address, size

    def __del__(self) -> None:
        if self.size:
            with contextlib.suppress(Exception):  # at interpreter exit ctypes may be gone
                _lib.lib().ckpt_unmap(self.address, self.size)


class Mapping:
    """A shard mapped read-only (from :meth:`Client.map`), verified once.

    ``memoryview`` is a read-only memoryview of its bytes; :meth:`tensor`
    and :meth:`numpy` view them as a torch tensor / numpy array without a
    copy.  close() (or leaving the with-block) gives up this object's hold;
    the pages are unmapped once no memoryview, tensor or array made from
    it is alive any more, so none of them can dangle.  The memory is
    mapped PROT_READ: writing through a tensor from :meth:`tensor` (torch
    cannot mark a tensor read-only) is undefined behaviour (a SIGSEGV)."""

    def __init__(self, address: int, size: int) -> None:
        self.size = size
        owner = _MapOwner(address, size)
        # a ctypes array type of our own so that its instances can carry the
        # owner: every memoryview/tensor/array keeps the array alive
        arr_type: Any = type("_MappedShard", (ctypes.c_char * size,), {})
        arr = arr_type.from_address(address) if size else arr_type()
        arr._owner = owner
        self._mv: Optional[memoryview] = memoryview(arr).cast("B").toreadonly()

    @property
    def closed(self) -> bool:
        return self._mv is None

    @property
    def memoryview(self) -> memoryview:
        """The shard's bytes, read-only."""
        if self._mv is None:
            raise ValueError("the mapping is closed")
        return self._mv

    def __len__(self) -> int:
        return self.size

    def tensor(self, dtype: Any = None, shape: Optional[Sequence[int]] = None) -> Any:
        """The shard as a 1-D torch tensor of `dtype` (default torch.uint8;
        any dtype, bfloat16 included, whose element size divides the shard
        size), reshaped to `shape` when given, without a copy.  Read-only by
        contract: writing it is undefined (the pages are PROT_READ)."""
        import torch
        mv = self.memoryview
        dtype = torch.uint8 if dtype is None else dtype
        if self.size == 0:
            t = torch.empty(0, dtype=dtype)
        else:
            with warnings.catch_warnings():
                # "The given buffer is not writable": known, and documented
                warnings.simplefilter("ignore", UserWarning)
                t = torch.frombuffer(mv, dtype=torch.uint8)
            t = t.view(dtype)
        return t.reshape(tuple(shape)) if shape is not None else t

    def numpy(self, dtype: Any = "uint8", shape: Optional[Sequence[int]] = None) -> Any:
        """The shard as a read-only numpy array of `dtype`, reshaped to
        `shape` when given, without a copy."""
        import numpy as np
        a = np.frombuffer(self.memoryview, dtype=dtype)
        return a.reshape(tuple(shape)) if shape is not None else a

    def close(self) -> None:
        """Drop this object's hold on the mapping (idempotent)."""
        self._mv = None

    def __enter__(self) -> "Mapping":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
