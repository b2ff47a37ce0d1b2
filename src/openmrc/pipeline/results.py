"""``results.json`` and its CSVs: what a simulation run measured, and what made it.

A results document is the simulator's :meth:`Result.as_dict
<openmrc.sim.result.Result.as_dict>` (flows, EV events, goodput series,
fabric counters; its keys stay at the top level; its series stored sparsely,
:func:`openmrc.sim.result.store_series`) plus:

- ``schema_version``: the version of ``openmrc/schemas/results.schema.json``
  the document follows (documented in ``docs/results.md``);
- ``provenance``: scenario file, the ``--set`` overrides, the resolved
  scenario values, seed, transport, openmrc version, start time, wall time,
  warnings, and ``partial`` (true when the run was interrupted: the numbers are
  what was measured until then);
- ``summary``: the few numbers the tables and the report show;
- per flow, ``ideal_fct_us`` (a lower bound alone on an idle fabric: size at
  the sender's payload line rate plus the path's propagation round trip) and
  ``slowdown`` (FCT / ideal).

Nothing here runs a simulation; :mod:`openmrc.pipeline.run` does, then calls
:func:`build` and :func:`write`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from ..sim.config import ETHERNET_FRAMING_BYTES, FabricConfig
from ..sim.experiment import base_rtt_ps
from ..sim.metrics import write_csv_rows
from ..sim.result import Result, read_series, stored
from ..version import openmrc_version
from ..wire.packets import DATA_HEADER_BYTES
from .scenario import Scenario

#: The version of the results schema this module writes.  Adding keys keeps the
#: major number (readers must ignore keys they do not know); removing or
#: changing the meaning of a key bumps it.
SCHEMA_VERSION = "2.0"


def schema() -> dict[str, Any]:
    """The JSON Schema of ``results.json`` shipped with the package."""
    text = resources.files("openmrc").joinpath("schemas/results.schema.json").read_text()
    return json.loads(text)


def validate(doc: dict[str, Any]) -> None:
    """Check ``doc`` against :func:`schema` (needs ``jsonschema``); ValueError naming the path."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        where = "/".join(str(p) for p in err.absolute_path) or "(top level)"
        raise ValueError(f"results.json {where}: {err.message}")


