"""openmrc's NSCC against uet-htsim's, on the same small incast and permutation.

Usage::

    python benchmarks/nscc_vs_htsim.py /path/to/htsim_uec [--out nscc_vs_htsim.json]

``htsim_uec`` is the binary of the UEC's public simulator (ultraethernet/uet-htsim,
``htsim/sim/datacenter``), built locally; nothing of it is vendored here.  For
each scenario this script writes the connection matrix (``.cm``, htsim's
format: ``Nodes N``, ``Connections C``, then ``src->dst start 0 size BYTES``),
runs htsim with sender-based NSCC only, runs the matching openmrc simulation,
and prints (and writes as JSON) the flow completion times and trims of both.

The fabric on both sides: 32 hosts, a two-tier fat tree of 8 T0 (ToR) switches
with 4 hosts each and 4 T1 switches, one plane, 100 Gb/s everywhere, 1 us per
link, 4096-byte MTU, trimming, data queues of 1 x BDP, ECN on every hop
(htsim's default also marks on the ToR downlink).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from openmrc.sim.config import FabricConfig
from openmrc.sim.experiment import Experiment, TransportConfig, base_rtt_ps
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec, incast, permutation

US = 1_000_000
HOSTS = 32
#: htsim's fabric: 1 us per link and no NIC or switch processing latency (pinned: the
#: simulator's own defaults are the deployed latency model, docs/latency.md).
SPEC = ClosSpec(
    planes=1,
    t0s=8,
    hosts_per_t0=4,
    t1s=4,
    host_gbps=100.0,
    fabric_gbps=100.0,
    link_delay_ps=1_000_000,
)
HTSIM_LATENCY = FabricConfig.ideal_latency(base_rtt_ps=base_rtt_ps(SPEC, TransportConfig().mtu))
_FINISHED = re.compile(r"^Flow Uec_(\d+)_(\d+) flowId \d+ uecSrc \d+ finished at ([0-9.]+)")
_TOTALS = re.compile(r"NACKs: (\d+)")


def scenarios(seed: int) -> dict[str, list[FlowSpec]]:
    """The two workloads: an 8-to-1 incast of 2 MiB flows, a 32-host permutation of 2 MB."""
    return {
        "incast 8:1, 2 MiB": incast(list(range(1, 9)), 0, 2 << 20),
        "permutation 32, 2 MB": permutation(HOSTS, 2_000_000, random.Random(seed)),
    }


def write_cm(flows: list[FlowSpec], path: Path) -> None:
    """The flows as an htsim connection matrix."""
    lines = [f"Nodes {HOSTS}", f"Connections {len(flows)}"]
    lines += [f"{f.src}->{f.dst} start {f.start_ps // US} size {f.size}" for f in flows]
    path.write_text("\n".join(lines) + "\n")


def htsim_argv(binary: str, cm: Path, seed: int) -> list[str]:
    """The htsim command line used (printed in the report)."""
    return [binary, "-tm", str(cm), "-nodes", str(HOSTS), "-tiers", "2", "-sender_cc_only",
            "-mtu", "4096", "-linkspeed", "100000", "-end", "20000", "-seed", str(seed)]  # fmt: skip


def run_htsim(binary: str, flows: list[FlowSpec], workdir: Path, name: str, seed: int) -> dict:
    """Run htsim on ``flows``; its per-flow FCTs (us) and NACK (trim) count."""
    cm = workdir / f"{name}.cm"
    write_cm(flows, cm)
    argv = htsim_argv(binary, cm, seed)
    out = subprocess.run(argv, cwd=workdir, capture_output=True, text=True, check=True).stdout
    fct = {}
    for line in out.splitlines():
        m = _FINISHED.match(line)
        if m:
            fct[(int(m[1]), int(m[2]))] = float(m[3])
    nacks = _TOTALS.search(out)
    if len(fct) != len(flows) or nacks is None:
        raise SystemExit(f"htsim: {len(fct)} of {len(flows)} flows finished; see {argv}")
    return {"fct_us": [fct[(f.src, f.dst)] for f in flows], "trims": int(nacks[1]), "argv": argv}


def run_openmrc(flows: list[FlowSpec], seed: int) -> dict:
    """Run openmrc's simulator on ``flows``; per-flow FCTs (us) and trims."""
    cfg = replace(HTSIM_LATENCY, trimming=True, ecn=True, ecn_lasthop=True)
    exp = Experiment(SPEC, fabric_config=cfg, seed=seed)
    exp.add_flows(flows)
    r = exp.run()
    if not r.all_ok:
        raise SystemExit("openmrc: a flow failed")
    by = {(f.src, f.dst): f for f in r.flows}
    fct_us = []
    for f in flows:
        fct = by[(f.src, f.dst)].fct_ps
        assert fct is not None  # all_ok: every flow finished
        fct_us.append(fct / US)
    return {
        "fct_us": fct_us,
        "trims": sum(f.trims for f in r.flows),
        "timeouts": sum(f.timeouts for f in r.flows),
    }


def summary(fct: list[float]) -> dict[str, float]:
    """Min / median / max of the flow completion times."""
    s = sorted(fct)
    return {"min": round(s[0], 1), "median": round(s[len(s) // 2], 1), "max": round(s[-1], 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("htsim", help="path to uet-htsim's htsim_uec binary")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if not Path(args.htsim).is_file():
        print(f"htsim: no such file: {args.htsim}", file=sys.stderr)
        return 2
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, flows) in enumerate(scenarios(args.seed).items()):
            h = run_htsim(args.htsim, flows, Path(tmp), f"s{i}", args.seed)
            o = run_openmrc(flows, args.seed)
            results[name] = {
                "htsim": {"fct_us": summary(h["fct_us"]), "trims": h["trims"]},
                "openmrc": {
                    "fct_us": summary(o["fct_us"]),
                    "trims": o["trims"],
                    "timeouts": o["timeouts"],
                },
                "htsim_command": " ".join(h["argv"][1:]),
            }
            r = results[name]
            print(
                f"{name}: FCT us min/median/max htsim {r['htsim']['fct_us']} "
                f"openmrc {r['openmrc']['fct_us']}; trims htsim {h['trims']} "
                f"openmrc {o['trims']} (timeouts {o['timeouts']})"
            )
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
