"""``openmrc run`` / ``compare`` (simulate a scenario file; ``sim`` is an alias of ``run``)
and ``openmrc topology`` (a built fabric's address plan and tables).

Every run writes what it measured (``results.json`` with provenance, CSVs,
``report.html``) into ``--out``, which is checked and created before the run;
Ctrl-C stops the simulation and still writes what was measured, marked
``partial``.  Exit codes are in ``docs/cli.md``.
"""

from __future__ import annotations

import argparse
import copy
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

from ..topology import ClosSpec, Topology

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
    from ..scenario import read_data

    return read_data(path)


def parse_value(text: str) -> Any:
    """A ``--set`` value: TOML syntax (``8``, ``1.5``, ``true``, ``"x"``, ``[1, 2]``,
    ``{a = 1}``), or the bare text as a string when it is not TOML (``permutation``)."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
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
    path: str, overrides: list[str], seed: int | None = None, transport: str | None = None
) -> tuple[Any, dict[str, Any]]:
    """The validated scenario after ``--set``, ``--seed`` and ``--transport``, and its
    (overridden) workload table."""
    return scenario_from_data(
        read_scenario_data(path),
        overrides,
        seed,
        transport,
        name=Path(path).stem,
        base_dir=Path(path).parent,
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
) -> tuple[Any, dict[str, Any]]:
    """:func:`load_scenario` for scenario data already read (``data`` is not changed)."""
    from ..scenario import ScenarioError, parse

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
    return parse(data, name=name, base_dir=base_dir), workload


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
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _counts(self) -> tuple[int, int, float]:
        flows = list(self.exp.flows)
        done = sum(1 for f in flows if f.done_at is not None)
        return done, len(flows), self.exp.sim.now / 1e6

    def _loop(self) -> None:
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
        done, total, sim_us = self._counts()
        task = progress.add_task(self.label, total=total, completed=done, sim="")
        self.shown = True
        with progress:
            while True:
                done, total, sim_us = self._counts()
                progress.update(
                    task, completed=done, total=total, sim=f"{sim_us:,.1f} us simulated"
                )
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
        #: training jobs: the Chrome / Perfetto trace written as trace.json (openmrc.jobs.trace).
        self.trace: dict[str, Any] | None = None


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
    from ..results import build, now_utc
    from ..scenario import ScenarioError

    start_time = now_utc()
    if getattr(scenario, "mode", "packet") == "flow":
        return _execute_flow(scenario, scenario_file, overrides, workload, start_time)
    exp = scenario.build()
    if pcap:
        try:
            exp.capture(pcap, _host_list(pcap_hosts, exp.spec.hosts))
        except ScenarioError:
            raise
        except ValueError as exc:
            raise ScenarioError(str(exc)) from None
    until = None if scenario.until_us is None else int(scenario.until_us * 1_000_000)
    label = f"{scenario.name or scenario_file} [{scenario.transport.name}]"
    started = time.perf_counter()
    partial = False
    try:
        with RunProgress(exp, label, progress):
            result = exp.run(until)
    except KeyboardInterrupt:
        partial = True
        result = exp.collect(round(time.perf_counter() - started, 3))
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
        from ..jobrun import ideal_step_ps, job_row, packet_times, trace

        jobs, lowered = scenario.jobs, scenario.job_state
        job_times = packet_times(jobs, lowered, result)
        doc["jobs"] = [
            job_row(j, s, e, ideal_step_ps(scenario.spec, j))
            for j, (s, e) in zip(jobs, job_times, strict=True)
        ]
        outcome.trace = trace(jobs, job_times, doc.get("fabric", {}).get("faults", []))
    return outcome


def _execute_flow(
    scenario: Any, scenario_file: str, overrides: list[str], workload: dict[str, Any], start: str
) -> RunOutcome:
    """Run a scenario's training jobs in the flow-level model (``run.mode = "flow"``)."""
    from ..jobrun import flow_result, run_flow, trace
    from ..results import build

    jobs = scenario.jobs
    res, rows, wall = run_flow(
        scenario.spec, scenario.transport, scenario.seed, jobs, scenario.faults, scenario.until_us
    )
    result = flow_result(res, wall, scenario.sample_us)
    warnings = [] if all(r["complete"] for r in rows) else ["a job did not finish its iteration"]
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
    label = f"{scenario.name or scenario_file} [{scenario.transport.name}, flow level]"
    outcome = RunOutcome(label, scenario, doc, False)
    outcome.trace = trace(jobs, [(t.start, t.end) for t in res.jobs], res.faults)
    return outcome


