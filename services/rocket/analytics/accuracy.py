"""Grouping (parsing) accuracy of a template miner against labelled ground truth.

Definition (loghub README; loghub/logparser ``evaluator.get_accuracy``, Zhu et
al., ICSE-SEIP 2019): a line is parsed correctly when the set of lines that
share its *predicted* template is exactly the set of lines that share its
*true* EventId. Accuracy = correctly parsed lines / all lines, in [0, 1].
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Sequence


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
