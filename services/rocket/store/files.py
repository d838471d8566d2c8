"""Small file primitives shared by the store's file formats.

Everything here blocks on the disk: call it from an executor thread (or from
start-up recovery, which runs in one), never from the event loop.
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from mypy_extensions import mypyc_attr

#: Names of CommitLog/ConsumeQueue files: the start offset, 20 decimal digits.
OFFSET_NAME_DIGITS = 20


class MappedFile:
    """A fixed-size store file: ``[start, start + size)`` of its log, an O_RDWR descriptor
    (``fd``, -1 until opened) and a read-only shared mapping made on first :meth:`view`.

    Writes never go through the mapping (``pwrite`` on ``fd``).
    """

    __slots__ = ("_mm", "fd", "path", "size", "start")

    def __init__(self, start: int, size: int, path: Path, fd: int = -1) -> None:
        self.start = start
        self.size = size
        self.path = path
        self.fd = fd
        self._mm: mmap.mmap | None = None

    @property
    def end(self) -> int:
        """Offset just past this file."""
        return self.start + self.size

    def view(self) -> mmap.mmap:
        """The read-only mapping of the whole file (created on first use)."""
        mm = self._mm
        if mm is None:
            mm = self._mm = mmap.mmap(self.fd, self.size, prot=mmap.PROT_READ)
        return mm

    def close_view(self) -> None:
        """Drop the mapping (on the loop, before the file goes away)."""
        if self._mm is not None:
            with contextlib.suppress(BufferError):
                self._mm.close()
            self._mm = None

    def close(self) -> None:
        """Drop the mapping and close the descriptor."""
        self.close_view()
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path.name})"


@mypyc_attr(native_class=False)
class PartialWriteError(OSError):
    """A write failed after ``written`` of its bytes reached the file."""

    def __init__(self, err: OSError, written: int) -> None:
        super().__init__(err.errno, err.strerror)
        self.written = written
        self.cause = err


def offset_name(offset: int) -> str:
    """File name for a file starting at ``offset``: 20 zero-padded digits (``UtilAll.offset2FileName``)."""
    return f"{offset:0{OFFSET_NAME_DIGITS}d}"


def parse_offset_name(name: str) -> int | None:
    """Inverse of :func:`offset_name`; None for any other name."""
    if len(name) == OFFSET_NAME_DIGITS and name.isdigit():
        return int(name)
    return None


def fsync_dir(path: Path) -> None:
    """fsync a directory so that created, renamed or deleted entries are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def allocate(fd: int, size: int, preallocate: bool, *, for_mapping: bool = False) -> None:
    """Make the file ``size`` bytes long; with ``preallocate`` reserve the blocks too.

    Preallocation (``posix_fallocate``) turns a later ENOSPC into an error here,
    at creation, instead of at a write. Where the file system cannot
    preallocate, falls back to a sparse ``ftruncate`` — or, ``for_mapping``
    (a file that will be written through mmap, where a missing block would be
    a SIGBUS), to writing zeros. Raises ``OSError`` (ENOSPC ...).
    """
    if preallocate:
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
            if for_mapping:
                zeros = bytes(1 << 20)
                pos = os.fstat(fd).st_size
                while pos < size:
                    pos += os.pwrite(fd, zeros[: size - pos], pos)
                return
    os.ftruncate(fd, size)


def create_file(path: Path, size: int, preallocate: bool, *, for_mapping: bool = False) -> int:
    """Create (or reopen) ``path`` with ``size`` bytes and return an O_RDWR descriptor.

    See :func:`allocate` for ``preallocate`` and ``for_mapping``. A file that
    could not be sized is removed again. Raises ``OSError``.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size < size:
            allocate(fd, size, preallocate, for_mapping=for_mapping)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise
    fsync_dir(path.parent)
    return fd


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int,
               pwrite: Callable[[int, bytes | bytearray | memoryview, int], int] = os.pwrite) -> None:
    """Write all of ``data`` at ``offset``; raises :class:`PartialWriteError` with the bytes written."""
    view = memoryview(data)
    done = 0
    total = len(view)
    try:
        while done < total:
            n = pwrite(fd, view[done:], offset + done)
            if n <= 0:
                raise OSError(errno.EIO, "write returned 0")
            done += n
    except OSError as exc:
        raise PartialWriteError(exc, done) from exc
    finally:
        view.release()


#: A buffer :func:`pwritev_all` writes: the parts of CommitLog records as they were made.
Buffer = bytes | bytearray | memoryview
#: The most buffers one ``pwritev`` takes (``IOV_MAX``; POSIX guarantees at least 16, Linux has 1024).
IOV_MAX: int = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16


def pwritev_all(fd: int, buffers: Sequence[Buffer], offset: int, total: int,
                pwritev: Callable[[int, Sequence[Buffer], int], int] = os.pwritev) -> None:
    """Write ``buffers`` one after the other from ``offset`` (``total`` bytes, their summed
    lengths) with as few ``pwritev(2)`` calls as :data:`IOV_MAX` allows, without joining them;
    after a short write the rest is written from where it stopped. Raises
    :class:`PartialWriteError` with the bytes written."""
    done = 0
    i = 0
    count = len(buffers)
    try:
        while i < count:
            group = buffers[i:i + IOV_MAX] if i or count > IOV_MAX else buffers
            want = total - done if len(group) == count - i else sum(map(len, group))
            if not want:  # only empty buffers (an empty body)
                i += len(group)
                continue
            n = pwritev(fd, group, offset + done)
            if n <= 0:
                raise OSError(errno.EIO, "write returned 0")
            done += n
            if n == want:
                i += len(group)
                continue
            # a short write: go on from the first byte that did not reach the file
            rest = [memoryview(b).cast("B") for b in group]
            k = 0
            while n >= len(rest[k]):
                n -= len(rest[k])
                k += 1
            rest[k] = rest[k][n:]
            buffers = [*rest[k:], *buffers[i + len(group):]]
            count = len(buffers)
            i = 0
    except OSError as exc:
        raise PartialWriteError(exc, done) from exc


def write_file_atomically(path: Path, data: bytes, *, keep_bak: bool = True) -> None:
    """Replace ``path`` with ``data`` durably: temp file, fsync, (``.bak`` of the old), rename, fsync dir."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pwrite_all(fd, data, 0)
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep_bak and path.exists():
        # Hard-link the current copy to .bak first, so that ``path`` exists at every moment.
        bak_tmp = path.with_name(path.name + ".bak.tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(bak_tmp)
        os.link(path, bak_tmp)
        os.replace(bak_tmp, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    fsync_dir(path.parent)
