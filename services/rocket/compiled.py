"""The hot modules compiled with mypyc, from the same typed source, and the switch back to pure Python.

``make setup`` runs ``python -m rocket.compiled build``: mypyc (shipped with mypy) turns the
modules of :data:`MODULES` into C extensions written next to their sources
(``services/rocket/message.cpython-311-x86_64-linux-gnu.so`` beside ``message.py``, all of them
sharing ``rocket/_hot__mypyc*.so``), which Python's import system prefers to the ``.py`` file.
The source is the same for both forms; nothing is written in C by hand. When there is no C
compiler, no Python headers or the mypyc build fails, the build prints one line saying so and
exits 0: the pure-Python modules are then used.

Which form runs:

* the built modules are imported compiled, unless ``ROCKET_PURE_PYTHON=1`` is set (then every
  module of :data:`MODULES` is loaded from its ``.py`` file, in this process and in the servers it
  starts, which inherit the environment);
* when any source changed since the build (the SHA-256 recorded in :data:`MANIFEST` differs),
  every module of the group is loaded from its ``.py`` file, with a warning, so an edit is never
  shadowed by a stale extension; ``make setup`` (or ``make test``) rebuilds them;
* ``python -m rocket.compiled status`` (and ``rocket version``) print the form of each module; a
  server logs the forms of the loaded ones at start (:func:`describe_loaded`).

``python -m rocket.compiled clean`` (``make pure``, ``make clean``) removes the extensions, the
manifest and the generated C (``build/mypyc``).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import shutil
import sys
import sysconfig
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType

#: The compiled modules: the codecs (frame and header codec, message encodings, stored-record
#: encoder and dispatch parser, send header, the store's request types, the message-to-store
#: conversion) and the modules every request and message runs through (the remoting connection,
#: the send and pull processors, the CommitLog and its files, the reput, the ConsumeQueues, the
#: IndexFile, the topic table, the broker's stats and metrics, the store's façade
#: ``DefaultMessageStore`` with its put and get paths), chosen by profiling the broker under
#: ``make bench BENCH=hotpath``. Not compiled: the modules that are not on the per-message paths.
MODULES: tuple[str, ...] = (
    "rocket.message",
    "rocket.remoting.command",
    "rocket.store.api",
    "rocket.store.record",
    "rocket.broker.headers",
    "rocket.broker.inner",
    "rocket.store.reput",
    "rocket.broker.stats",
    "rocket.store.index",
    "rocket.broker.processor.send",
    "rocket.remoting.connection",
    "rocket.store.files",
    "rocket.store.commitlog",
    "rocket.store.consumequeue",
    "rocket.store.queue_store",
    "rocket.broker.metrics",
    "rocket.broker.topics",
    "rocket.broker.processor.pull",
    "rocket.store.message_store",
)
#: Set to 1 (or any non-empty value but 0) to load every module of :data:`MODULES` from source.
PURE_ENV = "ROCKET_PURE_PYTHON"
#: Name of the shared library mypyc writes for the group (``rocket/_hot__mypyc*.so``).
GROUP = "rocket._hot"
#: The package directory (``services/rocket``).
PACKAGE_DIR = Path(__file__).resolve().parent
#: JSON ``{"mypy": version, "modules": {module: sha256 of its source}}`` written by a successful build.
MANIFEST = PACKAGE_DIR / "_compiled.json"
#: Where mypyc writes its C files (``build/mypyc`` at the top of the checkout).
C_DIR = PACKAGE_DIR.parent.parent / "build" / "mypyc"

_log = logging.getLogger("rocket.compiled")


def pure_requested() -> bool:
    """True when :data:`PURE_ENV` asks for the pure-Python form."""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def source_path(module: str) -> Path:
    """``rocket.store.record`` → ``services/rocket/store/record.py``."""
    return PACKAGE_DIR.parent.joinpath(*module.split(".")).with_suffix(".py")


def extension_paths(module: str) -> list[Path]:
    """The extension files built for ``module`` (any ABI suffix), normally none or one."""
    src = source_path(module)
    return sorted(p for suffix in importlib.machinery.EXTENSION_SUFFIXES
                  for p in src.parent.glob(src.stem + suffix))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_manifest() -> dict[str, str]:
    """The source hashes recorded by the last build (empty when nothing was built)."""
    try:
        data = json.loads(MANIFEST.read_text())
        modules = data.get("modules", {})
    except (OSError, ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in modules.items()} if isinstance(modules, dict) else {}


def built_form(manifest: dict[str, str] | None = None) -> str:
    """What an import of the modules of :data:`MODULES` loads, without importing them:
    ``"compiled"``, ``"pure"`` (not built), ``"pure (ROCKET_PURE_PYTHON)"`` or ``"pure (stale: ...)"``.

    The modules are compiled as one group whose code calls across modules natively, so they are
    used all compiled or all pure: one changed source makes the whole group load from source.
    """
    if not any(extension_paths(m) for m in MODULES):
        return "pure"
    if pure_requested():
        return f"pure ({PURE_ENV})"
    recorded = read_manifest() if manifest is None else manifest
    stale = [m for m in MODULES if not extension_paths(m) or recorded.get(m) != _digest(source_path(m))]
    if stale:
        return f"pure (stale: {', '.join(stale)} changed since the build; make setup rebuilds)"
    return "compiled"


def loaded_form(module: ModuleType) -> str:
    """``"compiled"`` when ``module`` was loaded from an extension, else ``"pure"``."""
    origin = getattr(module, "__file__", None) or ""
    return "compiled" if origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)) else "pure"


def describe_loaded() -> str:
    """One line: the form of each module of :data:`MODULES` loaded so far, e.g.
    ``compiled modules (mypyc): rocket.message compiled, rocket.store.record pure``."""
    parts = [f"{name} {loaded_form(sys.modules[name])}" for name in MODULES if name in sys.modules]
    return "compiled modules (mypyc): " + (", ".join(parts) if parts else "none loaded")


class _SourceFinder(MetaPathFinder):
    """Loads a module of :data:`MODULES` from its ``.py`` file when its extension must not be used."""

    def __init__(self) -> None:
        self._form: str | None = None

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        """A source spec for a module of :data:`MODULES` when the extensions are not to be used, else None."""
        if fullname not in MODULES:
            return None
        if self._form is None:
            self._form = built_form()
            if self._form.startswith("pure (stale"):
                _log.warning("compiled modules not used: %s", self._form)
        if self._form == "compiled" or self._form == "pure":  # the default finders find the right file
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


def install_finder() -> None:
    """Put the finder that honours :data:`PURE_ENV` and skips stale extensions first on
    ``sys.meta_path`` (once; called by ``rocket/__init__.py``)."""
    if not any(isinstance(f, _SourceFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFinder())


# -- build and clean (make setup, make pure, make clean) ----------------------------------------


def _notice(reason: str) -> int:
    print(f"rocket.compiled: {reason}; the pure-Python modules are used.", flush=True)
    return 0


def _up_to_date() -> bool:
    manifest = read_manifest()
    return all(extension_paths(m) and manifest.get(m) == _digest(source_path(m)) for m in MODULES)


def clean() -> None:
    """Remove the extensions, the shared library, the manifest and the generated C."""
    for module in MODULES:
        for path in extension_paths(module):
            path.unlink()
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        for path in PACKAGE_DIR.glob(GROUP.rpartition(".")[2] + "__mypyc" + suffix):
            path.unlink()
    MANIFEST.unlink(missing_ok=True)
    shutil.rmtree(C_DIR, ignore_errors=True)


def _compiler_problem() -> str | None:
    """Why no extension can be built here, or None."""
    cc = (os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc}) found"
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        return "no Python headers (Python.h) found"
    return None


def build(force: bool = False) -> int:
    """Compile :data:`MODULES` in place with mypyc (skipped when up to date, unless ``force``).

    Returns 0 in every case but a bug here: a missing compiler, missing headers, no mypyc or a
    failed build print one notice line and leave the pure modules in use (old extensions removed).
    """
    if not force and _up_to_date():
        print("rocket.compiled: the compiled modules are up to date.", flush=True)
        return 0
    clean()
    problem = _compiler_problem()
    if problem is not None:
        return _notice(problem)
    try:
        from mypy.version import __version__ as mypy_version
        from mypyc.build import mypycify
        from setuptools import Distribution
        from setuptools.command.build_ext import build_ext
    except ImportError as exc:
        return _notice(f"mypyc or setuptools is not installed ({exc})")
    top = PACKAGE_DIR.parent.parent
    log = top / "build" / "mypyc-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    cwd = Path.cwd()
    try:
        os.chdir(top)  # mypy reads [tool.mypy] of pyproject.toml from here
        with log.open("w") as out:
            fd1, fd2 = os.dup(1), os.dup(2)
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            try:
                extensions = mypycify([str(source_path(m).relative_to(top)) for m in MODULES], group_name=GROUP,
                                      target_dir=str(C_DIR.relative_to(top)), opt_level="3")
                dist = Distribution({"name": "rocket-compiled", "ext_modules": extensions,
                                     "package_dir": {"": "services"}})
                cmd = build_ext(dist)
                cmd.inplace = True
                cmd.ensure_finalized()
                cmd.run()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(fd1, 1)
                os.dup2(fd2, 2)
                os.close(fd1)
                os.close(fd2)
    except (Exception, SystemExit) as exc:  # mypyc reports type errors with SystemExit
        clean()
        return _notice(f"the mypyc build failed ({type(exc).__name__}: {exc}; see {log})")
    finally:
        os.chdir(cwd)
    missing = [m for m in MODULES if not extension_paths(m)]
    if missing:
        clean()
        return _notice(f"the mypyc build did not produce {', '.join(missing)} (see {log})")
    MANIFEST.write_text(json.dumps({"mypy": mypy_version,
                                    "modules": {m: _digest(source_path(m)) for m in MODULES}}, indent=1) + "\n")
    print(f"rocket.compiled: compiled {len(MODULES)} modules with mypyc {mypy_version} "
          f"({', '.join(MODULES)}).", flush=True)
    return 0


def status() -> str:
    """The group's :func:`built_form`, then one line per module of :data:`MODULES` with its extension."""
    lines = [f"compiled modules (mypyc): {built_form()}"]
    for m in MODULES:
        ext = extension_paths(m)
        lines.append(f"  {m:26} {ext[0].name if ext else '-'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rocket.compiled build [--force] | clean | status``."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "status"
    if command == "build":
        return build(force="--force" in args)
    if command == "clean":
        clean()
        print("rocket.compiled: removed the compiled modules; the pure-Python modules are used.")
        return 0
    if command == "status":
        print(status())
        return 0
    print("usage: python -m rocket.compiled build [--force] | clean | status", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
