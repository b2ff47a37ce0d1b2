"""The run pipeline: scenario file -> experiment -> results, as a library.

``load_scenario`` reads and checks a scenario (with ``--set``-style overrides),
``execute`` runs one and returns its results document, ``run_file`` and
``compare_scenario`` are ``openmrc run`` and ``openmrc compare`` from Python
(the same checks, runs, printed summary and files).  ``paper``, ``sweep``, the
demo and the command line use it; nothing here parses command-line flags.
Ctrl-C stops a simulation and still returns what was measured, marked
``partial``.  Exit codes are in ``docs/cli.md``.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import itertools
import json
import re
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path
from types import TracebackType
from typing import Any

from ..sim.budget import Estimate, available_bytes, estimate
from ..transport.errors import MrcError
from ..units import plural

#: Exit codes (docs/cli.md).
EXIT_OK = 0
EXIT_FLOW_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

TRANSPORTS = ("mrc", "roce", "ib")


class UsageError(ValueError):
    """Bad command-line input; the message names the flag or key and the reason."""


# ----- scenario loading with --set overrides -------------------------------------
def read_scenario_data(path: str | Path) -> dict[str, Any]:
    """The parsed TOML/JSON of a scenario file (not yet validated)."""
    from .scenario import read_data

    return read_data(path)


def parse_value(text: str) -> Any:
    """A ``--set`` value: TOML syntax (``8``, ``1.5``, ``true``, ``"x"``, ``[1, 2]``,
    ``{a = 1}``), or the bare text as a string when it is not TOML (``permutation``)."""
    from .scenario import MAX_NESTING, nesting_depth

    if nesting_depth(text) > MAX_NESTING:
        return text  # not a value a scenario can hold: validation names the key
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except (tomllib.TOMLDecodeError, RecursionError):
        return text


_STEP = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[\d+\])*)$")


def apply_override(data: dict[str, Any], assignment: str, flag: str = "--set") -> None:
    """Apply ``key.path=value`` to the scenario data in place (``faults[0].at_us=5``).

    Missing tables are created (validation then names unknown keys); a path
    through something that is not a table or a list index out of range is a
    UsageError naming the path (and ``flag``, the option it came from).
    """
    path, sep, raw = assignment.partition("=")
    path = path.strip()
    if not sep or not path:
        raise UsageError(f"{flag} {assignment}: expected key.path=value")
    steps: list[str | int] = []
    for part in path.split("."):
        m = _STEP.match(part)
        if not m:
            raise UsageError(f"{flag} {path}: {part!r} is not a key (letters, digits, _, [index])")
        steps.append(m.group(1))
        steps.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
    node: Any = data
    where = ""
    for step, nxt in itertools.pairwise(steps):
        where = _join(where, step)
        if isinstance(step, int):
            if not isinstance(node, list) or step >= len(node):
                raise UsageError(f"{flag} {path}: {where} does not exist")
            node = node[step]
        else:
            if not isinstance(node, dict):
                raise UsageError(f"{flag} {path}: {where} is inside something that is not a table")
            if step not in node:
                node[step] = [] if isinstance(nxt, int) else {}
            node = node[step]
        if isinstance(nxt, str) and not isinstance(node, dict):
            raise UsageError(f"{flag} {path}: {where} is not a table")
    last = steps[-1]
    value = parse_value(raw.strip())
    if isinstance(last, int):
        if not isinstance(node, list) or last >= len(node):
            raise UsageError(f"{flag} {path}: {_join(where, last)} does not exist")
        node[last] = value
    else:
        node[last] = value


def _join(where: str, step: str | int) -> str:
    if isinstance(step, int):
        return f"{where}[{step}]"
    return f"{where}.{step}" if where else step


def load_scenario(
    path: str,
    overrides: list[str],
    seed: int | None = None,
    transport: str | None = None,
    build: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """The validated scenario after ``--set``, ``--seed`` and ``--transport``, and its
    (overridden) workload table (``build``: see :func:`openmrc.pipeline.scenario.parse`)."""
    return scenario_from_data(
        read_scenario_data(path),
        overrides,
        seed,
        transport,
        name=Path(path).stem,
        base_dir=Path(path).parent,
        build=build,
    )


def scenario_from_data(
    data: dict[str, Any],
    overrides: list[str],
    seed: int | None = None,
    transport: str | None = None,
    *,
    name: str = "",
    base_dir: Path | None = None,
    flag: str = "--set",
    build: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """:func:`load_scenario` for scenario data already read (``data`` is not changed)."""
    from .scenario import ScenarioError, parse

    data = copy.deepcopy(data)
    for assignment in overrides:
        apply_override(data, assignment, flag)
    if seed is not None:
        data["seed"] = seed
    if transport is not None:
        transport_table = data.setdefault("transport", {})
        if not isinstance(transport_table, dict):
            raise ScenarioError("transport: must be a table")
        transport_table["name"] = transport
    workload = copy.deepcopy(data.get("workload", {}))
    return parse(data, name=name, base_dir=base_dir, build=build), workload


# ----- output directory ----------------------------------------------------------
def prepare_out(path: str | None) -> Path | None:
    """Create ``--out`` and check that files can be written there, before any run."""
    if path is None:
        return None
    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".openmrc-write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UsageError(f"--out: cannot write to {path} ({reason})") from None
    return out


# ----- progress ------------------------------------------------------------------
class RunProgress:
    """A rich progress bar (flows done, simulated time) for runs longer than a second.

    It lives in a background thread that only *reads* the experiment (simulated
    time, finished flows), so the simulation, and its results, are unchanged.
    Shown only when ``enabled`` (the CLI enables it when stderr is a terminal).
    """

    def __init__(
        self,
        exp: Any,
        label: str,
        enabled: bool,
        delay_s: float = 1.0,
        console: Any = None,
    ) -> None:
        #: the experiment, or None while it is being built (the bar then says so)
        self.exp = exp
        self.label = label
        self.enabled = enabled
        self.delay_s = delay_s
        self.console = console
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.shown = False

    def __enter__(self) -> RunProgress:
        if self.enabled:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Take the bar off the terminal (before a line of our own; again is harmless)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def _counts(self) -> tuple[int, int, float | None]:
        """(flows done, flows, simulated us); simulated us is None while setting up."""
        exp = self.exp
        if exp is None:
            return 0, 0, None
        counts = getattr(exp, "flow_counts", None)  # (folded collectives included)
        if counts is not None:
            done, total = counts()
        else:
            flows = list(exp.flows)
            done, total = sum(1 for f in flows if f.done_at is not None), len(flows)
        return done, total, exp.sim.now / 1e6

    def _loop(self) -> None:
        """Show the bar after ``delay_s`` (set-up included), refresh it 5 times a second."""
        if self._stop.wait(self.delay_s):
            return
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = self.console or Console(file=sys.stderr)
        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total} flows"),
            TextColumn("{task.fields[sim]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        )
        done, total, _sim_us = self._counts()
        task = progress.add_task(self.label, total=total or None, completed=done, sim="")
        self.shown = True
        with progress:
            while True:
                done, total, sim_us = self._counts()
                what = "setting up" if sim_us is None else f"{sim_us:,.1f} us simulated"
                progress.update(task, completed=done, total=total or None, sim=what)
                if self._stop.wait(0.2):
                    break


# ----- one run -------------------------------------------------------------------
class RunOutcome:
    """A finished (or interrupted) run: its results document and whether it was cut short."""

    def __init__(self, label: str, scenario: Any, doc: dict[str, Any], partial: bool) -> None:
        self.label = label
        self.scenario = scenario
        self.doc = doc
        self.partial = partial
        #: training jobs: the Chrome / Perfetto trace written as trace.json (openmrc.workloads.jobs.trace).
        self.trace: dict[str, Any] | None = None


def run_estimate(scenario: Any) -> Estimate:
    """What ``scenario`` will cost at packet level (:func:`openmrc.sim.budget.estimate`),
    from its spec and workload (its flows, collectives and jobs' transfers), before
    anything is built."""
    from ..sim.budget import same_t0
    from ..sim.config import FabricConfig
    from ..sim.experiment import base_rtt_ps

    spec = scenario.spec
    latency = FabricConfig(**scenario.switches).path_latency_ps()
    default_qps = transport_shape(scenario)[0]
    sizes: list[int] = []
    senders: set[int] = set()
    qps = local_qps = local_bytes = 0

    conns: set[str] = set()

    def add(src: int, dst: int, size: int, n_qps: int, conn: str | None) -> None:
        """A flow; its QPs unless it shares a connection already counted."""
        nonlocal qps, local_qps, local_bytes
        sizes.append(size)
        senders.add(src)
        local = same_t0(spec, src, dst)
        local_bytes += size if local else 0
        if conn is not None:
            if conn in conns:
                return
            conns.add(conn)
        qps += 2 * n_qps
        local_qps += 2 * n_qps if local else 0

    for f in scenario.flows:
        add(
            f.src,
            f.dst,
            f.size,
            f.qps or default_qps,
            f"{f.src}>{f.dst}>{f.conn}" if f.conn else None,
        )
    for run in scenario.collectives:
        coll = run.collective
        hosts = list(run.placement) if run.placement else list(range(coll.ranks))
        pairs: set[tuple[int, int, int]] = set()
        for t in coll.transfers:
            src, dst = hosts[t.src], hosts[t.dst]
            sizes.append(t.size)
            senders.add(src)
            if same_t0(spec, src, dst):
                local_bytes += t.size
            pairs.add((src, dst, t.channel))
        for src, dst, _ch in pairs:
            n = 2 * (run.qps or default_qps)
            qps += n
            local_qps += n if same_t0(spec, src, dst) else 0
    if scenario.jobs:
        from ..workloads.jobs.lower import lower

        for job in scenario.jobs:
            for f in lower(job.graph, job.hosts, job.start_ps, 1 << 20, job.name).flows:
                add(f.src, f.dst, f.size, default_qps, f.conn or None)
    return estimate(
        spec,
        sizes,
        senders=len(senders),
        qps=qps,
        mtu=scenario.transport.mtu,
        base_rtt_ps=base_rtt_ps(spec, scenario.transport.mtu, latency),
        local_qps=local_qps,
        local_bytes=local_bytes,
    )


#: A run this big (events) says what it will cost even without a progress bar.
ANNOUNCE_EVENTS = 50_000_000


def announce(scenario: Any, progress: bool) -> Estimate:
    """Say on stderr what the run will cost (when it shows progress, or is big), and
    warn when its memory estimate is more than the machine has available."""
    est = run_estimate(scenario)
    free = available_bytes()
    short = free is not None and est.memory_bytes > free
    if progress or short or est.events >= ANNOUNCE_EVENTS:
        print(f"openmrc: {est.line()}", file=sys.stderr, flush=True)
    if short and free is not None:
        print(
            f"openmrc: warning: the estimate ({est.memory_bytes / 2**30:.1f} GiB) is more "
            f"than the {free / 2**30:.1f} GiB available: the run may fail or swap "
            "(docs/performance.md has the budget)",
            file=sys.stderr,
            flush=True,
        )
    return est


def execute(
    scenario: Any,
    *,
    scenario_file: str,
    overrides: list[str],
    workload: dict[str, Any],
    pcap: str | None = None,
    pcap_hosts: str | None = None,
    progress: bool = False,
) -> RunOutcome:
    """Build and run ``scenario``; on Ctrl-C collect what was measured so far."""
    from .results import build, now_utc
    from .scenario import ScenarioError

    start_time = now_utc()
    if getattr(scenario, "mode", "packet") == "flow":
        return _execute_flow(scenario, scenario_file, overrides, workload, start_time)
    announce(scenario, progress)
    label = f"{scenario.name or scenario_file} [{scenario.transport.name}]"
    partial = False
    with RunProgress(None, label, progress) as bar:
        try:
            exp = scenario.build()
        except KeyboardInterrupt:
            print(
                "openmrc: interrupted while setting up: nothing was simulated, no results",
                file=sys.stderr,
            )
            raise SystemExit(EXIT_INTERRUPTED) from None
        if pcap:
            try:
                exp.capture(pcap, _host_list(pcap_hosts, exp.spec.hosts))
            except ScenarioError:
                raise
            except ValueError as exc:
                raise ScenarioError(str(exc)) from None
        until = None if scenario.until_us is None else int(scenario.until_us * 1_000_000)
        bar.exp = exp
        started = time.perf_counter()
        try:
            result = exp.run(until)
        except KeyboardInterrupt:
            partial = True
            # the simulation has stopped; say so at once: writing what was measured
            # takes time in proportion to the run's size (about 0.1 ms per flow)
            bar.close()
            print(
                f"openmrc: interrupted at {exp.sim.now / 1e6:.3f} us simulated: stopped; "
                f"writing partial results ({len(exp.flows):,} flows)",
                file=sys.stderr,
                flush=True,
            )
            gc.freeze()  # see below
            result = exp.collect(round(time.perf_counter() - started, 3))
        # The fabric is millions of long-lived objects (the run's end unfroze them):
        # frozen again, the collections that building the results sets off do not walk
        # them.  Unfrozen, those walks were most of what a Ctrl-C cost (1.1 of 2.0 CPU
        # s at 8192 hosts x 8 planes; 0.9 with this) and slowed every large run's end.
        gc.freeze()
    wall = time.perf_counter() - started
    warnings: list[str] = []
    if partial:
        warnings.append(
            f"interrupted at {result.sim_end_ps / 1e6:.3f} us simulated: results are partial"
        )
    elif not all(f.finish_ps is not None for f in result.flows):
        warnings.append(
            "the run ended before every flow finished"
            + ("" if until is None else f" (run.until_us = {scenario.until_us:g})")
        )
    if getattr(scenario, "jobs", None):
        from .jobrun import skipped_warnings

        warnings += skipped_warnings(scenario.jobs)
    doc = build(
        result,
        scenario,
        scenario_file=scenario_file,
        overrides=overrides,
        workload=workload,
        start_time=start_time,
        wall_seconds=wall,
        warnings=warnings,
        partial=partial,
    )
    outcome = RunOutcome(label, scenario, doc, partial)
    if getattr(scenario, "jobs", None) and scenario.job_state is not None:
        from .jobrun import ideal_step_ps, job_row, packet_times, trace

        jobs, lowered = scenario.jobs, scenario.job_state
        job_times = packet_times(jobs, lowered, result)
        doc["jobs"] = [
            job_row(j, s, e, ideal_step_ps(scenario.spec, j))
            for j, (s, e) in zip(jobs, job_times, strict=True)
        ]
        outcome.trace = trace(jobs, job_times, doc.get("fabric", {}).get("faults", []))
    if getattr(scenario, "failures", None) is not None:
        doc["failures"] = scenario.failures
    # The fabric is millions of objects in reference cycles: left to the collector, the
    # interpreter's exit would spend seconds freeing them one by one (4 s at 8192 hosts
    # x 8 planes).  Frozen (above, and the results now), they are left to the operating
    # system; the next set-up in this process (paused_gc) unfreezes and collects them.
    del exp, bar, result
    gc.freeze()
    return outcome


def _execute_flow(
    scenario: Any, scenario_file: str, overrides: list[str], workload: dict[str, Any], start: str
) -> RunOutcome:
    """Run a scenario's training jobs in the flow-level model (``run.mode = "flow"``)."""
    from .jobrun import flow_result, run_flow, trace
    from .results import build

    jobs = scenario.jobs
    res, rows, wall = run_flow(
        scenario.spec, scenario.transport, scenario.seed, jobs, scenario.faults, scenario.until_us
    )
    result = flow_result(res, wall, scenario.sample_us)
    from .jobrun import skipped_warnings

    warnings = [] if all(r["complete"] for r in rows) else ["a job did not finish its iteration"]
    warnings += skipped_warnings(jobs)
    doc = build(
        result,
        scenario,
        scenario_file=scenario_file,
        overrides=overrides,
        workload=workload,
        start_time=start,
        wall_seconds=wall,
        warnings=warnings,
        partial=False,
    )
    doc["jobs"] = rows
    doc["all_ok"] = all(r["complete"] for r in rows)
    if scenario.failures is not None:
        doc["failures"] = scenario.failures
    label = f"{scenario.name or scenario_file} [{scenario.transport.name}, flow level]"
    outcome = RunOutcome(label, scenario, doc, False)
    outcome.trace = trace(jobs, [(t.start, t.end) for t in res.jobs], res.faults)
    return outcome


def _host_list(text: str | None, hosts: int) -> list[int] | None:
    from .scenario import ScenarioError

    if not text:
        return None
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ScenarioError(
            f"--pcap-hosts: {text!r} is not a comma-separated list of host numbers"
        ) from None
    bad = [h for h in out if not 0 <= h < hosts]
    if bad:
        raise ScenarioError(f"--pcap-hosts: host {bad[0]} is not in 0..{hosts - 1}")
    return out


# ----- printing ------------------------------------------------------------------
def _workload_sets_qps(node: Any) -> bool:
    """Whether a workload table (or any table or list inside it) sets ``qps``."""
    if isinstance(node, dict):
        return "qps" in node or any(_workload_sets_qps(v) for v in node.values())
    if isinstance(node, list):
        return any(_workload_sets_qps(v) for v in node)
    return False


def fair_striping(scenario: Any, workload: dict[str, Any]) -> str | None:
    """The ``--set`` that gives a baseline the whole NIC in a comparison, or None.

    MRC sprays one QP over every plane; a RoCE/IB connection with one QP is pinned
    to one plane, an eighth of an 8-plane NIC.  When the scenario leaves the
    baseline's QP count unset (``transport.qps``, ``transport.roce.qps`` and the
    workload's ``qps``), ``compare`` runs it with one QP per plane, messages
    striped round-robin over them (what NCCL does, and what the demo scenario
    sets), so every transport has the same aggregate NIC bandwidth.
    """
    t = scenario.transport
    planes = scenario.spec.planes
    if t.name == "mrc" or planes == 1:
        return None
    if t.qps is not None or "qps" in t.roce or _workload_sets_qps(workload):
        return None
    return f"transport.roce.qps={planes}"


def transport_shape(scenario: Any) -> tuple[int, int, float]:
    """``(QPs per connection, planes they use, ideal Gb/s)`` of a scenario's transport.

    The ideal is the payload rate one connection can reach alone on an idle
    fabric: the NIC ports its QPs use, minus headers and Ethernet framing (what
    the runs' ``ideal_fct_us`` and slowdown are measured against).
    """
    from ..sim.config import ETHERNET_FRAMING_BYTES
    from ..wire.packets import DATA_HEADER_BYTES

    t = scenario.transport
    spec = scenario.spec
    if t.name == "mrc":
        qps = t.qps or 1
        planes = spec.planes  # every QP sprays over every plane
        mtu, header_bytes = t.mtu, DATA_HEADER_BYTES
    else:
        from ..baselines.fabric import baseline_configs

        cfg, _ = baseline_configs(t.name, t)
        qps, mtu, header_bytes = cfg.qps, cfg.mtu, 80  # QP i on plane i % planes
        planes = min(qps, spec.planes)
    ideal = planes * spec.host_gbps * mtu / (mtu + header_bytes + ETHERNET_FRAMING_BYTES)
    return qps, planes, ideal


def planes_carrying(doc: dict[str, Any]) -> int | None:
    """How many planes carried any bytes in a run (None: no per-plane series recorded)."""
    from ..sim.result import read_series

    series = read_series(doc, "plane_tx_gbps_series")
    if not series:
        return None
    return sum(1 for values in series.values() if any(v > 0 for v in values))


def shape_row(outcome: RunOutcome) -> tuple[str, str, str]:
    """The table's QPs, planes and ideal cells for one transport's run.

    Planes used are those that carried bytes when the run recorded per-plane
    series (a flow of fewer messages than QPs leaves QPs, and their planes, idle),
    else the planes its QPs are given.
    """
    qps, planes, ideal = transport_shape(outcome.scenario)
    used = planes_carrying(outcome.doc)
    return (
        str(qps),
        f"{planes if used is None else used} of {outcome.scenario.spec.planes}",
        (f"{ideal:,.1f}"),
    )


def _idle_planes_warning(outcome: RunOutcome) -> str | None:
    """A warning when a transport's QPs were given more planes than carried bytes."""
    _, planes, _ = transport_shape(outcome.scenario)
    used = planes_carrying(outcome.doc)
    if used is None or used >= planes:
        return None
    return (
        f"its QPs have {planes} planes but only {used} carried bytes: a flow has fewer "
        f"messages than QPs (lower workload.message to stripe it)"
    )


def format_table(
    headers: list[str],
    docs: list[dict[str, Any]],
    first: list[tuple[str, str, str]] | None = None,
) -> str:
    """The summary table as aligned text; ``first``: each column's QPs, planes, ideal.

    A job run's table leads with each job's step time, compute, exposed
    communication, idle time and slowdown (:func:`openmrc.pipeline.jobrun.job_rows`)
    instead of the flow counters (results.json keeps those)."""
    from .jobrun import has_jobs, job_rows
    from .results import summary_rows

    if has_jobs(docs):
        rows = job_rows(docs)
        if first is not None:
            rows += [
                ("QPs per connection", [f[0] for f in first]),
                ("planes used", [f[1] for f in first]),
            ]
        rows.append(("simulated us", [f"{d.get('sim_end_us') or 0.0:,.1f}" for d in docs]))
    else:
        rows = summary_rows(docs)
        if first is not None:
            rows[:0] = [
                ("QPs per connection", [f[0] for f in first]),
                ("planes used", [f[1] for f in first]),
                ("ideal Gb/s per flow", [f[2] for f in first]),
            ]
    rows.append(("wall s", [f"{d['provenance']['wall_seconds']:.2f}" for d in docs]))
    if has_jobs(docs):
        return align(headers, rows) + "\n" + IDEAL_NOTE
    return align(headers, rows)


#: Under a job run's table: what the ideal step is (openmrc.workloads.jobs.ideal).
IDEAL_NOTE = (
    "  ideal step: a lower bound, the critical path with compute at its time and every "
    "transfer at the NIC's line rate, no latency or queueing (or the busiest NIC's "
    "bytes); slowdown = step / ideal"
)


def align(headers: list[str], rows: list[tuple[str, list[str]]]) -> str:
    """Rows of (measure, one cell per column) as an aligned text table under ``headers``."""
    w0 = max(len(r[0]) for r in rows)
    widths = [max(len(h), *(len(r[1][i]) for r in rows)) for i, h in enumerate(headers)]
    lines = [
        "  " + " " * w0 + "  " + "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    ]
    for name, cells in rows:
        lines.append(
            "  "
            + name.ljust(w0)
            + "  "
            + "  ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True))
        )
    return "\n".join(lines)


def header(outcome: RunOutcome, scenario_file: str) -> str:
    """The first line of a run's output; it names the transport."""
    sc = outcome.scenario
    spec = sc.spec
    return (
        f"scenario {sc.name or scenario_file} [transport {sc.transport.name}]: "
        f"{plural(spec.hosts, 'host')}, {plural(spec.planes, 'plane')}, "
        f"{spec.t0s} T0 x {spec.t1s} T1 per plane, "
        + (_job_words(outcome.doc) or f"{plural(outcome.doc['summary']['flows'], 'flow')}")
        + f", seed {sc.seed}"
        + (" - INTERRUPTED, partial results" if outcome.partial else "")
    )


def _job_words(doc: dict[str, Any]) -> str | None:
    """``1 job at flow level`` (None when the run has no jobs)."""
    jobs = doc.get("jobs") or []
    if not jobs:
        return None
    level = "flow" if doc.get("fabric", {}).get("model") == "flow" else "packet"
    return f"{plural(len(jobs), 'job')} at {level} level"


def _status_line(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    verified = doc.get("verified")
    return f"  completed: {s['completed']}/{s['flows']} flows, all ok: {s['all_ok']}" + (
        "" if verified is None else f", payloads verified: {verified}"
    )


def _collective_lines(doc: dict[str, Any]) -> list[str]:
    """One line per collective (a job run's steps are in its table)."""
    from .jobrun import network_line

    if doc.get("jobs"):
        net = network_line(doc)
        return ([] if net is None else [net]) + _coll_lines(doc)
    return _coll_lines(doc)


def _coll_lines(doc: dict[str, Any]) -> list[str]:
    """One line per collective, when the results have any."""
    out = []
    for c in doc.get("collectives") or []:
        t = c.get("time_us")
        done = (
            f"{t:.1f} us, algbw {c.get('algbw_gbps', 0):.1f} Gb/s, "
            f"busbw {c.get('busbw_gbps', 0):.1f} Gb/s"
            if t is not None
            else "did not complete"
        )
        out.append(
            f"  collective {c.get('kind')} x{c.get('ranks')} ranks, {c.get('size')} B: {done}"
        )
    return out


def _localised_lines(doc: dict[str, Any]) -> list[str]:
    """One line per element the self-probes ([clustermapper]) localised, when any."""
    out = []
    for loc in doc.get("localised") or []:
        cleared = "" if loc["cleared_us"] is None else f", cleared at {loc['cleared_us']:.1f} us"
        out.append(
            f"  localised {loc['kind']} {loc['element']} at {loc['time_us']:.1f} us{cleared}"
        )
    return out


def _write_outputs(out: Path, outcomes: list[RunOutcome], compare: bool) -> list[str]:
    """results.json + CSVs per run (a subfolder per transport when comparing), the report."""
    from .jobrun import has_jobs, job_rows
    from .results import summary_rows, write

    written: list[str] = []
    for o in outcomes:
        d = out / o.scenario.transport.name if compare else out
        paths = write(o.doc, d)
        written.append(str(paths[0]))
        if o.trace is not None:
            (d / "trace.json").write_text(json.dumps(o.trace))
            written.append(str(d / "trace.json"))
    if compare:
        table = out / "summary.csv"
        docs = [o.doc for o in outcomes]
        rows = job_rows(docs) if has_jobs(docs) else []
        if not rows or any(d["summary"]["flows"] for d in docs):
            rows += summary_rows(docs)
        with table.open("w") as fh:
            fh.write("measure," + ",".join(o.scenario.transport.name for o in outcomes) + "\n")
            for name, cells in rows:
                fh.write(name + "," + ",".join(c.replace(",", "") for c in cells) + "\n")
        written.append(str(table))
    copy = _copy_scenario(out, outcomes[0].doc["provenance"].get("scenario_file"))
    if copy is not None:
        written.append(str(copy))
    written.append(str(_report(out, outcomes, copy)))
    # a job run's step time per iteration (openmrc.pipeline.report_jobs)
    steps = out / "job_steps.csv"
    if has_jobs([o.doc for o in outcomes]) and steps.is_file():
        written.append(str(steps))
    return written


def _copy_scenario(out: Path, source: str | None) -> Path | None:
    """Copy the scenario file into ``out`` (same name), so the folder reproduces the run
    and the report can name a file that stays; None when there is no file to copy."""
    import shutil

    if not source or not Path(source).is_file():
        return None
    copy = out / Path(source).name
    if copy.resolve() != Path(source).resolve():
        shutil.copyfile(source, copy)
    return copy


def _report(out: Path, outcomes: list[RunOutcome], scenario_copy: Path | None = None) -> Path:
    """report.html (the table; plots when the report extra, matplotlib, is installed)."""
    from .report import have_plots, write_report

    if not have_plots() and not any(o.partial for o in outcomes):
        print(
            "openmrc: note: report.html has no plots (pip install 'openmrc[report]')",
            file=sys.stderr,
        )
    if any(o.partial for o in outcomes):
        # interrupted: Ctrl-C should end the program at once, and the plots (matplotlib)
        # take seconds: the page has the table only
        from .report import render_html

        path = out / "report.html"
        path.write_text(render_html([o.doc for o in outcomes], [], scenario_copy))
        return path
    return write_report(
        out, [o.doc for o in outcomes], scenario_copy, traces=[o.trace for o in outcomes]
    )


def _exit_code(outcomes: list[RunOutcome]) -> int:
    if any(o.partial for o in outcomes):
        return EXIT_INTERRUPTED
    return EXIT_OK if all(o.doc["all_ok"] for o in outcomes) else EXIT_FLOW_FAILED


def run_file(
    scenario_file: str,
    *,
    overrides: list[str] | None = None,
    seed: int | None = None,
    transport: str | None = None,
    out: str | None = None,
    pcap: str | None = None,
    pcap_hosts: str | None = None,
    as_json: bool = False,
    progress: bool = False,
    partitioned: bool = False,
) -> int:
    """``openmrc run`` from Python: load and check the scenario, run it, write ``out``
    and print the summary (or the whole document with ``as_json``); returns the exit code.

    Under ``mpirun -n K`` (K > 1), or with ``partitioned``, the simulation is
    partitioned over the ranks (:mod:`openmrc.sim.partition`); rank 0 writes and
    prints, the others only simulate."""
    from ..sim import partition

    comm = partition.mpi_comm()
    if comm is None and partitioned:
        comm = partition.LocalComm()
    partition.request(comm)
    try:
        return _run_file(
            scenario_file,
            overrides=overrides,
            seed=seed,
            transport=transport,
            out=out,
            pcap=pcap,
            pcap_hosts=pcap_hosts,
            as_json=as_json,
            progress=progress,
            worker=comm is not None and comm.rank != 0,
        )
    finally:
        partition.request(None)


def _run_file(
    scenario_file: str,
    *,
    overrides: list[str] | None,
    seed: int | None,
    transport: str | None,
    out: str | None,
    pcap: str | None,
    pcap_hosts: str | None,
    as_json: bool,
    progress: bool,
    worker: bool,
) -> int:
    from ..sim import partition

    # not built while loading: the run builds it once, after saying what it will cost
    # (building it twice was half of a large run's set-up)
    scenario, workload = load_scenario(
        scenario_file, list(overrides or []), seed, transport, build=False
    )
    if getattr(scenario, "mode", "packet") == "flow" and partition.active_comm() is not None:
        raise partition.PartitionError(
            "partitioned run: run.mode = 'flow' (the flow-level model) is not partitioned"
        )
    if worker:  # a rank other than 0 of a partitioned run: simulate, write nothing
        exp = scenario.build()
        if pcap:  # its part of the capture (rank 0 writes the file)
            exp.capture(pcap, _host_list(pcap_hosts, exp.spec.hosts))
        exp.run(None if scenario.until_us is None else int(scenario.until_us * 1_000_000))
        return EXIT_OK
    from .scenario import ScenarioError

    existed = out is not None and Path(out).exists()
    out_dir = prepare_out(out)
    try:
        outcome = execute(
            scenario,
            scenario_file=scenario_file,
            overrides=list(overrides or []),
            workload=workload,
            pcap=pcap,
            pcap_hosts=pcap_hosts,
            progress=progress,
        )
    except (ScenarioError, MrcError, ValueError):
        # the scenario failed to build (a fault's target, a switch setting, a
        # size the verbs refuse): only valid input leaves --out behind
        if out_dir is not None and not existed:
            with contextlib.suppress(OSError):
                out_dir.rmdir()
        raise
    written = _write_outputs(out_dir, [outcome], compare=False) if out_dir is not None else []
    if as_json:
        print(json.dumps(outcome.doc, indent=1, sort_keys=True))
        return _exit_code([outcome])
    print(header(outcome, scenario_file))
    if not outcome.doc.get("jobs"):
        print(_status_line(outcome.doc))
    print(format_table([outcome.scenario.transport.name], [outcome.doc]))
    for line in _collective_lines(outcome.doc) + _localised_lines(outcome.doc):
        print(line)
    for warning in outcome.doc["provenance"]["warnings"]:
        print(f"  warning: {warning}")
    if pcap:
        print(f"  wrote {pcap}")
    if written:
        print(f"  wrote {', '.join(written)} (+ CSVs)")
    return _exit_code([outcome])


def transport_names(transports: list[str]) -> list[str]:
    """``--transports`` checked: known names, none twice (UsageError otherwise)."""
    given = ",".join(transports)
    names = [t.strip() for t in transports if t.strip()]
    bad = [t for t in names if t not in TRANSPORTS]
    if bad or not names:
        raise UsageError(
            f"--transports: {bad[0] if bad else given!r} is not one of {', '.join(TRANSPORTS)}"
        )
    if len(set(names)) != len(names):
        raise UsageError(f"--transports: {given} names a transport twice")
    return names


def compare_scenario(
    scenario_file: str,
    transports: list[str],
    *,
    overrides: list[str] | None = None,
    seed: int | None = None,
    out: str | None = None,
    progress: bool = False,
) -> int:
    """``openmrc compare`` from Python (what ``openmrc demo`` runs): every transport's
    settings checked before anything runs, the runs, the printed table and the files
    in ``out``; returns the exit code."""
    from ..sim import partition

    if partition.mpi_comm() is not None:
        raise partition.PartitionError(
            "partitioned run: openmrc compare is not partitioned (run each transport with "
            "openmrc run under mpirun)"
        )
    base = list(overrides or [])
    names = transport_names(transports)
    loaded: list[tuple[Any, dict[str, Any], list[str]]] = []
    for name in names:  # every transport's settings are checked before anything runs
        extra = list(base)
        scenario, workload = load_scenario(scenario_file, extra, seed, name)
        stripe = fair_striping(scenario, workload)
        if stripe is not None:
            extra.append(stripe)
            scenario, workload = load_scenario(scenario_file, extra, seed, name)
        loaded.append((scenario, workload, extra))
    out_dir = prepare_out(out)
    striped = [sc.transport.name for sc, _, ov in loaded if ov != base]
    if striped:
        planes = loaded[0][0].spec.planes
        print(
            f"  {' and '.join(striped)}: one QP per plane, striped over all {planes} planes "
            f"(NCCL-style), so every transport has the whole NIC; "
            f"--set transport.roce.qps=1 for one QP on one plane"
        )
    outcomes: list[RunOutcome] = []
    for scenario, workload, extra in loaded:
        outcome = execute(
            scenario,
            scenario_file=scenario_file,
            overrides=extra,
            workload=workload,
            progress=progress,
        )
        outcomes.append(outcome)
        print(header(outcome, scenario_file), flush=True)
        if outcome.partial:
            break
    print()
    print(
        format_table(
            [o.scenario.transport.name for o in outcomes],
            [o.doc for o in outcomes],
            first=[shape_row(o) for o in outcomes],
        )
    )
    for o in outcomes:
        idle = _idle_planes_warning(o)
        if idle is not None:
            print(f"  warning [{o.scenario.transport.name}]: {idle}")
    for o in outcomes:
        for line in _collective_lines(o.doc) + _localised_lines(o.doc):
            print(f"{line} [{o.scenario.transport.name}]")
        for warning in o.doc["provenance"]["warnings"]:
            print(f"  warning [{o.scenario.transport.name}]: {warning}")
    if out_dir is not None:
        written = _write_outputs(out_dir, outcomes, compare=True)
        print(f"  wrote {', '.join(written)} (+ CSVs)")
    return _exit_code(outcomes)
