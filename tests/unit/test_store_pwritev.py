"""``files.pwritev_all``: the CommitLog writes a chunk's record parts with ``pwritev`` without
joining them; groups of at most ``IOV_MAX`` buffers, short writes resumed mid-buffer, a failure
reported with the bytes that reached the file."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rocket.store import files

Buffer = bytes | bytearray | memoryview


def _buffers(chunks: list[bytes]) -> list[Buffer]:
    """The same bytes as bytes, bytearray and memoryview slices, as a chunk's parts are."""
    out: list[Buffer] = []
    for i, c in enumerate(chunks):
        out.append(c if i % 3 == 0 else bytearray(c) if i % 3 == 1 else memoryview(b"--" + c + b"--")[2:2 + len(c)])
    return out


class ShortWrites:
    """``os.pwritev`` that writes at most ``most`` bytes per call, and fails with ENOSPC once
    ``limit`` bytes reached the file; it records the buffer count of each call."""

    def __init__(self, most: int, limit: int | None = None) -> None:
        self.most, self.limit, self.written = most, limit, 0
        self.calls: list[int] = []

    def __call__(self, fd: int, buffers: Sequence[Buffer], offset: int) -> int:
        self.calls.append(len(buffers))
        data = b"".join(buffers)[:self.most]
        if self.limit is not None:
            if self.written >= self.limit:
                raise OSError(errno.ENOSPC, "No space left on device")
            data = data[:self.limit - self.written]
        n = os.pwrite(fd, data, offset)
        self.written += n
        return n


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.binary(max_size=40), min_size=1, max_size=30), most=st.integers(1, 200),
       iov_max=st.integers(1, 8), at=st.integers(0, 64))
def test_every_byte_lands_in_order_whatever_the_short_writes_and_the_group_size(
        tmp_path_factory: pytest.TempPathFactory, chunks: list[bytes], most: int, iov_max: int, at: int) -> None:
    path = tmp_path_factory.mktemp("w") / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    saved = files.IOV_MAX
    files.IOV_MAX = iov_max
    try:
        write = ShortWrites(most)
        data = b"".join(chunks)
        files.pwritev_all(fd, _buffers(chunks), at, len(data), write)
        assert os.pread(fd, len(data) + 10, at) == data
        assert max(write.calls, default=0) <= iov_max
        assert data or not write.calls  # nothing to write: no call
    finally:
        files.IOV_MAX = saved
        os.close(fd)


def test_a_chunk_within_iov_max_takes_one_call(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        chunks = [bytes([i % 256]) * 100 for i in range(files.IOV_MAX)]
        write = ShortWrites(1 << 30)
        files.pwritev_all(fd, _buffers(chunks), 0, 100 * len(chunks), write)
        assert write.calls == [len(chunks)]
        assert os.pread(fd, 1 << 20, 0) == b"".join(chunks)
    finally:
        os.close(fd)


def test_a_failure_after_a_short_write_reports_the_bytes_written(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        chunks = [b"a" * 10, b"b" * 10, b"c" * 10]
        with pytest.raises(files.PartialWriteError) as err:
            files.pwritev_all(fd, _buffers(chunks), 0, 30, ShortWrites(most=7, limit=15))
        assert err.value.written == 15 and err.value.errno == errno.ENOSPC
        assert os.pread(fd, 100, 0) == b"a" * 10 + b"b" * 5
    finally:
        os.close(fd)
