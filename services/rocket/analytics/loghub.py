"""The LogHub systems: header formats, level normalisation, event time, data files.

Each of the 12 LogHub systems writes its own line header before the free-text
content. :data:`FORMATS` holds one anchored regex per system with a named group
per header field (the fields of the ``*_structured.csv`` files, see
``shared/data/loghub/README.md``) and a final ``Content`` group. The field
layout follows the loghub/logparser benchmark settings (Zhu et al., ICSE-SEIP
2019, ``benchmark_settings[...]["log_format"]``); the field patterns are
tightened per system so that a line of another shape does not parse.

:func:`parse_header` turns one raw line into a :class:`ParsedLine` (header
fields, content, normalised level, event time) or ``None`` for a malformed
line: it never raises.

Event times carry no zone in any of these logs and are read as UTC. Formats
without a year (Android, Linux, OpenSSH, Proxifier) take the year from a
reference time the caller passes (the job uses the message's store time).
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

#: The 12 LogHub systems of ``shared/data/loghub`` in the README's table order.
SYSTEMS: tuple[str, ...] = (
    "Android",
    "Apache",
    "BGL",
    "HDFS",
    "HPC",
    "Hadoop",
    "Linux",
    "OpenSSH",
    "OpenStack",
    "Proxifier",
    "Spark",
    "Zookeeper",
)

#: Parsing accuracy of Drain on the 2k samples as published by the loghub/logparser
#: benchmark (Zhu et al., ICSE-SEIP 2019), quoted in ``shared/data/loghub/README.md``.
DRAIN_PUBLISHED_ACCURACY: dict[str, float] = {
    "HDFS": 0.998,
    "Hadoop": 0.948,
    "Spark": 0.920,
    "Zookeeper": 0.967,
    "OpenStack": 0.733,
    "BGL": 0.963,
    "HPC": 0.887,
    "Linux": 0.690,
    "Android": 0.911,
    "Apache": 1.000,
    "OpenSSH": 0.788,
    "Proxifier": 0.765,
}
#: Mean of :data:`DRAIN_PUBLISHED_ACCURACY` as published (0.881).
DRAIN_PUBLISHED_MEAN = 0.881

#: Topic name prefix used by ``make run``: one topic per system, ``loghub-<System>``.
TOPIC_PREFIX = "loghub-"

_F = r"\S+"  # one whitespace-free field

#: Header regex per system. Group names are the structured CSV's header fields.
FORMATS: dict[str, re.Pattern[str]] = {
    "Android": re.compile(
        r"^(?P<Date>\d\d-\d\d)\s+(?P<Time>\d\d:\d\d:\d\d\.\d+)\s+(?P<Pid>\d+)\s+(?P<Tid>\d+)\s+"
        r"(?P<Level>[VDIWEFA])\s+(?P<Component>.*?):\s(?P<Content>.*)$"
    ),
    "Apache": re.compile(r"^\[(?P<Time>\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\] \[(?P<Level>\w+)\] (?P<Content>.*)$"),
    "BGL": re.compile(
        rf"^(?P<Label>{_F}) (?P<Timestamp>\d+) (?P<Date>\d{{4}}\.\d\d\.\d\d) (?P<Node>{_F}) "
        rf"(?P<Time>\d{{4}}-\d\d-\d\d-\d\d\.\d\d\.\d\d\.\d+) (?P<NodeRepeat>{_F}) (?P<Type>{_F}) "
        rf"(?P<Component>{_F}) (?P<Level>[A-Z]+) (?P<Content>.*)$"
    ),
    "HDFS": re.compile(
        r"^(?P<Date>\d{6}) (?P<Time>\d{6}) (?P<Pid>\d+) (?P<Level>[A-Z]+) (?P<Component>\S+): (?P<Content>.*)$"
    ),
    "HPC": re.compile(
        rf"^(?P<LogId>\d+) (?P<Node>{_F}) (?P<Component>{_F}) (?P<State>{_F}) (?P<Time>\d+) (?P<Flag>-?\d+) "
        r"(?P<Content>.*)$"
    ),
    "Hadoop": re.compile(
        r"^(?P<Date>\d{4}-\d\d-\d\d) (?P<Time>\d\d:\d\d:\d\d,\d+) (?P<Level>[A-Z]+) \[(?P<Process>.*?)\] "
        r"(?P<Component>\S+): (?P<Content>.*)$"
    ),
    "Linux": re.compile(
        r"^(?P<Month>[A-Z][a-z]{2})\s+(?P<Date>\d+) (?P<Time>\d\d:\d\d:\d\d) (?P<Level>\S+) "
        r"(?P<Component>.+?)(\[(?P<PID>\d+)\])?: (?P<Content>.*)$"
    ),
    "OpenSSH": re.compile(
        r"^(?P<Date>[A-Z][a-z]{2})\s+(?P<Day>\d+) (?P<Time>\d\d:\d\d:\d\d) (?P<Component>\S+) "
        r"sshd\[(?P<Pid>\d+)\]: (?P<Content>.*)$"
    ),
    "OpenStack": re.compile(
        r"^(?P<Logrecord>\S+) (?P<Date>\d{4}-\d\d-\d\d) (?P<Time>\d\d:\d\d:\d\d\.\d+) (?P<Pid>\d+) "
        r"(?P<Level>[A-Z]+) (?P<Component>\S+) \[(?P<ADDR>.*?)\] (?P<Content>.*)$"
    ),
    "Proxifier": re.compile(r"^\[(?P<Time>\d\d\.\d\d \d\d:\d\d:\d\d)\] (?P<Program>.+?) - (?P<Content>.*)$"),
    "Spark": re.compile(
        r"^(?P<Date>\d\d/\d\d/\d\d) (?P<Time>\d\d:\d\d:\d\d) (?P<Level>[A-Z]+) (?P<Component>\S+): (?P<Content>.*)$"
    ),
    "Zookeeper": re.compile(
        r"^(?P<Date>\d{4}-\d\d-\d\d) (?P<Time>\d\d:\d\d:\d\d,\d+) - (?P<Level>[A-Z]+)\s+"
        r"\[(?P<Node>.*?):(?P<Component>[^:@\]]+)@(?P<Id>\d+)\] - (?P<Content>.*)$"
    ),
}

#: Canonical levels, most to least severe.
LEVELS: tuple[str, ...] = ("FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")
#: Levels that count as errors for error rates.
ERROR_LEVELS: frozenset[str] = frozenset({"FATAL", "ERROR"})

_LEVEL_ALIASES: dict[str, str] = {
    # Android logcat letters
    "V": "TRACE",
    "D": "DEBUG",
    "I": "INFO",
    "W": "WARN",
    "E": "ERROR",
    "F": "FATAL",
    "A": "FATAL",
    # Apache error-log levels
    "EMERG": "FATAL",
    "ALERT": "FATAL",
    "CRIT": "FATAL",
    "CRITICAL": "FATAL",
    "NOTICE": "INFO",
    "WARNING": "WARN",
    "SEVERE": "ERROR",
    "FAILURE": "ERROR",
    "FINE": "DEBUG",
    "FINER": "TRACE",
    "FINEST": "TRACE",
    "AUDIT": "INFO",
}

#: Systems whose ``Level`` header field is not a severity (Linux's is the host name)
#: or that have none; their level is inferred from the content.
_NO_LEVEL_FIELD = frozenset({"HPC", "Linux", "OpenSSH", "Proxifier"})

_ERROR_WORDS = re.compile(
    r"\b(error|errors|fatal|fail|failed|failure|exception|panic|denied|refused|unavailable|"
    r"invalid|illegal|timed? ?out|break-in|authentication failure|killed)\b",
    re.IGNORECASE,
)
_WARN_WORDS = re.compile(r"\b(warn|warning|retry|retrying|deprecated|unable)\b", re.IGNORECASE)


def normalize_level(raw: str | None) -> str | None:
    """Map a system's level word (``"D"``, ``"notice"``, ``"WARNING"``…) to one of :data:`LEVELS`.

    Returns ``None`` when ``raw`` is empty or unknown.
    """
    if not raw:
        return None
    word = raw.strip().upper()
    if word in LEVELS:
        return word
    return _LEVEL_ALIASES.get(word)


def infer_level(content: str) -> str:
    """A level from the content's words for systems without one: ERROR, WARN or INFO."""
    if _ERROR_WORDS.search(content):
        return "ERROR"
    if _WARN_WORDS.search(content):
        return "WARN"
    return "INFO"


