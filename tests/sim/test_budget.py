"""The memory budget (openmrc.sim.budget, docs/performance.md) holds at scale."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openmrc.sim import _native
from openmrc.sim.budget import BYTES_PER_QP, bytes_per_host, estimate, links_of
from openmrc.topology import ClosSpec

SRC = Path(__file__).resolve().parents[2] / "src"

# Builds the fabric and hosts of an experiment in a fresh interpreter and prints the
# resident memory it added per host (the budget is the compiled build's).
_CHILD = """
import json, sys
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

def rss():
    return status("VmRSS")

spec = ClosSpec(**json.loads(sys.argv[1]))
before = rss()
exp = Experiment(spec, seed=1)
print(json.dumps({"per_host": (rss() - before) / spec.hosts, "ports": len(exp.fabric.ports)}))
"""


@pytest.mark.skipif(not _native.NATIVE, reason="the budget is the compiled build's")
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc")
def test_16384_hosts_on_8_planes_fit_the_budget_per_host() -> None:
    shape = {"planes": 8, "t0s": 64, "hosts_per_t0": 256, "t1s": 256}
    spec = ClosSpec(**shape)
    assert spec.hosts == 16_384
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(shape)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ports"] == 2 * links_of(spec) == 524_288
    budget = bytes_per_host(spec)
    assert got["per_host"] <= budget, (got["per_host"], budget)


# Runs the sendrecv of benchmarks/sim_speed.py (every host sends 4 MiB to host + 1 in
# 1 MiB messages) and prints the peak resident memory beyond the interpreter and the
# estimate's for it (the fabric and each QP by where its flow goes).
_RUN = """
import json, sys
from openmrc.sim.budget import BASE_BYTES, estimate, same_t0
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec

def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024

spec = ClosSpec(**json.loads(sys.argv[1]))
n = spec.hosts
base = status("VmRSS")
exp = Experiment(spec, seed=1, sample_interval_ps=100_000_000)
flows = [FlowSpec(h, (h + 1) % n, 4 << 20, message=1 << 20) for h in range(n)]
exp.add_flows(flows)
result = exp.run()
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child of a large
# process (pytest late in the suite) would report its parent's size
peak = status("VmHWM")
qps = sum(len(h.ctx.qps) for h in exp.hosts)
local = [f for f in flows if same_t0(spec, f.src, f.dst)]
est = estimate(
    spec, [f.size for f in flows], senders=n, qps=qps, base_rtt_ps=exp.base_rtt_ps,
    local_qps=2 * len(local), local_bytes=sum(f.size for f in local),
)
print(json.dumps({"ok": result.all_ok, "qps": qps, "run": peak - base,
                  "estimate": est.memory_bytes - BASE_BYTES}))
"""


@pytest.mark.skipif(not _native.NATIVE, reason="the budget is the compiled build's")
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc")
def test_a_sendrecv_run_peaks_near_its_estimate() -> None:
    # 512 hosts x 8 planes: 1024 QPs spraying over 256 EVs each (measured: the peak
    # beyond the interpreter 76.9 MiB, the estimate 77.7: docs/results/estimate.md)
    shape = {"planes": 8, "t0s": 16, "hosts_per_t0": 32, "t1s": 32}
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    out = subprocess.run(
        [sys.executable, "-c", _RUN, json.dumps(shape)],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["ok"] and got["qps"] == 1024
    assert 0.7 * got["estimate"] <= got["run"] <= 1.3 * got["estimate"], got


def test_estimate_counts_the_fabric_and_the_qps() -> None:
    spec = ClosSpec(planes=8, t0s=512, hosts_per_t0=256, t1s=256)
    est = estimate(spec, [4 << 20] * spec.hosts, senders=spec.hosts, qps=2 * spec.hosts)
    assert est.hosts == 131_072
    assert est.links == 8 * (131_072 + 512 * 256)
    assert est.ports == 2 * est.links
    assert est.qps == 262_144
    assert est.memory_bytes > est.qps * BYTES_PER_QP
    assert est.events > 131_072 * 1024  # 1024 MTU packets per host
    assert "131,072 hosts x 8 planes" in est.line()


def test_a_run_says_what_it_will_cost_before_it_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from openmrc.pipeline import run as cli

    root = Path(__file__).resolve().parents[2]
    scenario, _ = cli.load_scenario(str(root / "scenarios/permutation-64.toml"), [])
    est = cli.announce(scenario, progress=True)
    err = capsys.readouterr().err
    assert est.hosts == 64 and est.qps == 2 * 64
    assert "64 hosts x 8 planes, 2,048 ports, 128 QPs" in err
    assert "warning" not in err
    monkeypatch.setattr(cli, "available_bytes", lambda: 1 << 20)  # 1 MiB free
    cli.announce(scenario, progress=False)
    err = capsys.readouterr().err
    assert "64 hosts x 8 planes" in err
    assert "warning: the estimate" in err and "0.0 GiB available" in err