def now_utc() -> str:
    """The current UTC time, ISO 8601 with seconds (for ``provenance.start_time``)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def _finite_numbers(values: list[Any] | tuple[Any, ...]) -> bool:
    """Whether ``values`` holds only floats and ints and no NaN or infinity (then each
    is its own JSON value): a goodput series, the bulk of a long run's document (a
    64-rank ring's 16,128 transfers, each a value per 10 us tick).  Checked at C speed:
    the element types as a set, and the sum, which is finite only if every float is
    (an overflow of the sum, or of an int too large for a float, answers no)."""
    if not values or not set(map(type, values)) <= _NUMBER_TYPES:
        return False
    try:
        return math.isfinite(sum(values))
    except OverflowError:
        return False


_NUMBER_TYPES = frozenset((float, int))


def _jsonable(value: Any) -> Any:
    """``value`` with only JSON's types (dataclasses as dicts, non-finite floats as None).

    The exact built-in types come first: a 64-rank ring's document has over a
    million values, nearly all floats, ints and lists, and the general checks
    below cost several times as much per value (about a third of a small run's
    wall time, measured).  Anything else takes the general path, unchanged."""
    kind = type(value)
    if kind is float:
        return value if math.isfinite(value) else None
    if kind is int or kind is str or kind is bool or value is None:
        return value
    if kind is list or kind is tuple:
        if _finite_numbers(value):
            return list(value)  # what the comprehension below gives, element for element
        return [_jsonable(v) for v in value]
    if kind is dict:
        return {str(k): _jsonable(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def resolved(scenario: Scenario, workload: dict[str, Any]) -> dict[str, Any]:
    """Every value the run used: the scenario with its defaults filled in.

    ``workload`` is the scenario's (overridden) ``[workload]`` table as given;
    the flows it expands to are in the results' ``flows``.
    """
    # as Scenario.build resolves it: the base RTT counts the NIC and switch latencies
    latency = FabricConfig(**scenario.switches).path_latency_ps()
    rtt = base_rtt_ps(scenario.spec, scenario.transport.mtu, latency)
    fabric_config = FabricConfig(**{"base_rtt_ps": rtt, "ecn_lasthop": False, **scenario.switches})
    return _jsonable(
        {
            "name": scenario.name,
            "seed": scenario.seed,
            "fabric": scenario.spec,
            "switches": fabric_config,
            "transport": scenario.transport,
            "workload": workload,
            "flows": len(scenario.flows),
            "faults": scenario.faults,
            "run": {
                "until_us": scenario.until_us,
                "sample_us": scenario.sample_us,
                "queue_sample_us": scenario.queue_sample_us,
                "payloads": scenario.payloads,
            },
        }
    )


def ideal_fct_ps(scenario: Scenario, src: int, dst: int, size: int) -> int:
    """A lower bound of a flow's completion time alone on an idle fabric.

    The payload at the sender's line rate (its whole NIC, every plane's port,
    minus per-packet headers and Ethernet framing, whatever the transport) plus
    the propagation round trip of its path (2 links each way under one T0, 4
    across the T1 tier), since completion is seen when the last ACK is back.
    """
    spec, mtu = scenario.spec, scenario.transport.mtu
    efficiency = mtu / (mtu + DATA_HEADER_BYTES + ETHERNET_FRAMING_BYTES)
    rate_bps = spec.planes * spec.host_gbps * 1e9 * efficiency
    links = 2 if src // spec.hosts_per_t0 == dst // spec.hosts_per_t0 else 4
    return int(size * 8 / rate_bps * 1e12) + 2 * links * spec.link_delay_ps


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]

    return {
        "min": round(ordered[0], 4),
        "median": round(statistics.median(ordered), 4),
        "p99": round(pct(99), 4),
        "max": round(ordered[-1], 4),
    }


def summarise(doc: dict[str, Any]) -> dict[str, Any]:
    """The numbers the summary table and the report show, from a results document."""
    flows = doc["flows"]
    done = [f for f in flows if f.get("fct_us") is not None]
    ev = doc.get("ev_events", [])
    bad = [e for e in ev if e.get("new") == "ASSUMED_BAD"]
    sim_us = doc.get("sim_end_us") or 0.0
    received = sum(f["size"] for f in done)
    return {
        "flows": len(flows),
        "completed": len(done),
        "ok": sum(1 for f in flows if f.get("ok")),
        "all_ok": bool(doc.get("all_ok")),
        "fct_us": _stats([f["fct_us"] for f in done]),
        "slowdown": _stats([f["slowdown"] for f in done if f.get("slowdown") is not None]),
        "goodput_gbps": _stats([f["goodput_gbps"] for f in done]),
        "aggregate_gbps": round(received * 8 / (sim_us * 1000), 3) if sim_us > 0 else 0.0,
        "retransmits": sum(f.get("retransmits", 0) for f in flows),
        "trims": sum(f.get("trims", 0) for f in flows),
        "nacks": sum(f.get("nacks", 0) for f in flows),
        "timeouts": sum(f.get("timeouts", 0) for f in flows),
        "evs_assumed_bad": len(bad),
        "evs_recovered": sum(1 for e in ev if e.get("new") == "GOOD" and e.get("old") != "GOOD"),
        "evs_mapped_out_ecn": sum(1 for e in ev if e.get("reason") == "mapped out: ECN"),
        "first_bad_us": bad[0]["time_us"] if bad else None,
        "faults": len(doc.get("fabric", {}).get("faults", [])),
        "sim_end_us": sim_us,
    }


def _fmt_stats(stats: dict[str, float] | None, key: str, digits: int = 1) -> str:
    return "-" if not stats else f"{stats[key]:,.{digits}f}"


def flow_times_so_far(doc: dict[str, Any], key: str) -> list[tuple[float, bool]]:
    """Every flow's ``fct_us`` or ``slowdown`` as ``(value, unfinished)``.

    A flow that did not finish counts with its time so far at the run's end
    (``sim_end_us`` minus its start; over its ideal FCT for the slowdown): a lower
    bound, so that tail percentiles count the flows a slow run left unfinished
    instead of describing only the ones it finished.
    """
    end = doc.get("sim_end_us") or 0.0
    out = []
    for f in doc["flows"]:
        if f.get("fct_us") is not None and f.get(key) is not None:
            out.append((float(f[key]), False))
            continue
        so_far = max(0.0, end - f.get("start_ps", 0) / 1e6)
        if key == "slowdown":
            ideal = f.get("ideal_fct_us") or 0.0
            so_far = so_far / ideal if ideal > 0 else math.inf
        out.append((so_far, True))
    return out


def percentile_so_far(doc: dict[str, Any], key: str, p: float) -> tuple[float, bool] | None:
    """Nearest-rank ``p``-th percentile of :func:`flow_times_so_far`, and whether it
    fell on an unfinished flow (then it is a lower bound); None without flows."""
    values = sorted(flow_times_so_far(doc, key))
    if not values:
        return None
    return values[min(len(values) - 1, max(0, math.ceil(p / 100 * len(values)) - 1))]


def _fmt_so_far(doc: dict[str, Any], key: str, p: float, digits: int) -> str:
    got = percentile_so_far(doc, key, p)
    if got is None:
        return "-"
    value, unfinished = got
    return (">=" if unfinished else "") + f"{value:,.{digits}f}"


def summary_rows(docs: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The summary table: one row per measure, one column per run.

    FCT and slowdown percentiles are over all flows: an unfinished flow counts with
    its time so far at the run's end, and a percentile that falls on one is shown
    as a lower bound (``>=``).  Goodput rows are over the completed flows.
    """
    sums = [d["summary"] for d in docs]

    def row(name: str, fn: Any) -> tuple[str, list[str]]:
        return name, [fn(s) for s in sums]

    def tail(name: str, key: str, p: float, digits: int) -> tuple[str, list[str]]:
        return name, [_fmt_so_far(d, key, p, digits) for d in docs]

    return [
        row("flows completed", lambda s: f"{s['completed']}/{s['flows']}"),
        row("all ok", lambda s: "yes" if s["all_ok"] else "NO"),
        tail("FCT median us", "fct_us", 50, 1),
        tail("FCT p99 us", "fct_us", 99, 1),
        tail("slowdown median", "slowdown", 50, 2),
        tail("slowdown p99", "slowdown", 99, 2),
        row("goodput/completed flow min Gb/s", lambda s: _fmt_stats(s["goodput_gbps"], "min")),
        row(
            "goodput/completed flow median Gb/s",
            lambda s: _fmt_stats(s["goodput_gbps"], "median"),
        ),
        row("aggregate Gb/s", lambda s: f"{s['aggregate_gbps']:,.1f}"),
        row("retransmits", lambda s: str(s["retransmits"])),
        row("trims", lambda s: str(s["trims"])),
        row("NACKs", lambda s: str(s["nacks"])),
        row("timeouts", lambda s: str(s["timeouts"])),
        row(
            "EVs ASSUMED_BAD",
            lambda s: (
                str(s["evs_assumed_bad"])
                + ("" if s["first_bad_us"] is None else f" (first {s['first_bad_us']:.1f} us)")
            ),
        ),
        row("EVs recovered", lambda s: str(s["evs_recovered"])),
        row("EVs mapped out by ECN", lambda s: str(s.get("evs_mapped_out_ecn", 0))),
        row("faults applied", lambda s: str(s["faults"])),
        row("simulated us", lambda s: f"{s['sim_end_us']:,.1f}"),
    ]


