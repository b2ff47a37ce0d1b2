"""``openmrc demo``: MRC against RoCEv2 on a small 8-plane fabric while a link and a switch fail.

The demo is a bundled scenario file, ``openmrc/scenarios/demo.toml`` (package
data): a ring all-reduce on 16 hosts with 8 x 100G NIC ports, a T0-T1 link that
goes down and a T1 that silently stops forwarding mid-run.  It runs through the
same code path as ``openmrc compare`` (one run per transport, the side-by-side
table, ``results.json``/CSVs per transport and one ``report.html`` with plots),
with a few lines before (what is simulated) and after (the outcome in one
sentence, and where the report is).  A copy of the scenario is written next to
the report, so that it can be edited and run with ``openmrc compare``.

``--quick`` shrinks the run to a couple of seconds (2 T0s, 8 ranks, 2 MiB, the
faults earlier): what the tests run.  The loopback transfer that used to be
``openmrc demo`` is ``openmrc demo loopback`` (:mod:`openmrc.demo.transfer`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any

#: The bundled scenario (package data) and where the demo writes by default.
SCENARIO = "demo.toml"
DEFAULT_OUT = "openmrc-demo"
TRANSPORTS = ["mrc", "roce"]

#: ``--quick``: the same scenario at a size the tests can afford (``--set`` overrides,
#: applied before the user's own).
QUICK = [
    "fabric.t0s=2",
    "workload.placement=[0, 4, 1, 5, 2, 6, 3, 7]",
    "workload.size=2MiB",
    "workload.message=32KiB",
    "faults[0].at_us=20",
    "faults[1].at_us=40",
]

_FAULT_TEXT = {
    "link_down": "link {target} goes down",
    "link_silent": "link {target} silently drops everything",
    "switch_down": "switch {target} down",
    "switch_blackhole": "switch {target} stays up but silently drops everything",
}


@contextmanager
def scenario_path() -> Iterator[Path]:
    """The bundled demo scenario as a file on disk (for as long as the context lasts)."""
    with as_file(files("openmrc").joinpath("scenarios", SCENARIO)) as path:
        yield Path(path)


def describe(scenario: Any, workload: dict[str, Any]) -> list[str]:
    """What the demo simulates, from the (overridden) scenario: fabric, workload, faults."""
    spec = scenario.spec
    size = workload.get("size", "?")
    ranks = len(workload.get("placement") or []) or spec.hosts
    kind = str(workload.get("kind", "allreduce")).replace("allreduce", "all-reduce")
    lines = [
        f"openmrc demo: ring {kind} of {size} over {ranks} ranks, on {spec.hosts} hosts with "
        f"{spec.planes} x {spec.host_gbps:g}G NIC ports and {spec.t0s} T0 x {spec.t1s} T1 "
        f"switches in each of {spec.planes} planes",
    ]
    for f in scenario.faults:
        text = _FAULT_TEXT.get(f.kind, f.kind + " {target}").format(target=f.target)
        lines.append(f"  at {f.at_us:g} us: {text}")
    roce = scenario.transport.roce or {}
    qps = roce.get("qps", 1)
    lines.append(
        f"  MRC (one QP spraying over every plane) against RoCEv2 ({qps} QP{'s' * (qps != 1)} "
        "per connection, ECMP, PFC, DCQCN): same fabric, workload and faults"
    )
    return lines


def _docs(out: Path) -> dict[str, dict[str, Any]]:
    docs = {}
    for name in TRANSPORTS:
        path = out / name / "results.json"
        if path.exists():
            docs[name] = json.loads(path.read_text())
    return docs


def outcome_lines(docs: dict[str, dict[str, Any]]) -> list[str]:
    """The result in a sentence or two: collective times, how each transport met the faults."""
    if set(docs) != set(TRANSPORTS) or any(d.get("partial") for d in docs.values()):
        return []
    times = {}
    for name, doc in docs.items():
        coll = (doc.get("collectives") or [{}])[0]
        times[name] = coll.get("time_us")
    lines = []
    mrc, roce = times["mrc"], times["roce"]
    if mrc is not None and roce is not None and mrc > 0:
        lines.append(
            f"  outcome: MRC finished the all-reduce in {mrc:,.0f} us, RoCE in {roce:,.0f} us "
            f"({roce / mrc:.1f} x as long)"
        )
    m = docs["mrc"]
    faults = [f for f in m.get("fabric", {}).get("faults", []) if f.get("kind") != "switch_up"]
    first_fault = min((f["time_ps"] / 1e6 for f in faults), default=None)
    first_bad = m["summary"].get("first_bad_us")
    if first_fault is not None and first_bad is not None:
        lines.append(
            f"  MRC: first path (EV) marked ASSUMED_BAD {first_bad - first_fault:.1f} us after "
            f"the first fault ({m['summary']['evs_assumed_bad']} over all transfers), "
            f"{m['summary']['timeouts']} timeouts, no wait for routing"
        )
    r = docs["roce"]
    withdrawn = [
        f["time_ps"] / 1e6
        for f in r.get("fabric", {}).get("faults", [])
        if f.get("kind") == "route_withdrawn"
    ]
    lines.append(
        f"  RoCE: {r['summary']['timeouts']} ACK timeouts, {r['summary']['retransmits']} "
        "go-back-N rewinds"
        + (
            f"; routes around the faults withdrawn at {', '.join(f'{t:g}' for t in sorted(set(withdrawn)))} us"
            if withdrawn
            else ""
        )
    )
    return lines


def run(
    *,
    out: str | None,
    quick: bool = False,
    overrides: list[str] | None = None,
    seed: int | None = None,
    progress: bool = False,
) -> int:
    """Run the demo, print it, write the results and report into ``out``; the exit code
    (that of ``openmrc compare``, docs/cli.md)."""
    from ..pipeline.run import compare_scenario, load_scenario, prepare_out

    sets = (QUICK if quick else []) + list(overrides or [])
    folder = out if out is not None else DEFAULT_OUT
    with scenario_path() as path:
        scenario, workload = load_scenario(str(path), sets, seed)  # bad --set: before anything
        prepare_out(folder)
        for line in describe(scenario, workload):
            print(line)
        print(flush=True)
        code = compare_scenario(
            str(path), TRANSPORTS, overrides=sets, seed=seed, out=folder, progress=progress
        )
        copy = Path(folder) / SCENARIO
        shutil.copyfile(path, copy)
    for line in outcome_lines(_docs(Path(folder))):
        print(line)
    print(
        f"  scenario: {copy} (openmrc compare {copy} --transports mrc,roce,ib"
        + (" " + " ".join(f"--set '{s}'" for s in sets) if sets else "")
        + ")"
    )
    print(f"report: {Path(folder) / 'report.html'}")
    return code
