"""Small helpers for PromQL found in the chart: Grafana variable substitution and metric names.

Parsing itself is left to a real Prometheus (see ``conftest.prometheus_parser``); this module only
*finds* the metric names an expression selects, with a tokenizer that knows PromQL's lexical
structure (strings, label matchers in braces, ranges in brackets, grouping-label lists, functions,
keywords), so that the names can be checked against a live scrape.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

#: Values used in place of Grafana's variables when an expression is sent to Prometheus.
GRAFANA_SUBSTITUTIONS = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
}

KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "bool", "offset", "start", "end", "inf", "nan",
}
AGGREGATIONS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
    "quantile", "limitk", "limit_ratio",
}
GROUPING = {"by", "without", "on", "ignoring", "group_left", "group_right"}
#: Series Prometheus itself makes: scrape health and alert state.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_series_added",
             "scrape_samples_post_metric_relabeling", "ALERTS", "ALERTS_FOR_STATE"}

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<number>(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:e[+-]?\d+)?|\.\d+)(?:ms|[smhdwy])?)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<punct>[{}()\[\],@])
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^<>=])
  | (?P<space>\s+)
    """,
    re.VERBOSE,
)


def substitute(expr: str) -> str:
    """``expr`` with Grafana variables replaced: built-ins by durations, ``$name`` by ``.*``.

    Dashboards use template variables only inside regex matchers (``=~"$var"``), where ``.*`` is
    the "All" value.
    """
    for var, value in GRAFANA_SUBSTITUTIONS.items():
        expr = expr.replace(var, value)
    return re.sub(r"\$\{?[a-zA-Z_]\w*\}?", ".*", expr)


def tokens(expr: str) -> Iterator[tuple[str, str]]:
    pos = 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise ValueError(f"cannot tokenize {expr[pos:pos + 20]!r} in {expr!r}")
        pos = m.end()
        kind = m.lastgroup or ""
        if kind != "space":
            yield kind, m.group()


def metric_names(expr: str) -> set[str]:
    """Metric names selected by ``expr`` (``foo``, ``foo{...}``, ``{__name__="foo"}``)."""
    toks = list(tokens(expr))
    names: set[str] = set()
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else ""
        if text == "{":
            # Label matchers: only __name__ can name a metric.
            depth_end = _matching(toks, i, "{", "}")
            inner = toks[i + 1:depth_end]
            for j in range(len(inner) - 2):
                if inner[j][1] == "__name__" and inner[j + 1][1] == "=" and inner[j + 2][0] == "string":
                    names.add(inner[j + 2][1][1:-1])
            i = depth_end + 1
            continue
        if text == "[":
            i = _matching(toks, i, "[", "]") + 1
            continue
        if kind == "ident":
            if text in GROUPING and nxt == "(":
                i = _matching(toks, i + 1, "(", ")") + 1
                continue
            if text in KEYWORDS:
                i += 1
                continue
            if nxt == "(" or (text in AGGREGATIONS and nxt in GROUPING):  # function or aggregation
                i += 1
                continue
            names.add(text)
        i += 1
    return names


def _matching(toks: list[tuple[str, str]], start: int, open_: str, close: str) -> int:
    depth = 0
    for j in range(start, len(toks)):
        if toks[j][1] == open_:
            depth += 1
        elif toks[j][1] == close:
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"unbalanced {open_!r} in {' '.join(t for _, t in toks)!r}")


def label_values_selector(query: str) -> str | None:
    """The series selector of a Grafana ``label_values(selector, label)`` query, if it has one."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*[a-zA-Z_]\w*\s*\)\s*", query, re.DOTALL)
    return m.group(1) if m else None
