"""Accuracy of a template miner against labelled ground truth: GA, PA, FGA and FTA.

Definition (loghub README; loghub/logparser ``evaluator.get_accuracy``, Zhu et
al., ICSE-SEIP 2019): a line is parsed correctly when the set of lines that
share its *predicted* template is exactly the set of lines that share its
*true* EventId. Accuracy = correctly parsed lines / all lines, in [0, 1].
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass


def grouping_accuracy(truth: Sequence[Hashable], predicted: Sequence[Hashable]) -> float:
    """Fraction of lines whose predicted group equals their true group.

    ``truth[i]`` and ``predicted[i]`` label line ``i`` (any hashable ids; only
    equality matters). Returns 1.0 for no lines. Raises ``ValueError`` when the
    sequences differ in length.

    >>> grouping_accuracy(["A", "A", "B"], [1, 1, 2])
    1.0
    >>> grouping_accuracy(["A", "A", "B"], [1, 1, 1])
    0.0
    >>> grouping_accuracy(["A", "A", "B", "C"], [1, 2, 3, 4])
    0.5
    """
    if len(truth) != len(predicted):
        raise ValueError(f"{len(truth)} true labels but {len(predicted)} predicted labels")
    if not truth:
        return 1.0
    true_sizes = Counter(truth)
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, label in enumerate(predicted):
        members[label].append(i)
    correct = 0
    for lines in members.values():
        labels = {truth[i] for i in lines}
        if len(labels) == 1 and true_sizes[next(iter(labels))] == len(lines):
            correct += len(lines)
    return correct / len(truth)


_WS = re.compile(r"\s+")
_WILD_RUN = re.compile(r"<\*>(?:\s*<\*>)+")


def normalize_template(template: str) -> str:
    """A template text for comparison: whitespace runs → one space, adjacent ``<*>`` → one ``<*>``.

    (Loghub-2.0 compares templates after a similar clean-up of both sides.)

    >>> normalize_template("a  <*> <*>  b")
    'a <*> b'
    """
    return _WILD_RUN.sub("<*>", _WS.sub(" ", template.strip()))


def parsing_accuracy(truth_templates: Sequence[str], predicted_templates: Sequence[str]) -> float:
    """PA: share of lines whose predicted template equals the true one (after :func:`normalize_template`).

    Definition: Loghub-2.0 (Jiang et al., "A Large-scale Evaluation for Log
    Parsing Techniques: How Far are We?", ISSTA 2024). Returns 1.0 for no
    lines; raises ``ValueError`` when the lengths differ.

    >>> parsing_accuracy(["a <*>", "b"], ["a <*>", "b <*>"])
    0.5
    """
    if len(truth_templates) != len(predicted_templates):
        raise ValueError(f"{len(truth_templates)} true templates but {len(predicted_templates)} predicted")
    if not truth_templates:
        return 1.0
    ok = sum(normalize_template(t) == normalize_template(p)
             for t, p in zip(truth_templates, predicted_templates, strict=True))
    return ok / len(truth_templates)


@dataclass(frozen=True, slots=True)
class TemplateF1:
    """Template-level scores of Loghub-2.0 (ISSTA 2024), each in [0, 1].

    ``fga``: F1 of grouping (a predicted group is correct when its set of lines
    equals a true group's; precision over predicted groups, recall over true
    groups); ``fta``: F1 of templates (a correct group whose template text also
    equals the true template); ``pga``/``rga``/``pta``/``rta`` their precisions and recalls.
    """

    pga: float
    rga: float
    fga: float
    pta: float
    rta: float
    fta: float


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r > 0 else 0.0


def template_f1(truth_ids: Sequence[Hashable], truth_templates: Sequence[str],
                predicted_ids: Sequence[Hashable], predicted_templates: Sequence[str]) -> TemplateF1:
    """FGA and FTA of one system (see :class:`TemplateF1`); line ``i`` is labelled by each sequence's ``[i]``.

    Raises ``ValueError`` when the four sequences differ in length. No lines → all 1.0.
    """
    n = len(truth_ids)
    if not (len(truth_templates) == len(predicted_ids) == len(predicted_templates) == n):
        raise ValueError("truth and predicted sequences differ in length")
    if n == 0:
        return TemplateF1(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    true_groups: dict[Hashable, list[int]] = defaultdict(list)
    pred_groups: dict[Hashable, list[int]] = defaultdict(list)
    for i in range(n):
        true_groups[truth_ids[i]].append(i)
        pred_groups[predicted_ids[i]].append(i)
    true_sizes = {k: len(v) for k, v in true_groups.items()}
    correct_groups = 0
    correct_templates = 0
    for lines in pred_groups.values():
        labels = {truth_ids[i] for i in lines}
        if len(labels) == 1 and true_sizes[next(iter(labels))] == len(lines):
            correct_groups += 1
            i = lines[0]
            if normalize_template(truth_templates[i]) == normalize_template(predicted_templates[i]):
                correct_templates += 1
    pga, rga = correct_groups / len(pred_groups), correct_groups / len(true_groups)
    pta, rta = correct_templates / len(pred_groups), correct_templates / len(true_groups)
    return TemplateF1(pga, rga, _f1(pga, rga), pta, rta, _f1(pta, rta))
