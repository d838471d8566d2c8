"""Output of the ``rocket`` listing commands: ``-o table|wide|json|yaml`` (kubectl's convention).

``table`` (the default) and ``wide`` (more columns) are for people; ``json`` and ``yaml`` are for
scripts: one document per command, keys sorted, key names documented in README.md ("Output for
scripts"). Tables never cut a cell: columns fold instead of ending in "…", and when standard
output is not a terminal (piped into a file or another program) nothing limits the line width.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import orjson
import typer
import yaml
from rich.console import Console
from rich.table import Table

#: The line width given to rich when standard output is not a terminal: wide enough that no table
#: of a listing command is ever narrowed (rich renders a table at its natural width, never padded
#: to the console's).
UNLIMITED_WIDTH = 1 << 20


class OutputFormat(enum.StrEnum):
    """Values of ``-o/--output``: ``kubectl get -o``'s names."""

    TABLE = "table"
    WIDE = "wide"
    JSON = "json"
    YAML = "yaml"

    @property
    def machine(self) -> bool:
        """True for ``json`` and ``yaml`` (a document, not a table)."""
        return self in (OutputFormat.JSON, OutputFormat.YAML)


def output_option() -> Any:
    """The ``-o/--output`` typer option shared by every listing command."""
    return typer.Option(OutputFormat.TABLE, "--output", "-o", case_sensitive=False,
                        help="table, wide (more columns), json or yaml (one document, sorted keys).")


def stdout_console() -> Console:
    """A rich console on standard output: the terminal's width on a terminal, else unlimited."""
    probe = Console()
    if probe.is_terminal:
        return probe
    return Console(width=UNLIMITED_WIDTH)


Justify = Literal["left", "right"]


def new_table(columns: Sequence[tuple[str, Justify]], title: str | None = None) -> Table:
    """A table whose cells are never cut: on a narrow terminal a long cell folds onto a second
    line (``overflow="fold"``) rather than ending in "…". ``columns``: (header, justify) pairs."""
    table = Table(title=title)
    for header, justify in columns:
        table.add_column(header, justify=justify, overflow="fold")
    return table


def render_document(doc: Mapping[str, Any], fmt: OutputFormat) -> str:
    """``doc`` as JSON (2-space indent, sorted keys) or YAML (block style, sorted keys), ending in
    a newline. ``doc`` holds only str, int, float, bool, None, lists and str-keyed dicts, so both
    formats parse back to the same data. Raises ``ValueError`` for a table format."""
    if fmt is OutputFormat.JSON:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n"
    if fmt is OutputFormat.YAML:
        return str(yaml.safe_dump(dict(doc), sort_keys=True, default_flow_style=False, allow_unicode=True,
                                  width=UNLIMITED_WIDTH))
    raise ValueError(f"{fmt} is not a document format")


def print_document(doc: Mapping[str, Any], fmt: OutputFormat) -> None:
    """Write ``doc`` to standard output in ``fmt`` (see :func:`render_document`), unstyled."""
    typer.echo(render_document(doc, fmt), nl=False)
