"""Template mining with drain3: one configured ``TemplateMiner`` per LogHub system.

:data:`MINER_SETTINGS` holds, per system, the Drain similarity threshold, tree
depth and masking regexes. They start from the loghub/logparser benchmark
settings for Drain (``benchmark_settings`` in ``logparser/Drain/benchmark.py``:
same regexes, Zhu et al., ICSE-SEIP 2019) with three changes, each chosen on
the 2k samples with a grid over threshold (0.2-0.95) and depth (3-7) that
prefers plateaus to single best points:

* masks name what they hide (``<IP>``, ``<NUM>``…, drain3's masking idiom)
  instead of writing Drain's wildcard ``<*>``. drain3, like Drain, does not
  count a template's ``<*>`` as a similar token, so two lines that are equal
  after masking could stay apart; a named mask token compares equal;
* a few masks for values the benchmark left unmasked: UUIDs (OpenStack),
  ``N bytes (X KB)`` sizes (Proxifier); OpenStack paths stop before the space;
* thresholds and depths re-tuned per system.

``bench/bench_analytics.py`` prints the accuracy these settings reach beside
Drain's published figures. Unknown systems use :data:`DEFAULT_SETTINGS`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from drain3 import TemplateMiner
from drain3.masking import MaskingInstruction
from drain3.template_miner_config import TemplateMinerConfig

#: The wildcard Drain writes for a parameter.
WILDCARD = "<*>"


@dataclass(frozen=True, slots=True)
class MinerSettings:
    """Drain settings of one system.

    ``sim_th``: similarity threshold in [0, 1] (share of equal tokens needed to
    join a cluster); ``depth``: Drain's tree depth (≥ 3, counts the root and the
    leaf); ``masks``: applied in order before tokenising, a bare regex is
    replaced by ``<*>``, a ``(regex, NAME)`` pair by ``<NAME>``; ``extra_delimiters``: characters treated as spaces.
    """

    sim_th: float = 0.5
    depth: int = 4
    masks: tuple[str | tuple[str, str], ...] = ()
    extra_delimiters: tuple[str, ...] = ()
    max_children: int = 100


_IP = r"(\d+\.){3}\d+"
_HOSTNAME = r"([\w-]+\.){2,}[\w-]+"
_UUID = r"\b[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\b"

DEFAULT_SETTINGS = MinerSettings(0.5, 4, ((_UUID, "UUID"), (_IP + r"(:\d+)?", "IP"), (_HOSTNAME, "HOST")))

#: Per-system Drain settings (see the module docstring for their source and tuning).
MINER_SETTINGS: dict[str, MinerSettings] = {
    "HDFS": MinerSettings(0.5, 4, ((r"blk_-?\d+", "BLK"), (_IP + r"(:\d+)?", "IP"))),
    "Hadoop": MinerSettings(0.3, 5, ((_IP, "IP"),)),
    "Spark": MinerSettings(0.4, 7, ((_IP, "IP"), (r"\b[KGTM]?B\b", "UNIT"), (_HOSTNAME, "HOST"))),
    "Zookeeper": MinerSettings(0.4, 7, ((r"(/|)" + _IP + r"(:\d+)?", "IP"),)),
    "BGL": MinerSettings(0.4, 6, ((r"core\.\d+", "CORE"),)),
    "HPC": MinerSettings(0.6, 4, ((r"=\d+", "NUM"),)),
    "Linux": MinerSettings(0.5, 5, ((_IP, "IP"), (r"\d{2}:\d{2}:\d{2}", "TIME"))),
    "Android": MinerSettings(
        0.6,
        7,
        (
            (r"(/[\w-]+)+", "PATH"),
            (_HOSTNAME, "HOST"),
            (r"\b(\-?\+?\d+)\b|\b0[Xx][a-fA-F\d]+\b|\b[a-fA-F\d]{4,}\b", "NUM"),
        ),
    ),
    "Apache": MinerSettings(0.5, 4, ((_IP, "IP"),)),
    "Proxifier": MinerSettings(
        0.85,
        3,
        (
            (r"<\d+\ssec", "DURATION"),
            (r"\d+ bytes( \([\d.]+ [KGTM]?B\))?", "SIZE"),
            (r"([\w-]+\.)+[\w-]+(:\d+)?", "HOST"),
            (r"\d{2}:\d{2}(:\d{2})*", "DURATION"),
        ),
    ),
    "OpenSSH": MinerSettings(0.7, 5, ((_IP, "IP"), (_HOSTNAME, "HOST"))),
    "OpenStack": MinerSettings(
        0.5, 7, ((_UUID, "UUID"), (r"((\d+\.){3}\d+,?)+", "IP"), (r"/\S+(?=\s)", "PATH"), (r"\d+", "NUM"))
    ),
}


def settings_for(system: str | None) -> MinerSettings:
    """The settings of ``system``, :data:`DEFAULT_SETTINGS` when unknown or ``None``."""
    return MINER_SETTINGS.get(system or "", DEFAULT_SETTINGS)


def new_miner(settings: MinerSettings) -> TemplateMiner:
    """A fresh in-memory drain3 ``TemplateMiner`` (no persistence, no .ini file) with ``settings``."""
    config = TemplateMinerConfig()
    config.drain_sim_th = settings.sim_th
    config.drain_depth = settings.depth
    config.drain_max_children = settings.max_children
    config.drain_extra_delimiters = list(settings.extra_delimiters)
    config.masking_instructions = [
        MaskingInstruction(m, "*") if isinstance(m, str) else MaskingInstruction(m[0], m[1]) for m in settings.masks
    ]
    config.parametrize_numeric_tokens = True
    config.profiling_enabled = False
    return TemplateMiner(persistence_handler=None, config=config)


@dataclass(slots=True)
class MiningResult:
    """Templates mined from a sequence of contents.

    ``cluster_ids[i]`` is the cluster (template id, ≥ 1) of content ``i``;
    ``templates`` maps a cluster id to its final template text (``<*>`` for
    parameters); ``sizes`` to its number of lines.
    """

    cluster_ids: list[int] = field(default_factory=list)
    templates: dict[int, str] = field(default_factory=dict)
    sizes: dict[int, int] = field(default_factory=dict)


def mine(contents: Iterable[str], system: str | None = None, settings: MinerSettings | None = None) -> MiningResult:
    """Mine templates from ``contents`` (log contents without headers) in order.

    Drain is online: the order of ``contents`` matters a little (file order is
    the benchmark's). Uses ``settings`` or those of ``system``.
    """
    miner = new_miner(settings or settings_for(system))
    result = MiningResult()
    for content in contents:
        result.cluster_ids.append(int(miner.add_log_message(content)["cluster_id"]))
    for cluster in miner.drain.clusters:
        result.templates[cluster.cluster_id] = cluster.get_template()
        result.sizes[cluster.cluster_id] = cluster.size
    return result
