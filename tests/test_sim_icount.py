"""benchmarks/sim_icount.py's refusals, which need no build and no valgrind run:
each is one line naming the commit and a non-zero exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "sim_icount.py"


def _run(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENMRC_REF_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
        cwd=ROOT, check=False,
    )  # fmt: skip


def test_unknown_commit_is_one_line_naming_the_ref(tmp_path: Path) -> None:
    out = _run("--ref", "no-such-commit", cache=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == f"--ref no-such-commit: not a commit in {ROOT}"
    assert out.stdout == ""


def test_commit_without_cached_build_is_refused_not_built(tmp_path: Path) -> None:
    out = _run("--ref", "HEAD", cache=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("--ref HEAD: no cached compiled build in ")
    assert list(tmp_path.iterdir()) == []  # nothing was built
