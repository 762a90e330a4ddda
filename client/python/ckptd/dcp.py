# SPDX-License-Identifier: MIT
"""ckptd as a storage backend for torch.distributed.checkpoint (torch 2.13).

    import torch.distributed.checkpoint as dcp
    from ckptd.dcp import CkptdWriter, CkptdReader

    writer = CkptdWriter(job="llama")                      # one per trainer process
    fut = dcp.async_save(state_dict, storage_writer=writer,
                         checkpoint_id="ckptd://llama/1000")
    ...                                                    # train on: the bytes are ckptd's
    fut.result()                                           # committed on every node

    dcp.load(state_dict, storage_reader=CkptdReader(job="llama"))  # the newest committed step

A checkpoint_id is ``ckptd://JOB/STEP`` or a path whose last component is
``step-N`` (torchtitan's convention: step N of the writer's job).

How a save works (docs/python.md has the whole story):

* ``stage()`` -- what ``dcp.async_save`` blocks for -- runs the planner's
  local part (no collective), then copies every tensor's bytes and every
  serialised non-tensor item of this rank straight into ckptd's shared
  memory: one shard ``dcp-data`` per rank, the items back to back, each
  copied once with its CRC32C folded in, plus a small shard ``dcp-rank``
  recording this rank's part of the plan (its WriteItems and where each
  item's bytes are).  It ends the rank's save and asks the daemon to commit
  the step as soon as every rank has saved (``ckpt_commit_async``), so a
  trainer killed right after ``async_save`` returns loses nothing.
* DCP's planning, write_data and finish then run in DCP's background
  thread; they move no bytes.  The coordinator's ``finish`` waits until the
  daemons have committed the step on every node, so the future completes
  when the checkpoint is committed.
* The checkpoint's global Metadata is not a separate object: a reader
  builds it from the ranks' ``dcp-rank`` records, which are committed,
  replicated and flushed with the data because they are part of the step.
  That is what lets a step whose trainers all died after staging load.

A load reads the ``dcp-rank`` records of every rank, and then for each item
of this rank's load plan exactly the bytes it needs, into the destination
tensor's memory when the requested box is contiguous, from whichever tier
holds the step (this node, a replica here, a neighbour, the object store).
Resharding (4 ranks saved, 2 or 3 load) is DCP's planner's arithmetic.

Names: DCP's keys never become ckptd names (shards are ``dcp-data`` and
``dcp-rank``), so nothing a user puts in a state_dict key can break a save.
"""
from __future__ import annotations

import dataclasses
import errno
import io
import os
import pickle
import re
import sys
import warnings
from typing import Any, Optional

import torch
import torch.distributed as dist
from torch.futures import Future
from torch.distributed.checkpoint.default_planner import (
    DefaultSavePlanner,
    create_default_global_save_plan,
)
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
)
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult

import ckptd

__all__ = ["CkptdWriter", "CkptdReader", "parse_checkpoint_id", "DATA_SHARD", "RANK_SHARD"]

DATA_SHARD = "dcp-data"   # a rank's items, back to back
RANK_SHARD = "dcp-rank"   # a rank's part of the plan and where its items are
_FORMAT = 1               # of the dcp-rank record
_ALIGN = 64               # items start at multiples of this in dcp-data
_PAD = bytes(_ALIGN)
_ID = re.compile(r"^ckptd://([^/]+)/([0-9]+)/?$")
_STEP_DIR = re.compile(r"^step-([0-9]+)$")


def parse_checkpoint_id(checkpoint_id: str | os.PathLike, job: Optional[str]) -> tuple[str, int]:
    """(job, step) of a checkpoint_id: ``ckptd://JOB/STEP``, or a path whose
    last component is ``step-N`` (step N of `job`).  ValueError otherwise,
    or when the id names another job than `job`."""
    text = os.fspath(checkpoint_id)
    m = _ID.match(text)
    if m:
        if job is not None and m.group(1) != job:
            raise ValueError("checkpoint_id %r names job %r, but this %s is for job %r"
                             % (text, m.group(1), "reader/writer", job))
        return m.group(1), int(m.group(2))
    m = _STEP_DIR.match(os.path.basename(os.path.normpath(text)) if text else "")
    if m and job is not None:
        return job, int(m.group(1))
    if m:
        raise ValueError("checkpoint_id %r is a step-N path: give the writer/reader a job "
                         "(CkptdWriter(job=...))" % text)
    raise ValueError("checkpoint_id %r is not ckptd's: use 'ckptd://JOB/STEP' or a path "
                     "ending in 'step-N'" % text)


