"""Log line headers for any topic: learned from a sample, given in loghub notation, or a named preset.

A log line is a *header* (time, level, component, pid…) followed by free-text
*content*. Only the content is mined for templates. Three ways to split them,
all giving a :class:`HeaderFormat` (one anchored regex with named groups and a
final ``Content`` group):

* :func:`learn_format`: **no configuration**. Each line of a sample (the first
  lines of a topic) is read left to right as a sequence of header *fields* of
  known kinds (:data:`FIELD_KINDS`): timestamps in the common layouts (ISO 8601
  and its log4j/Python ``,SSS`` variant, syslog ``Mmm dd HH:MM:SS`` as in RFC 3164,
  Apache error-log ``[Www Mmm dd HH:MM:SS yyyy]``, Apache/NCSA access-log
  ``[dd/Mmm/yyyy:HH:MM:SS +zzzz]``, Unix epoch seconds or milliseconds, Android
  logcat ``MM-dd HH:MM:SS.mmm``, ``yy/MM/dd``, ``yyMMdd HHmmss``, ``yyyy.MM.dd``,
  Windows-event ``yyyy-MM-dd HH:MM:SS``…), level words (``INFO``, ``[warn]``,
  logcat letters), numbers (pid, tid), bracketed fields (``[main]``), hosts, and a
  component ending the header (``sshd[24200]:``, ``dfs.DataNode:``, `` - ``).
  The layout most lines of the sample share becomes the topic's format; other
  layouts that each cover at least 5% of the sample are kept as alternatives
  (a topic that mixes several applications' logs).
* :func:`format_from_loghub`: an explicit format in the loghub/logparser
  notation, ``'<Date> <Time> <Level> <Component>: <Content>'`` (Zhu et al.,
  ICSE-SEIP 2019, ``benchmark_settings[...]["log_format"]``).
* :func:`preset`: the 12 LogHub systems' header regexes
  (:data:`rocket.analytics.loghub.FORMATS`) by name.

:meth:`HeaderFormat.split` never raises: a line that does not match gives
``None`` and the caller mines the whole line as content.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from rocket.analytics import loghub

_MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_LEVEL_WORDS = (r"(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|ERR|FATAL|CRIT|CRITICAL|SEVERE|ALERT|EMERG|"
                r"FINE|FINER|FINEST|AUDIT|trace|debug|info|notice|warn|warning|error|err|fatal|crit|critical|"
                r"severe|alert|emerg|Trace|Debug|Info|Notice|Warn|Warning|Error|Fatal|Critical)")

#: Header field kinds, tried in this order at each position: ``(kind, regex)``.
#: A timestamp kind's regex has a group named after the kind's prefix ``ts``.
FIELD_KINDS: tuple[tuple[str, str], ...] = (
    ("ts_iso", r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?,?"),
    ("ts_bgl", r"\d{4}-\d\d-\d\d-\d\d\.\d\d\.\d\d(?:\.\d+)?"),
    ("ts_apache", rf"\[{_DAY} {_MON} +\d+ \d\d:\d\d:\d\d(?:\.\d+)? \d{{4}}\]"),
    ("ts_clf", rf"\[\d\d/{_MON}/\d{{4}}:\d\d:\d\d:\d\d(?: [+-]\d{{4}})?\]"),
    ("ts_syslog", rf"{_MON} +\d+ \d\d:\d\d:\d\d(?:\.\d+)?(?: \d{{4}}(?= ))?"),
    ("ts_logcat", r"\d\d-\d\d \d\d:\d\d:\d\d\.\d+"),
    ("ts_slash", r"\d\d(?:\d\d)?/\d\d/\d\d,? \d\d:\d\d:\d\d(?:[.,]\d+)?"),
    ("ts_compact", r"\d{6} \d{6}"),
    ("ts_dotted", r"\[?\d\d\.\d\d \d\d:\d\d:\d\d\]?"),
    ("ts_date", r"\d{4}[-./]\d\d[-./]\d\d"),
    ("ts_time", r"\d\d:\d\d:\d\d(?:[.,]\d+)?"),
    ("ts_epoch", r"1\d{9}(?:\d{3}|\.\d+)?"),
    ("level", rf"\[?{_LEVEL_WORDS}\]?:?"),
    ("letter", r"[VDIWEFA]"),
    ("number", r"-?\d+"),
    ("dash", r"-"),
    ("bracket", r"\[(?:[^\[\]]|\[[^\]]*\])*\]"),
    ("logger", r"[A-Za-z_][\w$]*(?:\.[\w$]+)+"),
    ("component", r"[^\s:\[\]]+(?:\[\d+\])?:"),
    ("word", r"[^\s\[\]]+"),
)
_KIND_RE = {k: re.compile(v + r"(?=\s|$)") for k, v in FIELD_KINDS}
_MAX_FIELDS = 10
_AHEAD = re.compile(r"(?: +[^\s\[\]]+){0,5}? +(?:[^\s:\[\]]+(?:\[\d+\])?:(?=\s)|\[?" + _LEVEL_WORDS + r"\]?(?=\s))")


def _header_word(line: str, end: int) -> bool:
    """Whether a word ending at ``end`` (after the time) is a header field: a `` - `` follows it, or within
    the next 5 words a component (``name:``) or a level word (syslog host, BGL node/type fields)."""
    return line.startswith(" - ", end) or _AHEAD.match(line, end) is not None


def _kinds_of(line: str) -> list[tuple[str, str]]:
    """The line's leading fields as ``(kind, text)`` up to where the header ends (may be empty)."""
    fields: list[tuple[str, str]] = []
    pos = 0
    n = len(line)
    saw_ts = False
    while pos < n and len(fields) < _MAX_FIELDS:
        while pos < n and line[pos] == " ":
            pos += 1
        best: tuple[str, str] | None = None
        for kind, rx in _KIND_RE.items():
            m = rx.match(line, pos)
            if m:
                best = (kind, m.group(0))
                break
        if best is None:
            break
        kind, text = best
        if kind == "letter" and not (fields and fields[-1][0] == "number"):
            kind = "word"  # a logcat level letter only after pid/tid numbers
        if kind == "logger" and not (fields and fields[-1][0] == "level"):
            kind = "word"  # a dotted logger name only right after the level (log4j, Python logging)
        if kind == "word" and saw_ts and not _header_word(line, pos + len(text)):
            break
        fields.append((kind, text))
        pos += len(text)
        saw_ts = saw_ts or kind.startswith("ts_")
        if kind in ("component",) or (kind == "dash" and saw_ts and len(fields) > 2):
            break
    # the header must hold a time or a level, and ends at the last such field or a component
    while fields and not (fields[-1][0].startswith("ts_") or fields[-1][0] in ("level", "letter", "component",
                                                                                 "bracket", "dash", "number")):
        fields.pop()
    if not any(k.startswith("ts_") or k in ("level", "component") for k, _ in fields):
        return []
    return fields


