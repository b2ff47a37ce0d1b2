"""benchmarks/sim_misses.py: its reading of callgrind's output (each function's own
costs, not the inclusive cost of the calls it makes) and its census of a small run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "sim_misses.py"


def _module() -> ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("sim_misses", SCRIPT)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(SCRIPT.parent))


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