def build(
    result: Result,
    scenario: Scenario,
    *,
    scenario_file: str | None,
    overrides: list[str],
    workload: dict[str, Any],
    start_time: str,
    wall_seconds: float,
    warnings: list[str],
    partial: bool,
) -> dict[str, Any]:
    """The results document of one run (see the module docstring), its series
    stored sparsely (:func:`openmrc.sim.result.stored`)."""
    doc = stored(result.as_dict())
    for flow in doc["flows"]:
        # the simulator's own ideal FCT and slowdown, when it reports them, win
        given = flow.get("ideal_fct_ps")
        ideal = (
            given / 1e6
            if isinstance(given, int | float) and given > 0
            else ideal_fct_ps(scenario, flow["src"], flow["dst"], flow["size"]) / 1e6
        )
        flow.setdefault("ideal_fct_us", round(ideal, 4))
        fct = flow.get("fct_us")
        flow.setdefault("slowdown", None if fct is None else round(fct / ideal, 4))
    # the simulator's warnings (e.g. faults that never fired), then the front end's
    warnings = [str(w) for w in doc.get("warnings") or []] + list(warnings)
    if partial and doc.get("verified") is False:
        # unfinished transfers compare unequal; that is not a verification failure
        doc["verified"] = None
        warnings.append("payloads not verified: the run was interrupted")
    doc["schema_version"] = SCHEMA_VERSION
    doc["provenance"] = {
        "scenario_file": scenario_file,
        "scenario_name": scenario.name,
        "overrides": list(overrides),
        "resolved": resolved(scenario, workload),
        "seed": scenario.seed,
        "transport": scenario.transport.name,
        "openmrc_version": openmrc_version(),
        "start_time": start_time,
        "wall_seconds": round(wall_seconds, 3),
        "warnings": list(warnings),
        "partial": partial,
    }
    doc["partial"] = partial
    doc["summary"] = summarise(doc)
    return _jsonable(doc)


