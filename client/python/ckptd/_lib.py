# SPDX-License-Identifier: MIT
"""Loading libckpt.so and declaring the C signatures (ctypes).

The library is found through $CKPT_LIBRARY (a path, for a build tree), then
the system's library path (``ctypes.util.find_library("ckpt")``, then the
soname ``libckpt.so.0``).  It is loaded on first use, not at import, so
``import ckptd`` works on a machine without libckpt (for type checking,
documentation, or code that only names the exceptions).

The library is loaded with :class:`ctypes.CDLL`, never ``PyDLL``: ctypes
releases the GIL for the duration of every call into it, so the copy into
shared memory, reads, waits and commits let other Python threads run.

Symbols newer than libckpt 0.1 are *optional*: bound when the library has
them, absent otherwise; :func:`has` says which.  A call whose symbol is
missing raises :class:`ckptd.Error` with errno EOPNOTSUPP (the callers in
client.py check and say which libckpt version added it).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

c_p = ctypes.c_void_p
c_int = ctypes.c_int
c_u32 = ctypes.c_uint32
c_u64 = ctypes.c_uint64
c_i64 = ctypes.c_int64
c_str = ctypes.c_char_p


class ShardInfoC(ctypes.Structure):
    """struct ckpt_shard_info."""
    _fields_ = [("name", ctypes.c_char * 256), ("size", c_u64), ("crc32c", c_u32)]


class JobInfoC(ctypes.Structure):
    """struct ckpt_job_info (libckpt 0.5)."""
    _fields_ = [("name", ctypes.c_char * 256), ("uid", c_u32), ("latest_committed", c_i64),
                ("checkpoints", c_u32), ("committed", c_u32), ("bytes_local", c_u64),
                ("errors", c_u32)]


class StepInfoC(ctypes.Structure):
    """struct ckpt_step_info (libckpt 0.5)."""
    _fields_ = [("step", c_u64), ("world_size", c_u32), ("ranks_local", c_u32),
                ("state", ctypes.c_uint8), ("remote_state", ctypes.c_uint8),
                ("pinned", ctypes.c_uint8), ("replicas", ctypes.c_uint8),
                ("bytes", c_u64), ("shards", c_u32), ("committed_at", c_i64)]


class IOVec(ctypes.Structure):
    """struct iovec (<sys/uio.h>)."""
    _fields_ = [("iov_base", c_p), ("iov_len", ctypes.c_size_t)]


_Sig = Tuple[Any, List[Any]]

# Every libckpt since 0.1 has these.
_REQUIRED: Dict[str, _Sig] = {
    "ckpt_connect": (c_int, [c_str, ctypes.POINTER(c_p)]),
    "ckpt_disconnect": (None, [c_p]),
    "ckpt_last_error": (c_str, [c_p]),
    "ckpt_strerror": (c_str, [c_int]),
    "ckpt_save_begin": (c_int, [c_p, c_str, c_u64, c_u32, c_u32, ctypes.POINTER(c_p)]),
    "ckpt_save_write": (c_int, [c_p, c_str, c_p, c_u64]),
    "ckpt_shard_begin": (c_int, [c_p, c_str, c_u64, ctypes.POINTER(c_p)]),
    "ckpt_shard_buffer": (c_int, [c_p, ctypes.POINTER(c_p), ctypes.POINTER(c_u64),
                                  ctypes.POINTER(c_u64)]),
    "ckpt_shard_commit": (c_int, [c_p]),
    "ckpt_save_finish": (c_int, [c_p]),
    "ckpt_save_abort": (None, [c_p]),
    "ckpt_wait": (c_int, [c_p, c_str, c_u64, c_int, c_u32]),
    "ckpt_commit": (c_int, [c_p, c_str, c_u64, c_u32]),
    "ckpt_latest": (c_int, [c_p, c_str, ctypes.POINTER(c_u64), ctypes.POINTER(c_u32)]),
    "ckpt_shard_list": (c_int, [c_p, c_str, c_u64, c_u32, ctypes.POINTER(c_p),
                                ctypes.POINTER(ctypes.c_size_t)]),
    "ckpt_shard_list_free": (None, [c_p]),
    "ckpt_read": (c_i64, [c_p, c_str, c_u64, c_u32, c_str, c_u64, c_p, c_u64]),
    "ckpt_map": (c_int, [c_p, c_str, c_u64, c_u32, c_str, ctypes.POINTER(c_p),
                         ctypes.POINTER(c_u64)]),
    "ckpt_unmap": (None, [c_p, c_u64]),
}

# Newer symbols, and the libckpt version that added each (for messages).
_OPTIONAL: Dict[str, Tuple[str, _Sig]] = {
    "ckpt_latest_rank": ("0.2", (c_int, [c_p, c_str, c_u32, c_u64, ctypes.POINTER(c_u64),
                                         ctypes.POINTER(c_u32), ctypes.POINTER(c_u64)])),
    "ckpt_set_timeout": ("0.3", (c_int, [c_p, c_u32])),
    "ckpt_save_replaced": ("0.4", (c_int, [c_p])),
    "ckpt_save_writev": ("0.5", (c_int, [c_p, c_str, ctypes.POINTER(IOVec), c_int])),
    "ckpt_pin": ("0.5", (c_int, [c_p, c_str, c_u64, c_int])),
    "ckpt_jobs": ("0.5", (c_int, [c_p, ctypes.POINTER(ctypes.POINTER(JobInfoC)),
                                  ctypes.POINTER(ctypes.c_size_t)])),
    "ckpt_jobs_free": ("0.5", (None, [ctypes.POINTER(JobInfoC)])),
    "ckpt_steps": ("0.5", (c_int, [c_p, c_str, ctypes.POINTER(ctypes.POINTER(StepInfoC)),
                                   ctypes.POINTER(ctypes.c_size_t)])),
    "ckpt_steps_free": ("0.5", (None, [ctypes.POINTER(StepInfoC)])),
    "ckpt_commit_async": ("0.5", (c_int, [c_p, c_str, c_u64])),
}

_lock = threading.Lock()
_lib: Optional[ctypes.CDLL] = None


def library_path() -> str:
    """The name or path libckpt is (or will be) loaded from."""
    return (os.environ.get("CKPT_LIBRARY") or ctypes.util.find_library("ckpt")
            or "libckpt.so.0")


def _load() -> ctypes.CDLL:
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise OSError("cannot load libckpt (%s): %s; install libckpt or set $CKPT_LIBRARY "
                      "to the path of libckpt.so" % (path, e)) from None
    for name, (res, args) in _REQUIRED.items():
        f = getattr(lib, name)
        f.restype = res
        f.argtypes = args
    for name, (_, (res, args)) in _OPTIONAL.items():
        f = getattr(lib, name, None)
        if f is not None:
            f.restype = res
            f.argtypes = args
    return lib


def lib() -> ctypes.CDLL:
    """libckpt, loaded and declared on first use (thread-safe)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _load()
    return _lib


def has(name: str) -> bool:
    """Whether the loaded libckpt has the optional symbol `name`."""
    return hasattr(lib(), name)


def since(name: str) -> str:
    """The libckpt version that added the optional symbol `name`."""
    return _OPTIONAL[name][0]


def strerror(code: int) -> str:
    """libckpt's text for a positive errno."""
    return (lib().ckpt_strerror(-code) or b"").decode(errors="replace")


def last_error(conn: Optional[ctypes.c_void_p]) -> Optional[str]:
    """The daemon's (or libckpt's) message about the last failure on conn,
    None when it has none; conn None: the calling thread's last connect."""
    msg = lib().ckpt_last_error(conn)
    return msg.decode(errors="replace") if msg else None