def _host_list(text: str | None, hosts: int) -> list[int] | None:
    from ..scenario import ScenarioError

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
def format_table(headers: list[str], docs: list[dict[str, Any]]) -> str:
    """The summary table as aligned text."""
    from ..results import summary_rows

    rows = summary_rows(docs)
    rows.append(("wall s", [f"{d['provenance']['wall_seconds']:.2f}" for d in docs]))
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
        f"{spec.hosts} hosts, {spec.planes} planes, {spec.t0s} T0 x {spec.t1s} T1 per plane, "
        f"{outcome.doc['summary']['flows']} flows, seed {sc.seed}"
        + (" - INTERRUPTED, partial results" if outcome.partial else "")
    )


def _status_line(doc: dict[str, Any]) -> str:
    s = doc["summary"]
    verified = doc.get("verified")
    return f"  completed: {s['completed']}/{s['flows']} flows, all ok: {s['all_ok']}" + (
        "" if verified is None else f", payloads verified: {verified}"
    )


def _collective_lines(doc: dict[str, Any]) -> list[str]:
    from ..jobrun import step_lines

    return step_lines(doc) + _coll_lines(doc)


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
    from ..results import summary_rows, write

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
        rows = summary_rows([o.doc for o in outcomes])
        with table.open("w") as fh:
            fh.write("measure," + ",".join(o.scenario.transport.name for o in outcomes) + "\n")
            for name, cells in rows:
                fh.write(name + "," + ",".join(c.replace(",", "") for c in cells) + "\n")
        written.append(str(table))
    written.append(str(_report(out, outcomes)))
    return written


def _report(out: Path, outcomes: list[RunOutcome]) -> Path:
    """report.html (the table; plots when the report extra, matplotlib, is installed)."""
    from ..report import have_plots, write_report

    if not have_plots():
        print(
            "openmrc: note: report.html has no plots (pip install 'openmrc[report]')",
            file=sys.stderr,
        )
    return write_report(out, [o.doc for o in outcomes])


def _progress_enabled(args: argparse.Namespace) -> bool:
    if getattr(args, "no_progress", False):
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _exit_code(outcomes: list[RunOutcome]) -> int:
    if any(o.partial for o in outcomes):
        return EXIT_INTERRUPTED
    return EXIT_OK if all(o.doc["all_ok"] for o in outcomes) else EXIT_FLOW_FAILED


# ----- commands ------------------------------------------------------------------
def _cmd_run(args: argparse.Namespace) -> int:
    scenario, workload = load_scenario(args.scenario, args.set or [], args.seed, args.transport)
    out = prepare_out(args.out)
    outcome = execute(
        scenario,
        scenario_file=args.scenario,
        overrides=args.set or [],
        workload=workload,
        pcap=args.pcap,
        pcap_hosts=args.pcap_hosts,
        progress=_progress_enabled(args),
    )
    written = _write_outputs(out, [outcome], compare=False) if out is not None else []
    if args.json:
        print(json.dumps(outcome.doc, indent=1, sort_keys=True))
        return _exit_code([outcome])
    print(header(outcome, args.scenario))
    print(_status_line(outcome.doc))
    print(format_table([outcome.scenario.transport.name], [outcome.doc]))
    for line in _collective_lines(outcome.doc) + _localised_lines(outcome.doc):
        print(line)
    for warning in outcome.doc["provenance"]["warnings"]:
        print(f"  warning: {warning}")
    if args.pcap:
        print(f"  wrote {args.pcap}")
    if written:
        print(f"  wrote {', '.join(written)} (+ CSVs)")
    return _exit_code([outcome])


