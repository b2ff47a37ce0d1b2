"""Training jobs: flow level against packet level, and how long the bundled iterations take.

Cases (``--case``, repeatable; default ``agreement``):

* ``agreement`` - every small job both models can run (the 8-GPU calibration
  job of tests/test_training.py, scenarios/training/chakra-8.toml and
  aicb-16.toml), MRC and RoCE, without and with a T0-T1 link failure: step time
  at packet level, at flow level, and their difference (docs/training.md
  publishes the table);
* ``roce-seeds`` - RoCE without and with the fault on the same jobs over seeds 1-6 (the
  ECMP draws differ between the models, so RoCE is compared as a mean over
  seeds): per seed and the means;
* ``dcqcn`` - the microbenchmark behind the flow level's RoCE shared-bottleneck
  efficiency: ``n`` RoCE QPs of one size through one T0-T1 link at packet level,
  the share of the link they used (n = 1, 2, 4, 8; 1 to 16 MiB);
* ``packet-64`` - scenarios/training/gpt-1b-64.toml at packet level with MRC
  (the issue's budget: under 10 minutes);
* ``flow-1024`` - scenarios/training/gpt3-175b-1024.toml at flow level with MRC
  (budget: under 1 minute for the iteration).

Each case prints JSON lines: the case, transport, fault, step times, wall
seconds.  Not a test: it takes minutes.

    python benchmarks/training.py
    python benchmarks/training.py --case flow-1024 --case packet-64
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openmrc.jobrun import packet_rows, run_flow  # noqa: E402
from openmrc.scenario import parse, read_data  # noqa: E402
from openmrc.workloads.jobs.examples import CALIBRATION_SCENARIO  # noqa: E402

SMALL: dict[str, Any] = CALIBRATION_SCENARIO


def _scenario_data(name: str) -> tuple[dict[str, Any], Path]:
    p = ROOT / "scenarios" / "training" / name
    return read_data(p), p.parent


def packet_step(data: dict[str, Any], base: Path | None) -> tuple[float | None, float]:
    """Step time (us) of the scenario's first job at packet level, and wall seconds."""
    d = copy.deepcopy(data)
    d.setdefault("run", {})["mode"] = "packet"
    sc = parse(d, base_dir=base)
    t = time.perf_counter()
    exp = sc.build()
    res = exp.run()
    rows = packet_rows(sc.spec, sc.jobs, sc.job_state, res)
    return rows[0]["step_time_us"], time.perf_counter() - t


def flow_step(data: dict[str, Any], base: Path | None) -> tuple[float | None, float]:
    """Step time (us) of the scenario's first job at flow level, and wall seconds."""
    d = copy.deepcopy(data)
    d.setdefault("run", {})["mode"] = "flow"
    sc = parse(d, base_dir=base)
    _res, rows, wall = run_flow(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults)
    return rows[0]["step_time_us"], wall


def agreement() -> None:
    """Packet vs flow on the small jobs, MRC and RoCE, with and without a link failure."""
    cases: list[tuple[str, dict[str, Any], Path | None]] = [("small-8", SMALL, None)]
    for name in ("chakra-8.toml", "aicb-16.toml"):
        data, base = _scenario_data(name)
        cases.append((name, data, base))
    for label, data, base in cases:
        for transport in ("mrc", "roce"):
            for fault in (False, True):
                d = copy.deepcopy(data)
                d["transport"] = {"name": transport}
                if transport == "roce":
                    # a convergence the packet run can afford (the default is 200 ms)
                    d["transport"]["baseline_fabric"] = {"convergence_delay_ps": 200_000_000}
                if fault:
                    d["faults"] = [{"at_us": 100, "kind": "link_down", "target": "p0t0x0-p0t1x0"}]
                p, pw = packet_step(d, base)
                f, fw = flow_step(d, base)
                diff = None if p is None or f is None else round(100 * (f - p) / p, 2)
                print(
                    json.dumps(
                        {
                            "case": label,
                            "transport": transport,
                            "fault": fault,
                            "packet_step_us": p,
                            "flow_step_us": f,
                            "diff_pct": diff,
                            "packet_wall_s": round(pw, 2),
                            "flow_wall_s": round(fw, 3),
                        }
                    ),
                    flush=True,
                )


def roce_seeds(seeds: range = range(1, 7)) -> None:
    """RoCE without and with the link failure: packet and flow step per seed, their means."""
    cases: list[tuple[str, dict[str, Any], Path | None]] = [("small-8", SMALL, None)]
    for name in ("chakra-8.toml", "aicb-16.toml"):
        data, base = _scenario_data(name)
        cases.append((name, data, base))
    for (label, data, base), fault in itertools.product(cases, (False, True)):
        packet, flow = [], []
        for seed in seeds:
            d = copy.deepcopy(data)
            d["seed"] = seed
            d["transport"] = {"name": "roce"}
            if fault:
                d["transport"]["baseline_fabric"] = {"convergence_delay_ps": 200_000_000}
                d["faults"] = [{"at_us": 100, "kind": "link_down", "target": "p0t0x0-p0t1x0"}]
            packet.append(packet_step(d, base)[0])
            flow.append(flow_step(d, base)[0])
        pm = sum(p for p in packet if p) / len(packet)
        fm = sum(f for f in flow if f) / len(flow)
        print(
            json.dumps(
                {
                    "case": label,
                    "fault": fault,
                    "seeds": list(seeds),
                    "packet_step_us": packet,
                    "flow_step_us": flow,
                    "packet_mean_us": round(pm, 1),
                    "flow_mean_us": round(fm, 1),
                    "diff_pct": round(100 * (fm - pm) / pm, 2),
                }
            ),
            flush=True,
        )


def dcqcn() -> None:
    """n RoCE QPs through one link at packet level: the share of the link they used."""
    from openmrc.sim.experiment import TransportConfig
    from openmrc.sim.factory import make_experiment
    from openmrc.topology import ClosSpec
    from openmrc.workloads import FlowSpec

    for size in (1 << 20, 4 << 20, 16 << 20):
        used = {}
        for n in (1, 2, 4, 8):
            spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=8, t1s=1)
            exp = make_experiment(spec, transport=TransportConfig(name="roce"))
            exp.add_flows([FlowSpec(i, 8 + i, size) for i in range(n)], watch=True)
            end = max(f.rx_finish_ps or 0 for f in exp.run().flows)
            used[n] = round(n * size * 8 / (spec.fabric_gbps * 1e9) / (end / 1e12), 3)
        print(json.dumps({"case": "dcqcn", "size": size, "link_share_used": used}), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--case",
        action="append",
        choices=["agreement", "roce-seeds", "dcqcn", "packet-64", "flow-1024"],
    )
    args = ap.parse_args()
    for case in args.case or ["agreement"]:
        if case == "agreement":
            agreement()
        elif case == "roce-seeds":
            roce_seeds()
        elif case == "dcqcn":
            dcqcn()
        elif case == "packet-64":
            data, base = _scenario_data("gpt-1b-64.toml")
            step, wall = packet_step(data, base)
            print(json.dumps({"case": case, "step_us": step, "wall_s": round(wall, 1)}), flush=True)
        else:
            data, base = _scenario_data("gpt3-175b-1024.toml")
            t = time.perf_counter()
            step, wall = flow_step(data, base)
            total = time.perf_counter() - t
            print(
                json.dumps(
                    {
                        "case": case,
                        "step_us": step,
                        "run_s": round(wall, 1),
                        "total_s": round(total, 1),
                    }
                ),
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
