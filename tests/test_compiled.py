"""The mypyc-compiled build: same results as the interpreted code, and the runtime switch.

Each side runs in its own interpreter: one with the compiled modules, one with
``OPENMRC_PURE_PYTHON=1`` (the ``.py`` sources).  The cases are
``benchmarks/sim_parity.py``'s smallest: MRC with trimming (incast), with a
silent switch failure, with random loss (a collective), and RoCE; and a training
job at flow level (``openmrc.flow``) with each transport, with and without a
fault.  Skipped when the installation has no compiled modules.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ["incast-7to1", "silent-t1", "ring-allreduce-16-loss", "permutation-64-roce"]

_RUN = """
import importlib.util, json, sys
import openmrc
spec = importlib.util.spec_from_file_location("sim_parity", sys.argv[1])
parity = importlib.util.module_from_spec(spec)
spec.loader.exec_module(parity)
results = {name: parity.run_case(name) for name in sys.argv[2:]}
import openmrc.transport.qp as qp
print(json.dumps({"compiled": openmrc.compiled_modules(), "qp": qp.__file__, "results": results}))
"""


def _env(pure: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENMRC_PURE_PYTHON"}
    if pure:
        env["OPENMRC_PURE_PYTHON"] = "1"
    return env


def _python(code: str, *args: str, pure: bool) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        env=_env(pure),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return out.stdout


@pytest.fixture(scope="module")
def installed() -> list[str]:
    """The modules this installation has compiled (whatever this process uses)."""
    names = json.loads(
        _python("import json, openmrc; print(json.dumps(openmrc.compiled_modules()))", pure=False)
    )
    if not names:
        pytest.skip("no compiled modules in this installation (pure-Python install)")
    return names


def _run(pure: bool) -> dict[str, Any]:
    return json.loads(_python(_RUN, str(ROOT / "benchmarks" / "sim_parity.py"), *CASES, pure=pure))


def test_the_transport_core_packets_and_nic_are_compiled(installed: list[str]) -> None:
    for name in (
        "openmrc.transport.qp",
        "openmrc.transport.requester",
        "openmrc.transport.responder",
        "openmrc.transport.context",
        "openmrc.transport.cc.nscc",
        "openmrc.wire.packets",
        "openmrc.sim.host",
    ):
        assert name in installed
    assert "openmrc" not in installed  # the package itself (the switch) stays Python


def test_the_baseline_packet_path_is_compiled(installed: list[str]) -> None:
    """The RoCE/IB baseline's per-packet classes: its QPs, the fabric's port (and the
    Python port it subclasses), switch and NIC."""
    for name in (
        "openmrc.baselines.roce",
        "openmrc.baselines.datapath",
        "openmrc.baselines.nic",
        "openmrc.sim.pyport",
    ):
        assert name in installed


def test_compiled_and_interpreted_runs_give_identical_results(installed: list[str]) -> None:
    compiled = _run(pure=False)
    interpreted = _run(pure=True)
    assert "openmrc.transport.qp" in compiled["compiled"]
    assert not compiled["qp"].endswith(".py")
    assert interpreted["compiled"] == []
    assert interpreted["qp"].endswith("qp.py")
    for name in CASES:
        assert compiled["results"][name] == interpreted["results"][name], name


_FLOW = """
import copy, json
import openmrc
from openmrc.pipeline.jobrun import run_flow
from openmrc.pipeline.scenario import parse
from openmrc.workloads.jobs.examples import CALIBRATION_SCENARIO
import openmrc.flow.model as fm
out = {}
for transport in ("mrc", "roce"):
    for faults in ([], [{"at_us": 50, "kind": "link_down", "target": "p0t0x0-p0t1x1"}]):
        d = copy.deepcopy(CALIBRATION_SCENARIO)
        d["run"] = {"mode": "flow"}
        d["transport"] = {"name": transport}
        d["faults"] = faults
        sc = parse(d)
        res, rows, _wall = run_flow(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults)
        key = transport + ("-fault" if faults else "")
        out[key] = {"rows": rows, "end": res.end_ps, "events": res.events,
                    "recomputes": res.recomputes, "faults": res.faults,
                    "tasks": [[t.start, t.end] for t in res.jobs]}
print(json.dumps({"compiled": openmrc.compiled_modules(), "model": fm.__file__, "results": out}))
"""


def test_the_flow_level_is_compiled_and_gives_identical_results(installed: list[str]) -> None:
    """The flow level (FluidModel's max-min filling, DCQCN's trajectories) compiled runs
    a training job, MRC and RoCE, with and without a failed link, exactly as the sources."""
    assert "openmrc.flow.model" in installed
    assert "openmrc.flow.dcqcn" in installed
    compiled = json.loads(_python(_FLOW, pure=False))
    interpreted = json.loads(_python(_FLOW, pure=True))
    assert not compiled["model"].endswith(".py")
    assert interpreted["model"].endswith("model.py")
    assert set(compiled["results"]) == {"mrc", "mrc-fault", "roce", "roce-fault"}
    for name, result in compiled["results"].items():
        assert result == interpreted["results"][name], name


def _says_how_it_runs(out: str, installed: list[str]) -> None:
    """``openmrc --version``'s words (``out``) match the compiled modules ``installed``:
    the mypyc count only when mypyc compiled something (an install may hold the
    hand-written C extensions alone), each native part exactly when it is there."""
    from openmrc.cli.app import NATIVE_KERNEL, NATIVE_RECORDS

    out = " ".join(out.split())  # (argparse wraps a long line)
    mypyc = [m for m in installed if m not in (NATIVE_KERNEL, NATIVE_RECORDS)]
    if mypyc:
        assert f"({len(mypyc)} modules compiled by mypyc" in out, out
    else:
        assert "compiled by mypyc" not in out, out
    assert ("native event kernel" in out) == (NATIVE_KERNEL in installed), out
    assert ("native requester records" in out) == (NATIVE_RECORDS in installed), out
    assert ("pure Python" in out) == (not installed), out


def test_version_says_how_it_runs(installed: list[str]) -> None:
    code = "from openmrc.cli import main; main(['--version'])"
    _says_how_it_runs(_python(code, pure=False), installed)
    _says_how_it_runs(_python(code, pure=True), [])


@pytest.mark.parametrize(
    "installed",
    [
        [],
        ["openmrc.sim._kernel"],
        ["openmrc.sim._kernel", "openmrc.transport._txtable"],
        ["openmrc.transport._txtable", "openmrc.transport.qp"],
        ["openmrc.sim._kernel", "openmrc.sim.host", "openmrc.transport.qp"],
    ],
    ids=["pure", "kernel-only", "c-extensions-only", "records-and-mypyc", "kernel-and-mypyc"],
)
def test_version_line_for_each_kind_of_install(
    installed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version line for installs this machine may not have: the C extensions
    without mypyc (no C compiler for mypyc's output, or OPENMRC_NO_COMPILE with the
    extensions built), mypyc without them, and so on.  Runs without an install."""
    import openmrc
    from openmrc.cli import app

    monkeypatch.setattr(openmrc, "compiled_modules", lambda: list(installed))
    _says_how_it_runs(app._version(), installed)