@dataclass(frozen=True, slots=True)
class HeaderFormat:
    """One way of splitting lines: ``regex`` (anchored; named groups, ``Content`` last) and a ``name``;
    ``alternatives``: more regexes tried in order when ``regex`` does not match (a topic that mixes formats).

    ``name`` is a preset's system name, ``"learned: <kinds>"`` or ``"format: <notation>"``.
    """

    name: str
    regex: re.Pattern[str]
    alternatives: tuple[re.Pattern[str], ...] = ()

    def split(self, line: str) -> dict[str, str] | None:
        """The line's header fields and ``Content`` (stripped), or ``None`` when no regex matches."""
        text = line.strip()
        m = self.regex.match(text)
        if m is None:
            for rx in self.alternatives:
                m = rx.match(text)
                if m is not None:
                    break
            else:
                return None
        fields = {k: v for k, v in m.groupdict().items() if v is not None}
        fields["Content"] = fields.get("Content", "").strip()
        return fields


_GROUP_OF_KIND = {"level": "Level", "letter": "Level", "number": "Pid", "component": "Component",
                  "logger": "Component",
                  "bracket": "Thread", "word": "Host"}


def _format_of_kinds(kinds: tuple[str, ...]) -> HeaderFormat:
    parts: list[str] = []
    used: Counter[str] = Counter()
    for i, kind in enumerate(kinds):
        pattern = dict(FIELD_KINDS)[kind]
        if kind == "word" and kinds[i + 1:i + 2] == ("dash",):
            pattern = r".+?"  # "<Program> - <Content>": a program name may hold spaces
        before_time = not any(k.startswith("ts_") for k in kinds[:i])
        if before_time and kind in ("dash", "word", "number"):
            kind, pattern = "word", r"\S+"  # a label before the time (BGL's "-" or "APPREAD")
        group = "Time" if kind.startswith("ts_") else _GROUP_OF_KIND.get(kind)
        if group is None:
            parts.append(pattern)
            continue
        used[group] += 1
        name = group if used[group] == 1 else f"{group}{used[group]}"
        if kind == "component":
            parts.append(rf"(?P<{name}>[^\s:\[\]]+?)(?:\[(?P<{name}Pid>\d+)\])?:")
        elif kind == "level":
            parts.append(rf"\[?(?P<{name}>{_LEVEL_WORDS})\]?:?")
        else:
            parts.append(f"(?P<{name}>{pattern})")
    rx = r"^" + r"\s+".join(parts) + r"(?:\s+(?P<Content>.*))?$"
    return HeaderFormat("learned: " + " ".join(kinds), re.compile(rx, re.DOTALL))


