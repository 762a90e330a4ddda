# SPDX-License-Identifier: MIT
"""Where the bytes of a Python object are: buffers, numpy arrays, torch tensors.

A save copies an object's bytes into the daemon's shared-memory slots, and a
read copies a shard into an object's memory.  The copy itself happens in C
(libckpt, with the CRC32C folded in) whenever the object's bytes are one
contiguous range; this module finds that range without copying anything:

- any object with the buffer protocol (bytes, bytearray, memoryview, array,
  mmap, numpy arrays, ...): ``PyObject_GetBuffer()`` through ctypes, which
  works for read-only buffers too (``bytes``); the buffer is released after
  the call.  ``ctypes.c_char.from_buffer`` would refuse read-only buffers,
  and a ``create_string_buffer`` copy is what this replaces.
- torch tensors (any dtype: bfloat16, float8, bool, complex, ...; CPU only):
  ``tensor.data_ptr()`` and ``numel() * element_size()``, checked against
  ``tensor.untyped_storage()``.

Objects whose bytes are *not* one range (a transposed or step-sliced tensor
or array, a tensor with its conjugate or negative bit set, a strided
memoryview) are logical C-order byte streams: :class:`StridedSource` copies
element ranges of them straight into a destination window with torch's or
numpy's own strided copy (no temporary copy of the whole object), and
:class:`StridedSink` the other way.  Only a strided memoryview on a machine
without numpy is copied to ``bytes`` first.

torch and numpy are never imported here: an object can only be a tensor
(array) when the program has imported torch (numpy) already.
"""
from __future__ import annotations

import ctypes
import sys
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar, Union

__all__ = ["Source", "ContiguousSource", "StridedSource", "Sink", "ContiguousSink",
           "StridedSink", "source", "sink", "window_array"]


class _PyBuffer(ctypes.Structure):
    """Py_buffer (Include/pybuffer.h), stable since Python 3.3."""
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p),
                ("len", ctypes.c_ssize_t), ("itemsize", ctypes.c_ssize_t),
                ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("suboffsets", ctypes.c_void_p),
                ("internal", ctypes.c_void_p)]


_PyBUF_SIMPLE = 0
_PyBUF_WRITABLE = 0x0001

# ctypes.pythonapi holds the GIL (as these calls must) and raises the Python
# exception they set
_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None

_M = TypeVar("_M", bound="_Memory")

# Strided reads go through a bounce buffer of at most this many bytes.
BOUNCE_BYTES = 8 << 20


def window_array(address: int, nbytes: int) -> ctypes.Array:  # type: ignore[type-arg]
    """A writable ctypes char array over [address, address + nbytes), for
    memoryview / torch.frombuffer / numpy.frombuffer.  Does not own it."""
    return (ctypes.c_char * nbytes).from_address(address)


def _torch() -> Any:
    return sys.modules.get("torch")


def _numpy() -> Any:
    return sys.modules.get("numpy")


def is_tensor(obj: object) -> bool:
    """Whether obj is a torch.Tensor (False when torch is not imported)."""
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


def _is_ndarray(obj: object) -> bool:
    np = _numpy()
    return np is not None and isinstance(obj, np.ndarray)


# ---- sources: bytes to save ---------------------------------------------------


class _Memory:
    """Memory of one object that a C call reads or writes: ``nbytes`` long,
    at ``address`` when it is one contiguous range (else None).  Keep it
    (or use it as a context manager) until the C call returned: it holds
    the buffer export."""

    nbytes: int
    address: Optional[int]

    def release(self) -> None:
        """Give back what pins the object's memory (idempotent)."""

    def __enter__(self: _M) -> _M:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Source(_Memory):
    """The bytes of one object to save, as a logical C-order byte stream.

    ``nbytes`` is its length; ``address`` the start of its bytes when they
    are one contiguous range (the C paths use it), else None and
    :meth:`copy_out` does the copy.  Keep the Source (or use it as a context
    manager) until the C call returned: it holds the buffer export."""

    nbytes: int
    address: Optional[int]

    def copy_out(self, start: int, stop: int, dst: int) -> None:
        """Copy bytes [start, stop) of the stream to address dst."""
        raise NotImplementedError


class _Held:
    """Bytes at [address, address + nbytes) of an object: `keep` keeps the
    owner alive, `view` (a Py_buffer export) is given back by release()."""

    def __init__(self, address: int, nbytes: int, keep: object = None,
                 view: Optional[_PyBuffer] = None) -> None:
        self.address: Optional[int] = address
        self.nbytes = nbytes
        self._keep = keep
        self._view = view

    def release(self) -> None:
        if self._view is not None:
            _release_buffer(ctypes.byref(self._view))
            self._view = None
        self._keep = None