#: A results document with more flows than this is written without indentation.
LARGE_FLOWS = 1000


def write(doc: dict[str, Any], directory: str | Path) -> list[Path]:
    """Write results.json, flows.csv, goodput.csv, ev_events.csv and faults.csv
    (and queues.csv when queue depths were sampled) into ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    path = d / "results.json"
    tmp = d / "results.json.tmp"
    # a large document (many flows, e.g. a fabric of 100,000 hosts) is written without
    # indentation: json's C encoder does only that, in a tenth of the time
    large = len(doc.get("flows", ())) > LARGE_FLOWS
    tmp.write_text(json.dumps(doc, indent=None if large else 1, sort_keys=True))
    tmp.replace(path)
    written = [path]
    flows = [{k: v for k, v in f.items() if not isinstance(v, list | dict)} for f in doc["flows"]]
    written.append(write_csv_rows(d / "flows.csv", flows))
    series = read_series(doc, "goodput_gbps_series")
    interval = doc.get("sample_interval_us", 0.0)
    names = list(series)
    length = max((len(v) for v in series.values()), default=0)
    rows: list[dict[str, Any]] = []
    for i in range(length):
        row: dict[str, Any] = {"time_us": round((i + 1) * interval, 6)}
        row["total_gbps"] = round(sum(v[i] for v in series.values() if i < len(v)), 3)
        for n in names:
            row[n] = series[n][i] if i < len(series[n]) else ""
        rows.append(row)
    written.append(write_csv_rows(d / "goodput.csv", rows))
    written.append(write_csv_rows(d / "ev_events.csv", doc.get("ev_events", [])))
    fabric = doc.get("fabric", {})
    faults = [{k: v for k, v in f.items()} for f in fabric.get("faults", [])]
    written.append(write_csv_rows(d / "faults.csv", faults))
    samples = fabric.get("queue_samples")
    if samples:
        written.append(
            write_csv_rows(
                d / "queues.csv",
                [
                    {"time_ps": t, "port": n, "data_bytes": a, "header_bytes": b}
                    for t, n, a, b in samples
                ],
            )
        )
    return written
