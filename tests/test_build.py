"""setup.py's reuse of an editable install's compiled modules (no build runs here), and
what the compiled group's shared library exports."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.tools import needs_tool

ROOT = Path(__file__).resolve().parent.parent


def _setup_module() -> ModuleType:
    """setup.py imported under another name: its helpers, without calling setup()."""
    spec = importlib.util.spec_from_file_location("openmrc_setup_script", ROOT / "setup.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def setup_py(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    mod = _setup_module()
    monkeypatch.setattr(mod, "STAMP", str(tmp_path / "stamp.json"))
    monkeypatch.setattr(sys, "argv", ["setup.py", "editable_wheel", "--dist-dir", "x"])
    monkeypatch.delenv("OPENMRC_REBUILD", raising=False)
    return mod


def _stamp(mod: ModuleType, files: list[str], fingerprint: str | None = None) -> None:
    with open(mod.STAMP, "w") as f:
        json.dump({"fingerprint": fingerprint or mod._fingerprint(), "files": files}, f)


def test_an_unchanged_editable_install_reuses_the_build(setup_py: ModuleType) -> None:
    _stamp(setup_py, ["setup.py"])  # a file that exists, standing in for a compiled one
    assert setup_py._reusable()
    assert setup_py._ext_modules() == []


def test_anything_else_builds(setup_py: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    assert not setup_py._reusable()  # no stamp yet
    _stamp(setup_py, ["setup.py"], fingerprint="0" * 64)
    assert not setup_py._reusable()  # sources (or compiler, interpreter, mypy) changed
    _stamp(setup_py, ["setup.py", "src/openmrc/gone.so"])
    assert not setup_py._reusable()  # a compiled file was deleted
    _stamp(setup_py, ["setup.py"])
    monkeypatch.setenv("OPENMRC_REBUILD", "1")
    assert not setup_py._reusable()  # asked for
    monkeypatch.delenv("OPENMRC_REBUILD")
    monkeypatch.setattr(sys, "argv", ["setup.py", "bdist_wheel"])
    assert not setup_py._reusable()  # a wheel always carries its own build


def test_the_fingerprint_covers_the_sources_and_the_compiler(
    setup_py: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tree = tmp_path / "tree"
    (tree / "src" / "openmrc" / "sim").mkdir(parents=True)
    (tree / "src" / "openmrc" / "sim" / "_kernel.c").write_text("int x;\n")
    (tree / "src" / "openmrc" / "pipeline.py").write_text("X = 1\n")
    monkeypatch.setattr(setup_py, "HERE", str(tree))
    before = setup_py._fingerprint()
    assert setup_py._fingerprint() == before
    (tree / "src" / "openmrc" / "pipeline.py").write_text(
        "X = 2\n"
    )  # any module, not only compiled ones
    edited = setup_py._fingerprint()
    assert edited != before
    # every C extension's source: the requester's records too
    (tree / "src" / "openmrc" / "transport").mkdir()
    (tree / "src" / "openmrc" / "transport" / "_txtable.c").write_text("int y;\n")
    assert setup_py._fingerprint() != edited
    edited = setup_py._fingerprint()
    monkeypatch.setenv("CC", "some-other-cc")
    assert setup_py._fingerprint() != edited


def _imports_reached(start: list[str]) -> set[str]:
    """The top-level names of the packages outside openmrc that mypy reaches when it
    checks ``start`` (setup.py's mypyc modules): every import, at any depth of the
    module and of each openmrc module it imports in turn."""
    import ast

    src = ROOT / "src"
    seen: set[Path] = set()
    todo = [ROOT / p for p in start]
    outside: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        # the package relative imports start from (a module's, or an __init__'s own)
        package = path.relative_to(src).with_suffix("").parts[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = list(package[: len(package) - node.level + 1]) if node.level else []
                mod = [*base, *(node.module.split(".") if node.module else [])]
                names = [".".join(mod)] + [".".join([*mod, a.name]) for a in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] != "openmrc":
                    outside.add(parts[0])
                    continue
                for cand in (
                    src.joinpath(*parts).with_suffix(".py"),
                    src.joinpath(*parts, "__init__.py"),
                ):
                    if cand.exists():
                        todo.append(cand)
    return outside - set(sys.stdlib_module_names)


def test_the_mypyc_build_finds_or_ignores_every_package_it_imports() -> None:
    """mypyc type-checks its modules in pip's isolated build environment, which holds
    the build requirements only: a third-party package they import that is neither
    there nor declared ignorable when missing fails the check, and the whole build
    falls back to pure Python (a fresh venv, the speed guard's reference builds)."""
    import tomllib

    setup = _setup_module()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    build = {
        r.split(">")[0].split("=")[0].split("<")[0].strip().replace("-", "_")
        for r in config["build-system"]["requires"]
    }
    build |= {"mypy_extensions", "typing_extensions"}  # mypy's own requirements
    ignorable = {
        m.removesuffix(".*")
        for o in config["tool"]["mypy"].get("overrides", [])
        if o.get("ignore_missing_imports")
        for m in ([o["module"]] if isinstance(o["module"], str) else o["module"])
    }
    reached = _imports_reached(setup.MYPYC_MODULES)
    assert "numpy" in reached  # the flow level's: the check below is not empty
    assert sorted(reached - build - ignorable) == []


@needs_tool("nm")
@pytest.mark.skipif(sys.platform != "linux", reason="reads an ELF shared library")
def test_the_mypyc_group_exports_only_its_module_init() -> None:
    """The compiled group (every mypyc module in one shared library) is built with
    hidden visibility: its functions are called directly and inlined into each other
    instead of through PLT stubs, so its dynamic symbol table holds only ``PyInit_*``
    (a module's shim reaches the rest through a capsule)."""
    import openmrc.transport.requester  # noqa: F401  (compiled: its shim loads the group)

    groups = [  # openmrc's, not another mypyc-compiled package's (mypy's own)
        m.__file__
        for n, m in list(sys.modules.items())
        if n.endswith("__mypyc") and hasattr(m, "init_openmrc___transport___requester")
    ]
    if not groups:
        pytest.skip("no compiled modules in this installation (pure-Python install)")
    for path in groups:
        assert path is not None
        out = subprocess.run(
            ["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True
        ).stdout
        rows = [row.split() for row in out.splitlines() if row.strip()]
        names = [row[-1] for row in rows if row[-2] != "A"]  # not a linker's marker (_end)
        assert any(name.startswith("PyInit_") for name in names), path
        assert [n for n in names if not n.startswith("PyInit_")] == [], path