class ContiguousSource(_Held, Source):
    """Source bytes that are one range."""

    def copy_out(self, start: int, stop: int, dst: int) -> None:
        if stop > start:
            assert self.address is not None
            ctypes.memmove(dst, self.address + start, stop - start)  # releases the GIL


class _ArrayOps:
    """What StridedSource/StridedSink need of torch or numpy."""

    def __init__(self, view: Any) -> None:
        self.view = view
        self.shape: Tuple[int, ...] = tuple(view.shape)
        self.numel = 1
        for d in self.shape:
            self.numel *= d

    itemsize: int

    def flat(self, address: int, count: int) -> Any:
        """A 1-D array/tensor of the view's dtype over count elements at address."""
        raise NotImplementedError

    def assign(self, dst: Any, src: Any) -> None:
        raise NotImplementedError

    def element_bytes(self, index: Tuple[int, ...]) -> bytes:
        raise NotImplementedError

    def set_element(self, index: Tuple[int, ...], data: bytes) -> None:
        raise NotImplementedError


class _TorchOps(_ArrayOps):
    def __init__(self, view: Any) -> None:
        super().__init__(view)
        self.itemsize = view.element_size()

    def flat(self, address: int, count: int) -> Any:
        torch = _torch()
        # uint8 then .view(dtype): torch.frombuffer does not take every dtype
        # (float8, complex32) directly, a view of bytes does
        t = torch.frombuffer(window_array(address, count * self.itemsize), dtype=torch.uint8)
        return t.view(self.view.dtype)

    def assign(self, dst: Any, src: Any) -> None:
        dst.copy_(src)  # honours conjugate / negative bits and strides

    def element_bytes(self, index: Tuple[int, ...]) -> bytes:
        torch = _torch()
        one = torch.empty((), dtype=self.view.dtype)
        one.copy_(self.view[index])
        return ctypes.string_at(one.data_ptr(), self.itemsize)

    def set_element(self, index: Tuple[int, ...], data: bytes) -> None:
        torch = _torch()
        one = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(self.view.dtype)
        self.view[index].copy_(one.reshape(()))


class _NumpyOps(_ArrayOps):
    def __init__(self, view: Any) -> None:
        super().__init__(view)
        self.itemsize = view.dtype.itemsize

    def flat(self, address: int, count: int) -> Any:
        np = _numpy()
        return np.frombuffer(window_array(address, count * self.itemsize), dtype=self.view.dtype)

    def assign(self, dst: Any, src: Any) -> None:
        _numpy().copyto(dst, src)  # releases the GIL for plain dtypes

    def element_bytes(self, index: Tuple[int, ...]) -> bytes:
        return bytes(_numpy().ascontiguousarray(self.view[index]).tobytes())

    def set_element(self, index: Tuple[int, ...], data: bytes) -> None:
        np = _numpy()
        self.view[index] = np.frombuffer(data, dtype=self.view.dtype)[0]


def _copy_elements(ops: _ArrayOps, view: Any, start: int, stop: int, flat: Any,
                   to_flat: bool) -> None:
    """Copy elements [start, stop) of `view` in C order to (to_flat) or from
    the 1-D `flat` of stop - start elements: whole rows of the outermost
    dimension in one strided copy, partial rows at either end by recursion
    into that row (at most two per dimension)."""
    if stop <= start:
        return
    shape = tuple(view.shape)
    numel = 1
    for d in shape:
        numel *= d
    if start == 0 and stop == numel:
        part = flat.reshape(shape)
        ops.assign(part, view) if to_flat else ops.assign(view, part)
        return
    row = numel // shape[0]
    i0, r0 = divmod(start, row)
    i1, r1 = divmod(stop, row)
    pos = 0
    if r0:
        end = row if i1 > i0 else r1
        _copy_elements(ops, view[i0], r0, end, flat[0:end - r0], to_flat)
        pos = end - r0
        i0 += 1
        if i0 > i1:
            return  # the range was inside one row
    if i1 > i0:
        k = (i1 - i0) * row
        part = flat[pos:pos + k].reshape((i1 - i0,) + shape[1:])
        ops.assign(part, view[i0:i1]) if to_flat else ops.assign(view[i0:i1], part)
        pos += k
    if r1:
        _copy_elements(ops, view[i1], 0, r1, flat[pos:pos + r1], to_flat)


def _unravel(shape: Sequence[int], flat_index: int) -> Tuple[int, ...]:
    index: List[int] = []
    for d in reversed(shape):
        flat_index, i = divmod(flat_index, d)
        index.append(i)
    return tuple(reversed(index))


