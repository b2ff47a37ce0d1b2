"""The package, its tests and benchmarks stay mypy-clean (``[tool.mypy]`` in pyproject.toml:
mypyc compiles the package), and the package tells a user's mypy it is typed (PEP 561)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_no_errors() -> None:
    pytest.importorskip("mypy")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_package_ships_its_py_typed_marker() -> None:
    # PEP 561: without the marker a user's mypy ignores openmrc's annotations
    assert (ROOT / "src" / "openmrc" / "py.typed").is_file()
    with open(ROOT / "pyproject.toml", "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]
    assert "py.typed" in package_data["openmrc"]