def _valid_id(checkpoint_id: str | os.PathLike) -> bool:
    text = os.fspath(checkpoint_id)
    return bool(_ID.match(text) or _STEP_DIR.match(os.path.basename(os.path.normpath(text))))


@dataclasses.dataclass(frozen=True)
class _Where:
    """Where one item's bytes are: [offset, offset+length) of `shard` of
    `rank`; a tensor chunk's bytes are its elements in row-major order."""
    rank: int
    shard: str
    offset: int
    length: int
    dtype: Optional[torch.dtype] = None   # tensor chunks only
    shape: Optional[tuple] = None


@dataclasses.dataclass
class _RankRecord:
    """One rank's part of a checkpoint: its SavePlan and where its items are."""
    rank: int
    world_size: int
    plan: SavePlan
    where: dict            # MetadataIndex -> _Where


def _encode_record(rank: int, world: int, plan: SavePlan, where: dict) -> bytes:
    """The dcp-rank shard: the plan's items as plain tuples (pickling 5,000
    WriteItem dataclasses costs ~20 us each on the trainer's time; tuples
    a few), the TensorProperties once each."""
    props: dict = {}
    items = []
    for it in plan.items:
        w = where[it.index]
        td = it.tensor_data
        if td is None:
            items.append((it.index.fqn, None, it.type.value, it.bytes_io_data, None, None, -1,
                          None, w.offset, w.length))
            continue
        pr = td.properties
        k = props.setdefault((pr.dtype, pr.layout, pr.requires_grad, pr.memory_format,
                              pr.pin_memory), len(props))
        items.append((it.index.fqn, None if it.index.offset is None else tuple(it.index.offset),
                      it.type.value, it.bytes_io_data, tuple(td.chunk.offsets),
                      tuple(td.chunk.sizes), k, tuple(td.size), w.offset, w.length))
    doc = {"format": _FORMAT, "rank": rank, "world_size": world,
           "planner_data": plan.planner_data,
           "properties": [TensorProperties(*k) for k in props], "items": items}
    return pickle.dumps(doc, protocol=pickle.HIGHEST_PROTOCOL)


def _decode_record(raw: bytes) -> _RankRecord:
    """The inverse of _encode_record; ValueError/KeyError/TypeError when raw
    is not one."""
    doc = pickle.loads(raw)
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise ValueError("format %r, not %d" % (doc.get("format") if isinstance(doc, dict)
                                                 else type(doc).__name__, _FORMAT))
    rank, props = int(doc["rank"]), doc["properties"]
    items, where = [], {}
    for fqn, off, typ, bio, c_off, c_sizes, k, size, at, length in doc["items"]:
        index = MetadataIndex(fqn, None if off is None else torch.Size(off))
        if c_off is None:
            items.append(WriteItem(index=index, type=WriteItemType(typ), bytes_io_data=bio))
            where[index] = _Where(rank, DATA_SHARD, at, length)
            continue
        p = props[k]
        items.append(WriteItem(index=index, type=WriteItemType(typ), bytes_io_data=bio,
                               tensor_data=TensorWriteData(
                                   chunk=ChunkStorageMetadata(offsets=torch.Size(c_off),
                                                              sizes=torch.Size(c_sizes)),
                                   properties=p, size=torch.Size(size))))
        where[index] = _Where(rank, DATA_SHARD, at, length, p.dtype, tuple(c_sizes))
    plan = SavePlan(items, planner_data=doc["planner_data"])
    return _RankRecord(rank, int(doc["world_size"]), plan, where)


def _save_call_locals() -> dict:
    """The arguments of the dcp.save / dcp.async_save call we run under.

    DCP hands stage() only the state dict; the checkpoint_id and the
    process group reach the writer later, in the background thread's
    reset().  Staging must know the step and this rank's place in the
    group now, so they are read from the caller's frame -- the documented
    parameters of torch.distributed.checkpoint.state_dict_saver.async_save
    and save, which is what the user passed."""
    f = sys._getframe(1)
    while f is not None:
        if (f.f_globals.get("__name__") == "torch.distributed.checkpoint.state_dict_saver"
                and f.f_code.co_name in ("async_save", "save")):
            return f.f_locals
        f = f.f_back
    return {}