def _cmd_compare(args: argparse.Namespace) -> int:
    names = [t.strip() for t in args.transports.split(",") if t.strip()]
    bad = [t for t in names if t not in TRANSPORTS]
    if bad or not names:
        raise UsageError(
            f"--transports: {bad[0] if bad else args.transports!r} is not one of {', '.join(TRANSPORTS)}"
        )
    if len(set(names)) != len(names):
        raise UsageError(f"--transports: {args.transports} names a transport twice")
    loaded = [
        load_scenario(args.scenario, args.set or [], args.seed, name) for name in names
    ]  # every transport's settings are checked before anything runs
    out = prepare_out(args.out)
    outcomes: list[RunOutcome] = []
    for scenario, workload in loaded:
        outcome = execute(
            scenario,
            scenario_file=args.scenario,
            overrides=args.set or [],
            workload=workload,
            progress=_progress_enabled(args),
        )
        outcomes.append(outcome)
        print(header(outcome, args.scenario), flush=True)
        if outcome.partial:
            break
    print()
    print(format_table([o.scenario.transport.name for o in outcomes], [o.doc for o in outcomes]))
    for o in outcomes:
        for line in _collective_lines(o.doc) + _localised_lines(o.doc):
            print(f"{line} [{o.scenario.transport.name}]")
        for warning in o.doc["provenance"]["warnings"]:
            print(f"  warning [{o.scenario.transport.name}]: {warning}")
    if out is not None:
        written = _write_outputs(out, outcomes, compare=True)
        print(f"  wrote {', '.join(written)} (+ CSVs)")
    return _exit_code(outcomes)


def compare_scenario(
    scenario_file: str,
    transports: list[str],
    *,
    overrides: list[str] | None = None,
    seed: int | None = None,
    out: str | None = None,
    progress: bool = False,
) -> int:
    """``openmrc compare`` from Python (what ``openmrc demo`` runs): the same checks,
    runs, printed table and files; returns the exit code."""
    args = argparse.Namespace(
        scenario=scenario_file,
        transports=",".join(transports),
        set=list(overrides or []),
        seed=seed,
        out=out,
        no_progress=not progress,
    )
    return _cmd_compare(args)


def _spec_from_text(text: str) -> ClosSpec:
    from ..scenario import ScenarioError, _fill

    if "=" not in text and Path(text).exists():
        from ..scenario import load

        return load(text).spec
    values: dict[str, object] = {}
    for part in filter(None, text.split(",")):
        key, sep, raw = part.partition("=")
        if not sep:
            raise ScenarioError(f"topology: {part!r} is not key=value")
        try:
            values[key.strip()] = int(raw) if raw.strip().lstrip("-").isdigit() else float(raw)
        except ValueError:
            raise ScenarioError(f"fabric.{key.strip()}: {raw!r} is not a number") from None
    spec = _fill(ClosSpec, values, "fabric")
    try:
        spec.validate()
    except ValueError as exc:
        raise ScenarioError(f"fabric: {exc}") from None
    return spec


def _cmd_topology(args: argparse.Namespace) -> int:
    spec = _spec_from_text(args.spec)
    topo = Topology(spec)
    if args.json:
        plan = topo.address_plan()
        if args.tables:
            plan["tables"] = {
                name: {f"{k:#06x}": v for k, v in t.items()} for name, t in topo.tables().items()
            }
        print(json.dumps(plan, indent=1))
    elif args.tables:
        print(topo.format_tables())
    else:
        print(
            f"{spec.hosts} hosts, {spec.planes} planes, {len(topo.switches)} switches, {len(topo.links)} links"
        )
        for sw in topo.switches[: args.limit]:
            print(f"  {sw.name:14} tier T{sw.tier}  plane {sw.plane}  uSID {sw.usid:#06x}")
        if len(topo.switches) > args.limit:
            print(f"  ... {len(topo.switches) - args.limit} more (--limit, --json, --tables)")
    return 0