def learn_format(sample: Iterable[str], min_share: float = 0.5, other_share: float = 0.05,
                 max_layouts: int = 16) -> HeaderFormat | None:
    """The header layout most lines of ``sample`` share, with up to ``max_layouts - 1`` alternatives that each
    cover at least ``other_share`` of the sample (a topic that mixes formats); ``None`` when together they
    cover fewer than ``min_share`` (shares in [0, 1]; then lines are mined whole)."""
    counts: Counter[tuple[str, ...]] = Counter()
    total = 0
    for line in sample:
        total += 1
        kinds = tuple(k for k, _ in _kinds_of(line.strip()))
        if kinds:
            counts[kinds] += 1
    if not counts:
        return None
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], -len(kv[0]), kv[0]))
    chosen = [ranked[0]] + [kv for kv in ranked[1:max_layouts] if kv[1] >= other_share * total]
    if sum(n for _, n in chosen) < min_share * total:
        return None
    main = _format_of_kinds(chosen[0][0])
    if len(chosen) == 1:
        return main
    others = tuple(_format_of_kinds(layout).regex for layout, _ in chosen[1:])
    return HeaderFormat(main.name + f" (+{len(others)} more)", main.regex, others)


def format_from_loghub(notation: str) -> HeaderFormat:
    """A :class:`HeaderFormat` from loghub notation: ``<Field>`` placeholders, literal text between them.

    Each field but the last matches lazily up to the literal that follows; spaces
    match any run of whitespace; the notation must end with ``<Content>``.
    Raises ``ValueError`` otherwise (the message quotes the notation).
    """
    pieces = re.split(r"(<[^<>]+>)", notation.strip())
    if not pieces or (pieces[-2:] != ["<Content>", ""] and pieces[-1] != "<Content>"):
        raise ValueError(f"log format {notation!r} must end with <Content>")
    rx = ""
    seen: set[str] = set()
    for piece in pieces:
        if not piece:
            continue
        if piece.startswith("<") and piece.endswith(">"):
            name = re.sub(r"\W", "_", piece[1:-1])
            if not name or name in seen or not name[0].isalpha():
                raise ValueError(f"log format {notation!r}: bad or repeated field {piece}")
            seen.add(name)
            rx += f"(?P<{name}>.*)" if name == "Content" else f"(?P<{name}>.*?)"
        else:
            rx += r"\s+".join(re.escape(w) for w in piece.split(" ")) if piece.strip() else r"\s+"
    return HeaderFormat("format: " + notation, re.compile("^" + rx + "$", re.DOTALL))