def _group_rank_world(group: Any) -> tuple[int, int]:
    """This process's rank and the world size of `group` (None: the
    default group), or 0 of 1 without torch.distributed.

    Also under dcp.async_save(..., no_dist=True): DCP then runs its
    background protocol without collectives, which ckptd does not need
    (the plan and the bytes are in the daemon already), but the rank still
    names one rank of one step of the job."""
    if not (dist.is_available() and dist.is_initialized()):
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def _tensor_bytes(t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor with t's elements in row-major order (t itself when it
    already is one: no copy)."""
    if t.device.type != "cpu":
        # the one copy ckptd would make is device -> slot; until the daemon
        # takes device memory, the host copy is the staging
        t = t.to("cpu")
    return t


class CkptdWriter(StorageWriter, AsyncStager):
    """A StorageWriter (and AsyncStager) that saves through the node's ckptd.

    job: the ckptd job (None: taken from a ``ckptd://JOB/STEP`` checkpoint_id).
    socket_path: the daemon's socket (None: $CKPT_SOCKET or the default).
    commit_timeout_ms: how long the coordinator's finish() waits for the
    step to be committed on every node.
    """

    _synchronize_after_execute = False  # stage() is synchronous: nothing to wait for

    def __init__(self, job: Optional[str] = None, socket_path: Optional[str] = None,
                 commit_timeout_ms: int = 600_000,
                 checkpoint_id: Optional[str | os.PathLike] = None) -> None:
        super().__init__()
        self.job = job
        self.socket_path = socket_path
        self.commit_timeout_ms = commit_timeout_ms
        self.checkpoint_id = checkpoint_id
        self.step: Optional[int] = None
        self.is_coordinator = False
        self._staged: Optional[tuple[str, int, dict]] = None  # (job, step, where)
        self._client: Optional[ckptd.Client] = None             # see _connection
        if checkpoint_id is not None:
            self.reset(checkpoint_id)

    # -- StorageWriter ---------------------------------------------------------------

    def reset(self, checkpoint_id: Optional[str | os.PathLike] = None) -> None:
        if checkpoint_id is not None:
            self.job, self.step = parse_checkpoint_id(checkpoint_id, self.job)
            self.checkpoint_id = checkpoint_id

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        return _valid_id(checkpoint_id)

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.checkpoint_id)

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        return plans

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        if self.job is None or self.step is None:
            raise ValueError("CkptdWriter: no checkpoint_id: pass checkpoint_id='ckptd://JOB/STEP'")
        if self._staged and self._staged[:2] == (self.job, self.step):
            where = self._staged[2]          # async_save: stage() moved the bytes
        else:
            # dcp.save: this rank's final plan is known; save it now
            call = _save_call_locals()
            rank, world = _group_rank_world(call.get("process_group"))
            where = self._save_rank(plan, planner.resolve_data, rank, world)
        self._staged = None
        results = []
        for item in plan.items:
            w = where.get(item.index)
            if w is None:
                raise RuntimeError(
                    "CkptdWriter: item %r of the plan was not staged: async_save stages the "
                    "items of DefaultSavePlanner's local plan; a planner that adds items "
                    "must be used with dcp.save" % (item.index.fqn,))
            results.append(WriteResult(index=item.index, size_in_bytes=w.length,
                                       storage_data=w))
        fut: Future[list[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        # Every rank asked for the commit when it finished its save; the
        # coordinator waits here until the daemons have done it on every
        # node, so DCP's future means "committed".
        with ckptd.Client(self.socket_path) as c:
            c.commit(self.job, self.step, timeout_ms=self.commit_timeout_ms)

    # -- AsyncStager -----------------------------------------------------------------

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """Copy this rank's state into ckptd and ask for the commit; return
        the state dict itself for DCP's background planning, which reads
        only shapes and dtypes (never the bytes) from it."""
        call = _save_call_locals()
        if call.get("checkpoint_id") is not None:
            self.reset(call["checkpoint_id"])
        if self.job is None or self.step is None:
            raise ValueError("CkptdWriter.stage: no checkpoint_id: pass checkpoint_id="
                             "'ckptd://JOB/STEP' to dcp.async_save")
        rank, world = _group_rank_world(call.get("process_group"))
        planner = DefaultSavePlanner()
        planner.set_up_planner(state_dict, storage_meta=None, is_coordinator=rank == 0)
        plan = planner.create_local_plan()
        self._staged = (self.job, self.step, self._save_rank(plan, planner.resolve_data,
                                                              rank, world))
        return state_dict

    def synchronize_staging(self) -> None:
        pass

    def close(self) -> None:
        """Close the writer's connection to the daemon (its slot mappings go
        with it); a later save opens a new one."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def _begin(self, rank: int, world: int) -> tuple["ckptd.Client", "ckptd.Save"]:
        """Begin this rank's save on the writer's connection, which is kept
        across saves: a new one maps the daemon's slots again (MAP_POPULATE:
        ~0.2 s per GiB staged, bench/dcp.py), an open one has them mapped.
        When the daemon went away since (a restart; its farewell says
        ESHUTDOWN, docs/protocol.md "Farewell"), one new connection."""
        for attempt in (0, 1):
            if self._client is None:
                self._client = ckptd.Client(self.socket_path)
            try:
                return self._client, self._client.save(self.job, self.step, rank, world)
            except ckptd.Error as e:
                if attempt or e.errno not in (errno.ENOTCONN, errno.ECONNRESET, errno.EPIPE,
                                              errno.ESHUTDOWN):
                    raise
                self.close()
        raise AssertionError("unreachable")

    # -- the save of one rank --------------------------------------------------------

    def _save_rank(self, plan: SavePlan, resolve, rank: int, world: int) -> dict:
        """Save plan's items as this rank of (job, step): dcp-data with the
        bytes, dcp-rank with the record; finish, and ask for the commit.
        Returns the item -> _Where table."""
        pieces: list[Any] = []
        where: dict = {}
        at = 0
        for item in plan.items:
            data = resolve(item)
            if item.type == WriteItemType.BYTE_IO:
                buf = data.getbuffer() if isinstance(data, io.BytesIO) else memoryview(data)
                w = _Where(rank, DATA_SHARD, at, buf.nbytes)
            else:
                t = _tensor_bytes(data.detach())
                buf = t
                w = _Where(rank, DATA_SHARD, at, t.numel() * t.element_size(), t.dtype,
                           tuple(t.shape))
            where[item.index] = w
            pieces.append(buf)
            at += w.length
            pad = -at % _ALIGN
            if pad:
                pieces.append(_PAD[:pad])
                at += pad
        record = _encode_record(rank, world, plan, where)
        c, s = self._begin(rank, world)
        with s:
            s.write(RANK_SHARD, record)
            s.writev(DATA_SHARD, pieces)
        try:
            c.commit_async(self.job, self.step)
        except ckptd.Error as e:
            if e.errno != errno.EOPNOTSUPP:
                raise
            # an older libckpt or ckptd: the coordinator's finish()
            # still commits, but a trainer that dies before it loses
            # the step
            warnings.warn("ckptd.dcp: %s; the step is committed only once every rank's "
                          "DCP save completes" % e, RuntimeWarning, stacklevel=2)
        return where