def _cmd_paper(args: argparse.Namespace) -> int:
    """``openmrc paper``: every bundled published experiment, the table, paper.md/json, report."""
    from .. import paper

    chosen = paper.select(args.only)
    out = prepare_out(args.out)
    runner = paper.Runner(args.quick)
    outcomes = []
    for i, experiment in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {experiment.name} ...", file=sys.stderr, flush=True)
        outcomes.append(runner.run(experiment))
    print(paper.format_text(outcomes))
    if out is not None:
        written = paper.write(out, outcomes, args.quick)
        print(f"  wrote {', '.join(str(p) for p in written)}")
    return EXIT_OK if all(o.verdict.holds for o in outcomes) else EXIT_FLOW_FAILED


def _common_run_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario file, e.g. scenarios/t0-t1-link-failure.toml")
    p.add_argument(
        "--set",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="override a scenario value (TOML syntax), e.g. --set workload.size=1MiB "
        "--set faults[0].at_us=20; repeatable",
    )
    p.add_argument("--seed", type=int, help="override the scenario's seed")
    p.add_argument("--out", help="directory for results.json, CSVs and report.html (created first)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``run`` (alias ``sim``), ``compare`` and ``topology`` to the command line."""
    for name, text in (
        ("run", "run a simulation scenario file (TOML or JSON)"),
        ("sim", "the same as run (kept for old scripts)"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        _common_run_flags(p)
        p.add_argument(
            "--transport",
            choices=list(TRANSPORTS),
            help="override the scenario's transport (MRC, RoCEv2 with ECMP/PFC/DCQCN, IB-style)",
        )
        p.add_argument("--json", action="store_true", help="print results.json to stdout")
        p.add_argument(
            "--pcap", help="write a pcap of the hosts' traffic (tshark/Wireshark read it)"
        )
        p.add_argument("--pcap-hosts", help="comma-separated hosts to capture (default: all)")
        p.set_defaults(func=_cmd_run)
    c = sub.add_parser(
        "compare",
        help="run one scenario with several transports: one table, one report",
        description="The same fabric, workload and faults with each transport.",
    )
    _common_run_flags(c)
    c.add_argument(
        "--transports",
        default="mrc,roce",
        help="comma-separated, of mrc, roce, ib (default mrc,roce)",
    )
    c.set_defaults(func=_cmd_compare)
    pp = sub.add_parser(
        "paper",
        help="run the paper's published experiments: published, openmrc, shape holds",
        description="Every bundled published experiment (scenarios/paper/): a table of what "
        "the paper published, what openmrc measured, and whether the shape holds.",
    )
    pp.add_argument("--quick", action="store_true", help="reduced sizes (the tests' reductions)")
    pp.add_argument("--only", metavar="NAME[,NAME]", help="only these experiments")
    pp.add_argument("--out", help="directory for paper.md, paper.json, report.html (created first)")
    pp.set_defaults(func=_cmd_paper)
    t = sub.add_parser("topology", help="print a built fabric's address plan or uSID tables")
    t.add_argument(
        "spec", help="key=value list (planes=4,t0s=2,hosts_per_t0=2,t1s=2) or a scenario file"
    )
    t.add_argument("--tables", action="store_true", help="the static uSID forwarding tables")
    t.add_argument(
        "--json", action="store_true", help="JSON (address plan, and tables with --tables)"
    )
    t.add_argument("--limit", type=int, default=40, help="switches to list in the text summary")
    t.set_defaults(func=_cmd_topology)
