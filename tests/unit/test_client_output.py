"""``rocket`` listing output (rocket/client/output.py): the document formats and uncut tables."""

from __future__ import annotations

import json

import pytest
import yaml
from rich.console import Console

from rocket.client.output import OutputFormat, new_table, render_document


def test_json_and_yaml_are_the_same_data_with_sorted_keys() -> None:
    doc = {"brokers": [{"brokerName": "broker-ä", "brokerId": 0, "error": None, "ratio": 0.25,
                        "runtime": {"z": "1", "a": "[ 0 days ]"}, "ok": True}], "a": []}
    as_json = render_document(doc, OutputFormat.JSON)
    as_yaml = render_document(doc, OutputFormat.YAML)
    assert json.loads(as_json) == doc == yaml.safe_load(as_yaml)
    assert as_json.endswith("\n") and as_json.index('"a"') < as_json.index('"brokers"')
    assert as_json.index('"brokerId"') < as_json.index('"brokerName"') < as_json.index('"error"')
    with pytest.raises(ValueError, match="not a document format"):
        render_document(doc, OutputFormat.TABLE)


def test_a_table_on_a_narrow_console_folds_cells_instead_of_cutting_them() -> None:
    table = new_table([("cluster", "left"), ("address", "left")])
    table.add_row("DefaultCluster", "127.0.0.1:10911")
    console = Console(width=20, record=True, color_system=None)
    console.print(table)
    text = console.export_text()
    assert "…" not in text
    cells = [line.strip("│┃ ").split("│") for line in text.splitlines() if line.startswith("│")]
    assert "".join(c[0].strip() for c in cells) == "DefaultCluster"
    assert "".join(c[1].strip() for c in cells) == "127.0.0.1:10911"