class CkptdReader(StorageReader):
    """A StorageReader that loads a checkpoint saved with CkptdWriter.

    job: the ckptd job (None: from a ``ckptd://`` checkpoint_id).  With no
    checkpoint_id the newest committed step of the job is loaded
    (Client.latest(): one with a rank left with no good copy is passed
    over).
    """

    def __init__(self, job: Optional[str] = None, socket_path: Optional[str] = None,
                 checkpoint_id: Optional[str | os.PathLike] = None) -> None:
        super().__init__()
        self.job = job
        self.socket_path = socket_path
        self.checkpoint_id = checkpoint_id
        self.step: Optional[int] = None
        self.storage_data: dict = {}
        self._first: Optional[_RankRecord] = None
        if checkpoint_id is not None:
            self.reset(checkpoint_id)

    def reset(self, checkpoint_id: Optional[str | os.PathLike] = None) -> None:
        """Point the reader at checkpoint_id, and read its rank 0 record now:
        a wrong id, an unknown job or a step that is not committed raises
        here, as the ckptd.Error it is, rather than inside DCP's load
        protocol (which reports a failed read_metadata as an
        AssertionError wrapped in a CheckpointException)."""
        self.step = None
        self._first = None
        self.checkpoint_id = checkpoint_id
        if checkpoint_id is not None:
            self.job, self.step = parse_checkpoint_id(checkpoint_id, self.job)
            with ckptd.Client(self.socket_path) as c:
                self._first = self._record(c, 0)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        return _valid_id(checkpoint_id)

    def read_metadata(self) -> Metadata:
        if self.job is None:
            raise ValueError("CkptdReader: no job: CkptdReader(job=...) or a "
                             "checkpoint_id 'ckptd://JOB/STEP'")
        with ckptd.Client(self.socket_path) as c:
            if self.step is None:
                self.step, _ = c.latest(self.job)
            records = self._records(c)
        # Rebuild DCP's global Metadata the way its coordinator would have:
        # each item once (the lowest rank's copy of a replicated one), in
        # rank order, then DCP's own global-plan step for the chunk lists.
        seen: set = set()
        plans: list[SavePlan] = []
        storage: dict = {}
        mappings: dict = {}
        for rec in records:
            items = []
            for item in rec.plan.items:
                key = (item.index.fqn, item.index.offset if item.type == WriteItemType.SHARD
                       or item.type == WriteItemType.TENSOR else None)
                if key in seen:
                    continue
                seen.add(key)
                items.append(item)
                storage[item.index] = rec.where[item.index]
            plans.append(dataclasses.replace(rec.plan, items=items))
            if isinstance(rec.plan.planner_data, dict):
                for k, v in rec.plan.planner_data.items():
                    mappings.setdefault(k, v)
        _, md = create_default_global_save_plan(plans)
        return dataclasses.replace(md, planner_data=mappings, storage_data=storage,
                                   storage_meta=StorageMeta(
                                       checkpoint_id="ckptd://%s/%d" % (self.job, self.step)))

    def _records(self, c: "ckptd.Client") -> list[_RankRecord]:
        first = self._first if self._first is not None else self._record(c, 0)
        out = [first]
        for rank in range(1, first.world_size):
            out.append(self._record(c, rank))
        return out

    def _record(self, c: "ckptd.Client", rank: int) -> _RankRecord:
        raw = c.read(self.job, self.step, rank, RANK_SHARD)
        try:
            rec = _decode_record(raw)
            if rec.rank != rank:
                raise ValueError("it says rank %d" % rec.rank)
        except Exception as e:  # noqa: BLE001 -- any decoding failure means the same
            raise ckptd.CorruptError(
                errno.EIO, "dcp", "step %d of job %r rank %d: its %s shard is not a ckptd.dcp "
                "record of format %d (%s: %s)" % (self.step, self.job, rank, RANK_SHARD,
                                                  _FORMAT, type(e).__name__, e)) from None
        return rec

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any,
                              **kwargs: Any) -> None:
        self.storage_data = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read what plan asks for as a few sequential streams per saved
        rank: the byte ranges the items need, merged where the gap between
        them is less than _CHUNK, read in _CHUNK pieces that start where the
        previous one ended -- what the daemon reads ahead (restore.c), so a
        rank's dcp-data streams from disk rather than restarting a
        read-ahead per item -- and copied out into each destination (for a
        tensor, its bytes; for a box that is not one range, a buffer of the
        covering range, then the box)."""
        parts = sorted((_Part(req, self.storage_data[req.storage_index], planner)
                        for req in plan.items), key=lambda p: (p.where.rank, p.where.shard, p.at))
        scratch = torch.empty(_CHUNK, dtype=torch.uint8) if parts else None
        with ckptd.Client(self.socket_path) as c:
            for run in _runs(parts):
                self._stream(c, run, scratch, planner)
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    def _stream(self, c: "ckptd.Client", run: list["_Part"], scratch: torch.Tensor,
                planner: LoadPlanner) -> None:
        w = run[0].where
        pos, end = run[0].at, max(p.at + p.n for p in run)
        first = 0  # run[first:] are not yet complete
        while pos < end:
            n = min(_CHUNK, end - pos)
            self._read_exact(c, w, pos, scratch[:n])
            for k in range(first, len(run)):
                p = run[k]
                if p.finished:  # ended in an earlier piece, behind a longer one
                    first += k == first
                    continue
                if p.at >= pos + n:
                    break
                lo, hi = max(p.at, pos), min(p.at + p.n, pos + n)
                if hi > lo:
                    p.sink[lo - p.at:hi - p.at].copy_(scratch[lo - pos:hi - pos])
                if p.at + p.n <= pos + n:
                    p.done(planner)
                    if k == first:
                        first += 1
            pos += n
        for p in run[first:]:  # empty ones at the very end
            if not p.finished:
                p.done(planner)

    def _read_exact(self, c: "ckptd.Client", w: _Where, offset: int, dest: Any) -> None:
        n = c.read_into(self.job, self.step, w.rank, w.shard, dest, offset)
        want = dest.numel() * dest.element_size() if isinstance(dest, torch.Tensor) else len(dest)
        if n != want:
            raise ckptd.CorruptError(
                errno.EIO, "dcp", "step %d of job %r rank %d: %s holds %d bytes at %d, the record "
                "says %d" % (self.step, self.job, w.rank, w.shard, n, offset, want))

_CHUNK = 64 << 20  # bytes per read of a stream: the default slot size, so each
                   # read is whole slots and the daemon's read-ahead lines up


def _runs(parts: list["_Part"]) -> list[list["_Part"]]:
    """parts (sorted by rank, shard, offset) grouped into runs read as one
    stream: same rank and shard, and less than _CHUNK between one part's
    end and the next one's start (reading through a short gap costs less
    than a restarted read-ahead)."""
    runs: list[list[_Part]] = []
    end = 0
    for p in parts:
        if runs and (p.where.rank, p.where.shard) == (runs[-1][0].where.rank,
                                                      runs[-1][0].where.shard) \
                and p.at - end < _CHUNK:
            runs[-1].append(p)
        else:
            runs.append([p])
            end = 0
        end = max(end, p.at + p.n)
    return runs


class _Part:
    """One item of a load plan: the byte range of its rank's shard that
    holds it (for a tensor: the smallest one covering the box the plan asks
    for), the bytes it is read into (`sink`: the destination tensor's own
    memory when the box is that whole range and the destination a
    contiguous tensor of the saved dtype, else a buffer), and what to do
    once they are all there."""

    def __init__(self, req: Any, where: _Where, planner: LoadPlanner) -> None:
        self.req, self.where, self.finished = req, where, False
        self.dest: Optional[torch.Tensor] = None
        self._buffer: Optional[torch.Tensor] = None
        if req.type == LoadItemType.BYTE_IO:
            self.at, self.n, self.box = where.offset, where.length, True
            return
        shape = list(where.shape)
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        self.lengths, self.strides = list(req.lengths), strides
        count = 1
        for n in req.lengths:
            count *= n
        esize = torch.empty((), dtype=where.dtype).element_size()
        first = sum(o * s for o, s in zip(req.storage_offsets, strides)) if count else 0
        last = (sum((o + n - 1) * s for o, n, s in zip(req.storage_offsets, req.lengths, strides))
                + 1) if count else 0
        self.at = where.offset + first * esize
        self.n = (last - first) * esize
        self.dest = planner.resolve_tensor(req).detach()
        self.box = not (count and last - first == count and self.dest.is_contiguous() and
                        self.dest.dtype == where.dtype)
        if not self.box:
            self._buffer = self.dest.reshape(-1).view(torch.uint8)  # its own memory

    @property
    def sink(self) -> torch.Tensor:
        """Where the range's bytes go; a buffer is allocated when the first
        of them arrive (a resharded load holds only those in flight)."""
        if self._buffer is None:
            self._buffer = torch.empty(self.n, dtype=torch.uint8)
        return self._buffer

    def done(self, planner: LoadPlanner) -> None:
        """Every byte of the range is in sink: hand the item over."""
        self.finished = True
        if self.req.type == LoadItemType.BYTE_IO:
            planner.load_bytes(self.req, io.BytesIO(self.sink.numpy().tobytes()))
        else:
            assert self.dest is not None
            if self.box and self.n:
                src = self.sink.view(self.where.dtype)
                self.dest.copy_(torch.as_strided(src, self.lengths, self.strides))
            planner.commit_tensor(self.req, self.dest)
        self._buffer = None
