# SPDX-License-Identifier: MIT
"""The exceptions of the ckptd package: one family, rooted at :class:`Error`.

libckpt returns a negative errno and keeps the daemon's own words about the
failure (``ckpt_last_error()``).  Both become one exception:

- :class:`Error` is an :class:`OSError`; ``.errno`` is the errno,
  ``.message`` the daemon's (or libckpt's) message, ``.what`` the call that
  failed, and ``str(e)`` is ``"what: message"``.
- An instance is *also* the builtin subclass :class:`OSError` picks for its
  errno: ``Error(ENOENT, ...)`` is a :class:`FileNotFoundError`, ETIMEDOUT a
  :class:`TimeoutError`, EACCES a :class:`PermissionError`, EEXIST a
  :class:`FileExistsError`, ECONNREFUSED/ECONNRESET/EPIPE the
  :class:`ConnectionError` kinds, and so on.  Callers may catch either.
- :class:`CorruptError` (an :class:`Error`) is stored or staged data that
  failed its check: EIO from a CRC32C mismatch on read or map, EBADMSG for
  a torn shard (bytes changed after they were committed), and a commit
  refused (EPROTO) because of a torn shard.  Never retry it expecting other
  bytes: the copy is bad.

Exceptions pickle (DCP and multiprocessing send them between processes) and
come back as the same class with the same errno and message.
"""
from __future__ import annotations

import errno as _errno
import os
from typing import Dict, Optional, Tuple, Type

__all__ = ["Error", "CorruptError", "CkptError"]

# errnos whose failure means the data itself is bad
_CORRUPT = (_errno.EIO, _errno.EBADMSG)


def _builtin_kind(code: int) -> Type[OSError]:
    """The OSError subclass Python itself picks for errno `code`."""
    return type(OSError(code, ""))


class Error(OSError):
    """A ckptd call failed.

    Construct as ``Error(errno, what, message=None)``: `what` names the call
    (``"read"``, ``"save_write weights"``), `message` is the daemon's text
    (None: libckpt's text for the errno).  The instance returned is of a
    subclass that also derives from the builtin OSError kind of the errno
    (TimeoutError, FileNotFoundError, ...), or a :class:`CorruptError`.

    Attributes: ``errno`` (int), ``message`` (str), ``what`` (str),
    ``strerror`` (``"what: message"``, the same as ``str(e)``).
    """

    errno: int
    message: str
    what: str

    def __new__(cls, code: int, what: str = "", message: Optional[str] = None) -> "Error":
        cls = _pick(cls, code, message)
        if not message:
            message = _default_message(code)
        # OSError takes its arguments in __new__ when a subclass overrides it
        self = super().__new__(cls, code, "%s: %s" % (what, message) if what else message)
        self.message = message
        self.what = what
        return self

    def __init__(self, code: int, what: str = "", message: Optional[str] = None) -> None:
        # everything happened in __new__ (OSError.__init__ would reset args)
        pass

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> Tuple[object, Tuple[int, str, str]]:
        # the dynamic subclasses are not importable by name: rebuild through
        # the factory, which picks the same class again
        return (_rebuild, (self.errno, self.what, self.message))


class CorruptError(Error):
    """Corrupt data: a shard failed its CRC32C (EIO on read or map), or a
    save was torn (EBADMSG: bytes changed after they were committed; a
    commit refused with EPROTO for that reason).  Still an OSError."""


_KINDS: Dict[Tuple[Type[Error], Type[OSError]], Type[Error]] = {}


def _pick(cls: Type[Error], code: int, message: Optional[str]) -> Type[Error]:
    """The concrete class for (cls, errno): cls when it already is one,
    else the subclass of cls and the builtin kind of the errno."""
    if cls is Error and (code in _CORRUPT or
                         (code == _errno.EPROTO and message and "torn shard" in message)):
        cls = CorruptError
    builtin = _builtin_kind(code)
    if builtin is OSError or issubclass(cls, builtin):
        return cls
    key = (cls, builtin)
    kind = _KINDS.get(key)
    if kind is None:
        # e.g. CkptFileNotFoundError(Error, FileNotFoundError), the name the
        # binding gave these before 0.5
        name = ("Ckpt" if cls is Error else cls.__name__) + builtin.__name__
        kind = _KINDS[key] = type(name, (cls, builtin),
                                  {"__module__": __name__,
                                   "__doc__": "A %s that is also a %s." % (cls.__name__,
                                                                           builtin.__name__)})
    return kind


def _default_message(code: int) -> str:
    try:
        from . import _lib
        return _lib.strerror(code)
    except OSError:  # libckpt cannot be loaded: the C library's words
        return os.strerror(code)


def _rebuild(code: int, what: str, message: str) -> Error:
    return Error(code, what, message)


# The binding's name before 0.5; kept so existing `except ckptd.CkptError` works.
CkptError = Error
