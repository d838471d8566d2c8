"""Comments and docstrings cite sources a reader can follow: a RocketMQ class or file, not a label.

Labels such as ``A7``, ``A9.1``, ``B7``, ``quirk Q11`` or ``reference A6 "103"`` point into a
notes document that is not part of the repository, so a reader of a clone cannot follow them.
This test scans the product and bench sources and fails on any such label, and on a path into
that document. Ruff rule codes in ``# noqa:`` comments (``B023``) are not citations and are
ignored.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("services", "operator", "bench")
SUFFIXES = {".py", ".java", ".md", ".toml", ".yaml", ".yml", ".txt"}

#: ``A1``..``A11`` and ``B1``..``B8`` with an optional ``.n`` (the notes' section numbers), a
#: quirk number ``Q1``..``Q99``, "reference A..", "quirk(s) Q..", "part A/B/C" of the notes.
LABEL = re.compile(
    r"\b(?:A(?:1[01]|[1-9])|B[1-8])(?:\.\d+)?\b"
    r"|\bQ\d{1,2}\b"
    r"|\breference (?:part )?[A-C]\d*\b"
    r"|\bquirks? Q"
    r"|\bpart [ABC]\b"
    r"|shared/reference|rocketmq-protocol\.md"
)
#: A ruff suppression comment: its rule codes (``B023``, ``PT011``) are not citations.
NOQA = re.compile(r"#\s*noqa:[\sA-Z0-9,]*")


def label_citations(text: str) -> list[tuple[int, str]]:
    """``(line number, matched text)`` of every label citation in ``text`` (1-based lines)."""
    found: list[tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in LABEL.finditer(NOQA.sub("", line)):
            found.append((number, match.group(0)))
    return found


@pytest.mark.parametrize("text", [
    "Records use the stored layout (A9.1).",
    '"""REGISTER_BROKER (103), A6."""',
    "# Pull request sysFlag bits (A7 \"11\").",
    "responses come back in any order (A1, quirk Q11)",
    "Reference: ``shared/reference/rocketmq-protocol.md`` part A.",
    "a new slave starts at the master's last file (B7)",
    "see A10.4",
])
def test_the_pattern_finds_label_citations(text: str) -> None:
    assert label_citations(text)


@pytest.mark.parametrize("text", [
    "x = f(a)  # noqa: B023",
    "def recover(self) -> None:  # noqa: C901 - one pass over the files",
    "Records use RocketMQ's stored layout (``MessageDecoder``).",
    "SEND_MESSAGE_V2 short names (``SendMessageRequestHeaderV2``)",
    "store = {'B0': 1, 'A10x': 2}",
])
def test_the_pattern_leaves_names_and_rule_codes_alone(text: str) -> None:
    assert label_citations(text) == []


def test_no_label_citations_in_product_sources() -> None:
    offenders = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or "__pycache__" in path.parts:
                continue
            for number, label in label_citations(path.read_text(encoding="utf-8", errors="replace")):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {label}")
    assert not offenders, (
        "cite the RocketMQ class or file by name, not a label of the notes document:\n" + "\n".join(offenders)
    )