class StridedSource(Source):
    """A tensor or array whose bytes are not one contiguous range (or whose
    memory does not hold its values: a conjugate/negative view); copy_out()
    copies element ranges of it with torch's / numpy's strided copy, and the
    bytes of an element cut by a window boundary through a one-element
    temporary."""

    address = None

    def __init__(self, ops: _ArrayOps) -> None:
        self._ops = ops
        self.nbytes = ops.numel * ops.itemsize

    def copy_out(self, start: int, stop: int, dst: int) -> None:
        ops, isz = self._ops, self._ops.itemsize
        pos = start
        if pos % isz and pos < stop:  # the tail of an element begun in the last window
            e = pos // isz
            take = min(stop, (e + 1) * isz) - pos
            piece = ops.element_bytes(_unravel(ops.shape, e))[pos - e * isz:][:take]
            ctypes.memmove(dst, piece, take)
            pos += take
        e0, e1 = -(-pos // isz), stop // isz
        if e1 > e0:
            _copy_elements(ops, ops.view, e0, e1, ops.flat(dst + (pos - start), e1 - e0), True)
            pos = e1 * isz
        if pos < stop:  # the head of an element the next window ends
            e = pos // isz
            piece = ops.element_bytes(_unravel(ops.shape, e))[:stop - pos]
            ctypes.memmove(dst + (pos - start), piece, stop - pos)

    def release(self) -> None:
        pass


def _check_tensor(t: Any, what: str) -> None:
    torch = _torch()
    if t.device.type != "cpu":
        raise ValueError("%s: the tensor is on device '%s'; ckptd reads and writes host "
                         "memory: pass tensor.cpu() (or stage it yourself)" % (what, t.device))
    if t.layout != torch.strided:
        raise TypeError("%s: a %s tensor has no flat bytes; pass a dense tensor "
                        "(tensor.to_dense())" % (what, t.layout))
    if t.is_quantized:
        raise TypeError("%s: quantized tensors are not supported; save tensor.int_repr() "
                        "and the quantization parameters" % what)


def _tensor_is_flat(t: Any) -> bool:
    """Whether the tensor's memory holds exactly its values in C order."""
    return bool(t.is_contiguous() and not t.is_conj() and not t.is_neg())


def _tensor_range(t: Any) -> Tuple[int, int]:
    """(address, nbytes) of a flat CPU tensor, inside its storage."""
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return 0, 0
    address = t.data_ptr()
    storage = t.untyped_storage()
    base = storage.data_ptr()
    if address < base or address + nbytes > base + storage.nbytes():
        raise ValueError("tensor bytes %#x+%d lie outside its storage %#x+%d"
                         % (address, nbytes, base, storage.nbytes()))
    return address, nbytes


def _get_buffer_view(obj: object, flags: int) -> _PyBuffer:
    view = _PyBuffer()
    _get_buffer(obj, ctypes.byref(view), flags)  # raises on failure
    return view


def _tensor_or_array(obj: object, what: str,
                     dest: bool) -> Union[None, Tuple[int, int], _ArrayOps]:
    """For a tensor or a numpy array: (address, nbytes) when its memory is
    its C-order bytes, its _ArrayOps when it is strided; None for anything
    else (and C-contiguous arrays, which the buffer protocol handles).
    dest: it is to be read into (writable, no conjugate/negative view)."""
    if is_tensor(obj):
        t: Any = obj
        _check_tensor(t, what)
        if dest and (t.is_conj() or t.is_neg()):
            raise ValueError("%s: the tensor is a conjugate/negative view; read into "
                             "tensor.resolve_conj() / resolve_neg() instead" % what)
        return _tensor_range(t) if _tensor_is_flat(t) else _TorchOps(t)
    if _is_ndarray(obj):
        a: Any = obj
        if a.dtype.hasobject:
            raise TypeError("%s: a numpy array of Python objects has no bytes; pickle it"
                            % what)
        if dest and not a.flags.writeable:
            raise TypeError("%s: the numpy array is read-only" % what)
        if not a.flags.c_contiguous:
            return _NumpyOps(a)
    return None


def source(obj: object, what: str = "write") -> Source:
    """The Source for obj: a torch tensor (CPU), a numpy array, or any object
    with the buffer protocol.  Nothing is copied; ValueError for a tensor on
    another device, TypeError for anything without bytes."""
    kind = _tensor_or_array(obj, what, False)
    if isinstance(kind, _ArrayOps):
        return StridedSource(kind)
    if kind is not None:
        return ContiguousSource(kind[0], kind[1], keep=obj)
    try:
        view = _get_buffer_view(obj, _PyBUF_SIMPLE)
    except BufferError:
        # a buffer, but not C-contiguous (a strided memoryview)
        mv = memoryview(obj)  # type: ignore[arg-type]
        np = _numpy_importable()
        if np is not None:
            return StridedSource(_NumpyOps(np.asarray(mv)))
        data = mv.tobytes()  # no numpy: one extra copy (documented)
        return source(data, what)
    except TypeError:
        raise TypeError("%s: %s is neither a buffer (bytes, bytearray, memoryview, numpy "
                        "array, ...) nor a torch tensor" % (what, type(obj).__name__)) from None
    return ContiguousSource(view.buf or 0, view.len, view=view)


def _numpy_importable() -> Any:
    np = _numpy()
    if np is None:
        try:
            import numpy as np  # type: ignore[no-redef]
        except ImportError:
            return None
    return np


# ---- sinks: memory to read into -----------------------------------------------


class Sink(_Memory):
    """Memory to read a shard into, as a logical C-order byte stream of
    ``nbytes``; ``address`` when it is one writable range, else
    :meth:`copy_in` does the copy and ``itemsize`` is its element size."""

    nbytes: int
    address: Optional[int]
    itemsize: int = 1

    def copy_in(self, start: int, src: bytes, length: int) -> None:
        """Store the first `length` bytes of src at [start, start+length)."""
        raise NotImplementedError


class ContiguousSink(_Held, Sink):
    """Writable memory that is one range: reads land in it directly."""

    def copy_in(self, start: int, src: bytes, length: int) -> None:
        assert self.address is not None
        ctypes.memmove(self.address + start, src, length)


class StridedSink(Sink):
    """A writable tensor or array whose bytes are not one range: reads land
    in a bounce buffer and are copied into element ranges."""

    address = None

    def __init__(self, ops: _ArrayOps) -> None:
        self._ops = ops
        self.itemsize = ops.itemsize
        self.nbytes = ops.numel * ops.itemsize

    def copy_in(self, start: int, src: bytes, length: int) -> None:
        ops, isz = self._ops, self._ops.itemsize
        assert start % isz == 0, "reads into a strided sink start on element boundaries"
        e0, whole = start // isz, length // isz
        keep = (ctypes.c_char * max(len(src), 1)).from_buffer(src)  # type: ignore[arg-type]
        if whole:
            flat = ops.flat(ctypes.addressof(keep), whole)
            _copy_elements(ops, ops.view, e0, e0 + whole, flat, False)
        rest = length - whole * isz
        if rest:  # a shard that ends inside an element: patch its first bytes
            index = _unravel(ops.shape, e0 + whole)
            old = ops.element_bytes(index)
            ops.set_element(index, bytes(src[whole * isz:length]) + old[rest:])


def sink(obj: object, what: str = "read_into") -> Sink:
    """The Sink for obj: a writable buffer, numpy array or CPU torch tensor.
    TypeError for a read-only object, ValueError for a tensor on another
    device or one with its conjugate/negative bit set."""
    kind = _tensor_or_array(obj, what, True)
    if isinstance(kind, _ArrayOps):
        return StridedSink(kind)
    if kind is not None:
        return ContiguousSink(kind[0], kind[1], keep=obj)
    try:
        view = _get_buffer_view(obj, _PyBUF_WRITABLE)
    except TypeError:
        raise TypeError("%s: %s is neither a buffer nor a torch tensor"
                        % (what, type(obj).__name__)) from None
    except BufferError:
        mv = memoryview(obj)  # type: ignore[arg-type]
        if mv.readonly:
            raise TypeError("%s: %s is read-only; pass a writable buffer (bytearray, "
                            "numpy array, tensor)" % (what, type(obj).__name__)) from None
        np = _numpy_importable()
        if np is None:
            raise TypeError("%s: a strided buffer needs numpy to be read into; pass a "
                            "contiguous one" % what) from None
        return StridedSink(_NumpyOps(np.asarray(mv)))
    return ContiguousSink(view.buf or 0, view.len, view=view)


def read_strided(s: Sink, read: Callable[[int, Any, int], int], offset: int) -> int:
    """Fill a Sink without an address: read(shard_offset, address, length)
    -> bytes read, through a bounce buffer of whole elements.  Returns the
    bytes stored (fewer than s.nbytes at the shard's end)."""
    isz = max(s.itemsize, 1)
    chunk = max(isz, min(s.nbytes, BOUNCE_BYTES) // isz * isz)
    bounce = bytearray(chunk)
    addr = ctypes.addressof((ctypes.c_char * chunk).from_buffer(bounce))
    done = 0
    while done < s.nbytes:
        want = min(chunk, s.nbytes - done)
        n = read(offset + done, addr, want)
        if n > 0:
            s.copy_in(done, bounce, n)  # type: ignore[arg-type]
            done += n
        if n < want:
            break
    return done
