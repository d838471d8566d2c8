"""The mypyc-compiled hot modules (rocket/compiled.py): the built form is the imported form.

``make setup`` compiles :data:`rocket.compiled.MODULES`; a build that failed quietly, an
extension shadowed by the source or a stale extension shadowing an edited source would each
go unnoticed by the other tests, which pass with either form. ``.ci/run`` sets
``ROCKET_REQUIRE_COMPILED=1`` so that a CI machine that should have built them fails here when
it did not, and runs the unit tests a second time with ``ROCKET_PURE_PYTHON=1``.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

from rocket import compiled


def test_the_built_form_is_the_imported_form() -> None:
    form = compiled.built_form()
    if os.environ.get("ROCKET_REQUIRE_COMPILED"):
        assert form == "compiled" or compiled.pure_requested(), (
            f"ROCKET_REQUIRE_COMPILED is set but the compiled modules are {form!r}; "
            f"the build log is build/mypyc-build.log (make compiled rebuilds)")
    for name in compiled.MODULES:
        module = importlib.import_module(name)
        expected = "compiled" if form == "compiled" else "pure"
        assert compiled.loaded_form(module) == expected, f"{name}: loaded {module.__file__}, built form {form!r}"


def _forms_in_child(**env: str) -> str:
    code = ("import importlib, rocket.compiled as c\n"
            "for m in c.MODULES: importlib.import_module(m)\n"
            "print(c.describe_loaded())")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True,
                         timeout=60, check=True)
    return out.stdout.strip()


def test_rocket_pure_python_loads_every_module_from_source() -> None:
    line = _forms_in_child(ROCKET_PURE_PYTHON="1")
    for name in compiled.MODULES:
        assert f"{name} pure" in line, line
    assert "compiled," not in line and not line.endswith("compiled"), line


def test_without_the_switch_a_child_loads_the_built_form() -> None:
    env = {k: v for k, v in os.environ.items() if k != compiled.PURE_ENV}
    code = ("import importlib, rocket.compiled as c\n"
            "for m in c.MODULES: importlib.import_module(m)\n"
            "print(c.built_form()); print(c.describe_loaded())")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout.splitlines()
    form, line = out[0], out[1]
    expected = "compiled" if form == "compiled" else "pure"
    assert [f"{name} {expected}" for name in compiled.MODULES] == line.split(": ", 1)[1].split(", "), (form, line)


def test_a_changed_source_makes_the_whole_group_pure() -> None:
    recorded = compiled.read_manifest()
    tampered = {**recorded, "rocket.store.record": "0" * 64}
    form = compiled.built_form(tampered)
    if any(compiled.extension_paths(m) for m in compiled.MODULES):
        if compiled.pure_requested():
            assert form == f"pure ({compiled.PURE_ENV})"
        else:
            assert form.startswith("pure (stale: rocket.store.record changed"), form
    else:
        assert form == "pure"


def test_sources_and_extensions_map_to_the_package() -> None:
    for name in compiled.MODULES:
        path = compiled.source_path(name)
        assert path.is_file(), path
        assert path.relative_to(compiled.PACKAGE_DIR.parent).with_suffix("").parts == tuple(name.split("."))
        for ext in compiled.extension_paths(name):
            assert ext.parent == path.parent and ext.name.startswith(path.stem + ".")
