"""Epoch file and consistent-point logic (rocket.store.ha.epoch) and the slave's reconcile helper."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from rocket.store.ha.epoch import (
    EpochEntry,
    EpochFile,
    EpochFileError,
    check_entries,
    entries_from_json,
    find_consistent_point,
)
from rocket.store.ha.slave import common_epoch


def E(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, s) for e, s in pairs]


def test_rocketmq5_sample_consistent_point() -> None:
    local = E((1, 100), (2, 300), (3, 500))
    remote = E((1, 100), (2, 300), (3, 450))
    assert find_consistent_point(local, 700, remote, 700) == 450
    assert find_consistent_point(remote, 700, local, 700) == 450


@pytest.mark.parametrize(
    ("local", "local_max", "remote", "remote_max", "point"),
    [
        # a slave merely behind: nothing to cut
        (E((1, 0)), 100, E((1, 0)), 500, 100),
        (E((1, 0)), 100, E((1, 0), (2, 300)), 500, 100),
        # an old master that wrote past the promotion point: cut at the new epoch's start
        (E((1, 0)), 400, E((1, 0), (2, 300)), 500, 300),
        # its own newer epoch (split brain) never reached the new master
        (E((1, 0), (2, 300)), 800, E((1, 0), (3, 350)), 900, 300),
        # same epoch number, other start: an older shared epoch decides
        (E((1, 0), (2, 300)), 800, E((1, 0), (2, 310)), 900, 300),
        # the master lost its tail (same epoch): the master is authoritative
        (E((1, 0)), 900, E((1, 0)), 600, 600),
        # nothing in common
        (E((1, 100)), 900, E((1, 0)), 600, -1),
        (E((2, 0)), 900, E((1, 0)), 600, -1),
        ([], 0, E((1, 0)), 600, -1),
    ],
)
def test_consistent_point_cases(local: list[EpochEntry], local_max: int, remote: list[EpochEntry],
                                remote_max: int, point: int) -> None:
    assert find_consistent_point(local, local_max, remote, remote_max) == point


def test_common_epoch() -> None:
    assert common_epoch(E((1, 0), (2, 300)), E((1, 0), (3, 300))) == 1
    assert common_epoch(E((1, 0), (2, 300)), E((1, 0), (2, 300), (3, 500))) == 2
    assert common_epoch(E((1, 5)), E((1, 0))) == 0


def test_entries_must_be_ordered() -> None:
    check_entries(E((1, 0), (2, 0), (5, 10)))  # an epoch without data is fine
    for bad in (E((2, 0), (1, 10)), E((1, 10), (2, 5)), E((0, 0)), E((1, -1)), E((1, 0), (1, 5))):
        with pytest.raises(ValueError, match=r"does not follow|epoch must be >= 1"):
            check_entries(bad)
    assert entries_from_json([[1, 0], {"epoch": 2, "startOffset": 7}]) == E((1, 0), (2, 7))
    with pytest.raises(ValueError, match="not an epoch entry"):
        entries_from_json([[1, "x"]])
    with pytest.raises(ValueError, match="must be a JSON array"):
        entries_from_json({"1": 0})


def test_epoch_file_persists_and_edits(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    ef = EpochFile(path)
    ef.load()
    assert ef.entries == [] and ef.last_epoch == 0 and ef.last is None
    ef.append(1, 0)
    ef.append(2, 300)
    with pytest.raises(ValueError, match=r"\[2, 400\] does not follow"):
        ef.append(2, 400)  # not newer
    with pytest.raises(ValueError, match=r"\[3, 100\] does not follow"):
        ef.append(3, 100)  # starts before the previous term
    again = EpochFile(path)
    again.load()
    assert again.to_json() == [[1, 0], [2, 300]]
    assert again.truncate_after(250) == E((2, 300))
    assert again.to_json() == [[1, 0]]
    added = again.adopt(E((1, 0), (3, 400), (4, 900)), 500)
    assert added == E((3, 400)) and again.last_epoch == 3
    assert again.adopt(E((1, 0), (3, 400), (4, 900)), 900) == E((4, 900))
    assert again.truncate_to_epoch(3) == E((4, 900))
    third = EpochFile(path)
    third.load()
    assert third.to_json() == [[1, 0], [3, 400]]


def test_epoch_file_corruption_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    ef = EpochFile(path)
    ef.append(1, 0)
    obj = orjson.loads(path.read_bytes())
    obj["entries"] = [[1, 0], [2, 50]]  # edited without the CRC
    path.write_bytes(orjson.dumps(obj))
    with pytest.raises(EpochFileError, match="CRC"):
        EpochFile(path).load()
    path.write_bytes(b"{not json")
    with pytest.raises(EpochFileError):
        EpochFile(path).load()