def preset(name: str) -> HeaderFormat:
    """The LogHub system ``name``'s header (case-insensitive). Raises ``ValueError`` naming the presets."""
    by_lower = {s.lower(): s for s in loghub.FORMATS}
    system = by_lower.get(name.strip().lower())
    if system is None:
        raise ValueError(f"unknown log format preset {name!r}; presets: {', '.join(loghub.FORMATS)}")
    return HeaderFormat(system, loghub.FORMATS[system])


def resolve(spec: str | None) -> HeaderFormat | None:
    """``None``/``""``/``"auto"`` → ``None`` (learn per topic); a preset name; else loghub notation."""
    if not spec or spec.strip().lower() == "auto":
        return None
    if "<" in spec:
        return format_from_loghub(spec)
    return preset(spec)


# -- fields → level, component, time ----------------------------------------------------

_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                       "Nov", "Dec"), start=1)}
_TIME_PARSERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T -](?P<h>\d\d)[:.](?P<mi>\d\d)[:.](?P<s>\d\d)"
                r"(?:[.,](?P<f>\d+))?"), "ymd"),
    (re.compile(rf"(?:{_DAY} )?(?P<mon>{_MON})[ /]+(?P<d>\d+) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
                r"(?:\.(?P<f>\d+))?(?: (?P<y>\d{4}))?"), "mon"),
    (re.compile(rf"(?P<d>\d\d)/(?P<mon>{_MON})/(?P<y>\d{{4}}):(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"), "mon"),
    (re.compile(r"^(?P<mo>\d\d)-(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:\.(?P<f>\d+))?"), "ymd"),
    (re.compile(r"^(?P<y>\d\d(?:\d\d)?)/(?P<mo>\d\d)/(?P<d>\d\d),? (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"), "ymd"),
    (re.compile(r"^(?P<y>\d\d)(?P<mo>\d\d)(?P<d>\d\d) (?P<h>\d\d)(?P<mi>\d\d)(?P<s>\d\d)$"), "ymd"),
    (re.compile(r"^\[?(?P<mo>\d\d)\.(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)\]?$"), "ymd"),
    (re.compile(r"^(?P<epoch>1\d{9})(?:(?P<ms>\d{3})|\.(?P<f>\d+))?$"), "epoch"),
)


@functools.lru_cache(maxsize=4096)
def parse_time(text: str, default_year: int = 1970) -> datetime | None:
    """A header time in any layout of :data:`FIELD_KINDS` as UTC (zones and offsets ignored), or ``None``.

    ``default_year`` is used by layouts without a year (syslog, logcat). Never raises.
    """
    text = text.strip().strip("[]")
    for rx, how in _TIME_PARSERS:
        m = rx.search(text)
        if m is None:
            continue
        g = m.groupdict()
        try:
            if how == "epoch":
                secs = int(g["epoch"]) + (int(g["ms"]) / 1000 if g.get("ms") else 0)
                return datetime.fromtimestamp(secs, tz=UTC)
            year = int(g["y"]) if g.get("y") else default_year
            if year < 100:
                year += 2000
            month = _MONTHS[g["mon"]] if g.get("mon") else int(g["mo"])
            micro = int(((g.get("f") or "") + "000000")[:6])
            return datetime(year, month, int(g["d"]), int(g["h"]), int(g["mi"]), int(g["s"]), micro, tzinfo=UTC)
        except (KeyError, ValueError, OverflowError, OSError):
            return None
    return None


def header_time(fields: dict[str, str], default_year: int = 1970) -> datetime | None:
    """The event time from a split line's fields: ``Date``/``Time``/``Time2``… joined, then :func:`parse_time`."""
    parts = [fields[k] for k in ("Month", "Date", "Day", "Time", "Time2", "Time3") if fields.get(k)]
    for text in (" ".join(parts), fields.get("Timestamp", ""), fields.get("Time", "")):
        if text:
            t = parse_time(text, default_year)
            if t is not None:
                return t
    return None
