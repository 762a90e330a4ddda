# SPDX-License-Identifier: MIT
"""ckptd: hand checkpoint shards to the node's ckptd and read them back.

    import ckptd
    with ckptd.Client() as c:                      # $CKPT_SOCKET or the default
        with c.save("llama", step, rank, world) as s:
            s.write("model", tensor)               # any buffer, numpy array or CPU tensor
            s.writev("small", [t1, t2, t3])        # one shard, several pieces
        c.commit("llama", step)                    # any rank, no barrier needed
        step, world = c.latest("llama")
        step, world, newest = c.latest_rank("llama", rank)  # take the min over ranks
        c.read_into("llama", step, rank, "model", tensor)   # straight into its memory
        with c.map("llama", step, rank, "model") as m:
            t = m.tensor(torch.bfloat16, shape)    # read-only, no copy

A typed ctypes binding over libckpt.so ($CKPT_LIBRARY, else the system's
library path), without runtime dependencies: torch and numpy are used when
the caller passes their objects and are never imported otherwise (except by
Mapping.tensor() / Mapping.numpy()).  Failures raise :class:`Error` (an
OSError carrying errno and the daemon's message, also the builtin subclass
of its errno: FileNotFoundError, TimeoutError, PermissionError, ...) or
:class:`CorruptError` for data that failed its checksum.  libckpt is called
through ctypes.CDLL, which releases the GIL during every call: copies,
reads, waits and commits let other threads run.

Deadlines (ckpt.h, "Deadlines"): each request waits for the daemon's reply
at most Client(timeout_ms=...) / set_timeout() / $CKPT_TIMEOUT_MS (default
60 s); wait() and commit() their own timeout_ms plus 250 ms.  Running out
raises TimeoutError and closes the connection: later calls raise Error
ENOTCONN; open a new Client.  See docs/python.md.
"""
from .client import (COMMITTED, LOCAL, REMOTE, REPLICATED, STAGED, STEP_LATEST, Client,
                     JobInfo, Latest, Mapping, RankStep, RemoteState, Save, ShardInfo,
                     ShardWriter, StepInfo, StepState, Tier)
from .errors import CkptError, CorruptError, Error

__version__ = "0.5.0"

__all__ = ["Client", "Save", "ShardWriter", "Mapping", "Error", "CorruptError", "CkptError",
           "Tier", "StepState", "RemoteState", "ShardInfo", "JobInfo", "StepInfo", "Latest",
           "RankStep", "STAGED", "LOCAL", "COMMITTED", "REMOTE", "REPLICATED", "STEP_LATEST",
           "__version__"]