@dataclass(slots=True)
class ParsedLine:
    """One log line split into its header and content.

    ``fields`` are the header fields by the structured CSV's names; ``level``
    is canonical (:data:`LEVELS`), ``level_inferred`` tells whether it came
    from the content; ``event_time`` is the header's time in UTC or ``None``
    when the header has none that parses; ``component`` is the header's
    component (``Program`` for Proxifier, ``None`` where there is none).
    """

    system: str
    content: str
    fields: dict[str, str] = field(default_factory=dict)
    level: str = "INFO"
    level_inferred: bool = False
    component: str | None = None
    event_time: datetime | None = None


_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                       "Dec"), start=1)}


def _dt(year: int, month: int, day: int, hms: str, frac: str = "") -> datetime:
    h, m, s = (int(x) for x in hms.split(":"))
    micro = int((frac + "000000")[:6]) if frac else 0
    return datetime(year, month, day, h, m, s, micro, tzinfo=UTC)


def event_time(system: str, f: dict[str, str], default_year: int) -> datetime | None:
    """The header's event time as a UTC datetime, or ``None`` when it does not parse.

    ``f`` are the header fields of :func:`parse_header`; ``default_year`` is used
    by the formats that carry no year. Never raises.
    """
    try:
        if system == "Android":
            month, day = f["Date"].split("-")
            hms, _, frac = f["Time"].partition(".")
            return _dt(default_year, int(month), int(day), hms, frac)
        if system == "Apache":
            return datetime.strptime(f["Time"], "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)
        if system in ("BGL", "HPC"):
            key = "Timestamp" if system == "BGL" else "Time"
            return datetime.fromtimestamp(int(f[key]), tz=UTC)
        if system == "HDFS":
            ds, ts = f["Date"], f["Time"]
            return datetime(2000 + int(ds[:2]), int(ds[2:4]), int(ds[4:]), int(ts[:2]), int(ts[2:4]), int(ts[4:]),
                            tzinfo=UTC)
        if system in ("Hadoop", "Zookeeper", "OpenStack"):
            y, mo, d = (int(x) for x in f["Date"].split("-"))
            hms, _, frac = f["Time"].replace(",", ".").partition(".")
            return _dt(y, mo, d, hms, frac)
        if system == "Linux":
            return _dt(default_year, _MONTHS[f["Month"]], int(f["Date"]), f["Time"])
        if system == "OpenSSH":
            return _dt(default_year, _MONTHS[f["Date"]], int(f["Day"]), f["Time"])
        if system == "Proxifier":
            md, hms = f["Time"].split(" ")
            month, day = md.split(".")
            return _dt(default_year, int(month), int(day), hms)
        if system == "Spark":
            y, mo, d = (int(x) for x in f["Date"].split("/"))
            return _dt(2000 + y, mo, d, f["Time"])
    except (KeyError, ValueError, OverflowError, OSError):
        return None
    return None


def parse_header(system: str, line: str, default_year: int = 1970) -> ParsedLine | None:
    """Split ``line`` of ``system`` into header fields and content.

    Surrounding whitespace of ``line`` and of the content is stripped (as the
    loghub benchmark does). Returns ``None`` for a line that
    does not match the system's format (a malformed line) and raises ``KeyError``
    only for a ``system`` not in :data:`FORMATS`.
    """
    m = FORMATS[system].match(line.strip())
    if m is None:
        return None
    f = {k: v for k, v in m.groupdict().items() if v is not None}
    content = f.pop("Content").strip()
    parsed = ParsedLine(system=system, content=content, fields=f)
    level = None if system in _NO_LEVEL_FIELD else normalize_level(f.get("Level"))
    if level is None:
        parsed.level = infer_level(content)
        parsed.level_inferred = True
    else:
        parsed.level = level
    parsed.component = f.get("Component", f.get("Program"))
    if system == "OpenSSH":
        parsed.component = "sshd"
    parsed.event_time = event_time(system, f, default_year)
    return parsed


def system_of(topic: str | None, tags: str | None = None) -> str | None:
    """The LogHub system of a message: its tags when they name one, else the topic's suffix.

    ``system_of("loghub-HDFS")`` → ``"HDFS"``; matching ignores case. ``None`` when neither names a system.
    """
    by_lower = {s.lower(): s for s in SYSTEMS}
    for candidate in (tags, topic[len(TOPIC_PREFIX):] if topic and topic.startswith(TOPIC_PREFIX) else topic):
        if candidate and candidate.strip().lower() in by_lower:
            return by_lower[candidate.strip().lower()]
    return None


# -- data files ------------------------------------------------------------------------


def find_loghub_dir(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """Where the LogHub samples are: ``explicit``, ``$ROCKET_LOGHUB_DIR``, ``shared/data/loghub``
    beside the repository, or the sample shipped in ``rocket/data/loghub``; ``None`` when none exists.

    A directory counts when it holds ``<System>/<System>_2k.log`` for at least one system.
    """
    here = Path(__file__).resolve()
    candidates: list[Path] = []
    if explicit:
        candidates.append(Path(explicit))
    if os.environ.get("ROCKET_LOGHUB_DIR"):
        candidates.append(Path(os.environ["ROCKET_LOGHUB_DIR"]))
    # services/rocket/analytics/loghub.py → repo root is parents[3]; shared/ sits beside it.
    if len(here.parents) > 4:
        candidates.append(here.parents[4] / "shared" / "data" / "loghub")
    candidates.append(Path.cwd().parent / "shared" / "data" / "loghub")
    candidates.append(here.parents[1] / "data" / "loghub")
    for cand in candidates:
        if any(log_path(cand, s) is not None for s in SYSTEMS):
            return cand
    return None


def log_path(root: Path, system: str) -> Path | None:
    """The raw log of ``system`` under ``root``, or ``None``.

    Looks for ``<System>/<System>_2k.log``, any ``<System>/*.log``, then a flat
    ``<System>_*.log`` (the 200-line sample shipped in ``rocket/data/loghub``).
    """
    folder = root / system
    exact = folder / f"{system}_2k.log"
    if exact.is_file():
        return exact
    if folder.is_dir():
        logs = sorted(p for p in folder.glob("*.log") if p.is_file())
        if logs:
            return logs[0]
    flat = sorted(p for p in root.glob(f"{system}_*.log") if p.is_file())
    return flat[0] if flat else None


def structured_path(root: Path, system: str) -> Path | None:
    """The ground truth ``*_structured.csv`` beside the system's log, or ``None``."""
    log = log_path(root, system)
    if log is None:
        return None
    path = log.with_name(log.name + "_structured.csv")
    return path if path.is_file() else None


def read_lines(path: Path) -> list[str]:
    """The lines of a log file without line ends (UTF-8, undecodable bytes replaced)."""
    with open(path, encoding="utf-8", errors="replace", newline="") as fh:
        return [line.rstrip("\r\n") for line in fh]


@dataclass(slots=True)
class GroundTruth:
    """Human-labelled templates of one system's sample.

    ``event_ids[i]`` / ``templates[i]`` label line ``i`` (0-based, LineId - 1)
    of the raw log; ``lines[i]`` is that raw line (``None`` when the raw log
    is absent).
    """

    system: str
    event_ids: list[str]
    templates: list[str]
    lines: list[str] | None = None

    def by_line(self) -> dict[str, list[int]]:
        """Raw line text → indexes of the lines with that exact text, in file order."""
        index: dict[str, list[int]] = {}
        for i, text in enumerate(self.lines or ()):
            index.setdefault(text, []).append(i)
        return index


def load_ground_truth(root: Path, system: str) -> GroundTruth | None:
    """Read ``<System>_2k.log_structured.csv`` (LineId, …, EventId, EventTemplate) under ``root``.

    Returns ``None`` when the file is missing. Raises ``ValueError`` when it
    lacks the EventId column.
    """
    path = structured_path(root, system)
    if path is None:
        return None
    with open(path, encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or "EventId" not in reader.fieldnames:
            raise ValueError(f"{path}: no EventId column")
        rows = sorted(reader, key=lambda r: int(r.get("LineId") or 0))
    log = log_path(root, system)
    lines = read_lines(log) if log else None
    return GroundTruth(
        system=system,
        event_ids=[r["EventId"] for r in rows],
        templates=[r.get("EventTemplate", "") for r in rows],
        lines=lines,
    )


def iter_system_logs(root: Path, systems: tuple[str, ...] | list[str] = SYSTEMS) -> Iterator[tuple[str, list[str]]]:
    """``(system, lines)`` for each system whose log exists under ``root``."""
    for system in systems:
        path = log_path(root, system)
        if path is not None:
            yield system, read_lines(path)
