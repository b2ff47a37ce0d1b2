"""benchmarks/sim_misses.py: its reading of callgrind's output (each function's own
costs, not the inclusive cost of the calls it makes) and its census of a small run."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "sim_misses.py"


def _module(script: Path = SCRIPT) -> ModuleType:
    """A benchmark script imported as a module (its directory on the path meanwhile)."""
    sys.path.insert(0, str(script.parent))
    try:
        spec = importlib.util.spec_from_file_location(script.stem, script)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(script.parent))


# callgrind's format: name compression "(id) name" once, then "(id)"; after "calls=",
# the next cost line is the callee's inclusive cost, charged to the call, not the caller
_OUT = """\
version: 1
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
fn=(1) Sim_run
10 100 0 0 0 5 1 0 2 1
cfn=(2) CPyDef_host___SimHost___kick
calls=3 20
10 9999 0 0 0 999 999 0 999 999
11 50 0 0 0 1 0 0 1 0
fn=(2)
20 30 0 0 0 3 0 0 1 0
fn=(3) CPyDef_host___SimHost___kick'2
20 7 0 0 0 1 1 0 0 1
"""


def test_load_keeps_each_functions_own_costs(tmp_path: Path) -> None:
    out = tmp_path / "cg.out"
    out.write_text(_OUT)
    rows = _module().load(out)
    # SHOW = Ir, D1mr, D1mw, DLmr, DLmw; the call's inclusive line is left out
    assert rows["Sim_run"] == [150, 6, 1, 3, 1]
    # the recursion's "'2" copy merged into its function, "CPyDef_" and "___" shortened
    assert rows["host.SimHost.kick"] == [37, 4, 1, 1, 1]
    assert set(rows) == {"Sim_run", "host.SimHost.kick"}


def test_census_of_a_small_run_prints_types_and_qps() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--census", "--case", "perm-64", "--until-us", "5",
         "--top", "3"],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith(" MB") and " objects, " in lines[0]
    assert "128 QPs; bytes per QP by what holds them" in lines
    assert len(lines) == 1 + 3 + 1 + 3


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src")}


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler (cc)")
def test_fabric_only_child_runs_the_reflected_fabric(tmp_path: Path) -> None:
    """--fabric-only's child runs perm-N's fabric with sim_growth's reflecting hosts: the
    events sim_growth.py --fabric-only counts for that size, window and time (a fabric
    whose hosts were not given their reflectors, or their packets, runs none)."""
    helper_c, helper = tmp_path / "cg.c", tmp_path / "cg.so"
    helper_c.write_text("void cg_start(void) {}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(helper), str(helper_c)], check=True)
    growth = ROOT / "benchmarks" / "sim_growth.py"
    reflector = _module(growth).build_reflector(tmp_path)
    refl = ["--reflector", str(reflector), "--window", "4"]
    misses = subprocess.run(
        [sys.executable, str(SCRIPT), "--child", "perm-16", "--until-us", "10",
         "--helper", str(helper), *refl],
        capture_output=True, text=True, env=_env(), cwd=ROOT, check=False, timeout=300,
    )  # fmt: skip
    assert misses.returncode == 0, misses.stderr
    events = json.loads(misses.stdout.strip().splitlines()[-1])["events"]
    ref = subprocess.run(
        [sys.executable, str(growth), "--child", "16", "--first-us", "10", "--steady-us", "0",
         *refl],
        capture_output=True, text=True, env=_env(), cwd=ROOT, check=False, timeout=300,
    )  # fmt: skip
    assert ref.returncode == 0, ref.stderr
    assert events == json.loads(ref.stdout.strip().splitlines()[-1])["first_events"] > 0


@pytest.mark.parametrize(
    "args",
    [
        ["--fabric-only", "--case", "sendrecv-16"],
        ["--fabric-only", "--case", "perm-1"],
        ["--fabric-only", "--window", "0"],
        ["--fabric-only", "--census"],
    ],
)
def test_fabric_only_refusals_get_one_line(args: list[str]) -> None:
    """--fabric-only runs a permutation's fabric with a window of packets, not a census:
    anything else is refused with one line, exit 2."""
    out = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True, text=True, env=_env(), cwd=ROOT, check=False, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("sim_misses:")
