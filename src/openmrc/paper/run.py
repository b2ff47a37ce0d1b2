"""Running ``openmrc paper`` at any size: every experiment over seeds, in parallel, resumably.

Each scenario run of an experiment (:class:`openmrc.paper.experiments.Run`) at a seed is a
sweep point (:class:`openmrc.sweep.spec.Point`): a pure function of the scenario
data, its overrides and the seed, fingerprinted by their resolved values and the
openmrc version.  The points run on the sweep runner
(:func:`openmrc.sweep.runner.run_sweep`): in this process, on a local process
pool, or on Dask.  Each is written to ``OUT/points/<fingerprint>.json`` as it
finishes, so a stop loses only the runs under way and a rerun skips every run
already written (same scenario, overrides and seed).  A run shared by several
experiments (the loss-free MRC ring, an incast victim alone) has one fingerprint
and runs once.

As soon as all the runs of an experiment at a seed are written its shape is
checked and ``OUT/experiments/<name>.seed<S>.json`` is written; the table (see
:mod:`openmrc.paper.experiments`) then says for how many seeds each shape holds.

Seeds: ``--seeds N`` runs each scenario file at its own seed and the ``N - 1``
next ones (every bundled file has ``seed = 1``: seeds 1 to N).  A run's result
depends only on its scenario and seed, never on which worker ran it or when:
serial and parallel runs give the same documents (``tests/paper/test_run.py``).

Points are submitted longest first (an estimate from the bytes the workload
moves and the QPs that carry them): on a few cores, a long run started last
would otherwise set the total time alone.  The order changes no result.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sweep.runner import POINTS_DIR, read_point, run_sweep
from ..sweep.spec import Point
from .experiments import PAPER_DIR, Doc, Outcome, PaperExperiment, Run, Verdict

EXPERIMENTS_DIR = "experiments"

#: Keys of a results document that depend on when and how long it ran, not on what
#: it simulated (left out when documents are compared).
TIMING_KEYS = ("start_time", "wall_seconds", "finished_at")


@dataclass(frozen=True)
class ParsedRun:
    """A run's scenario data, read and checked once for all its seeds."""

    data: dict[str, Any]
    overrides: tuple[str, ...]
    transport: str
    #: the resolved scenario values (openmrc.pipeline.results.resolved) at the file's seed
    resolved: dict[str, Any]
    cost: float


def parse_run(run: Run, quick: bool) -> ParsedRun:
    """``run``'s scenario file read, overridden and parsed, to plan with: what its
    points need (the data, the resolved values) and its cost estimate.  The experiment
    is not built (the workload's flows and collective schedule are what the plan reads;
    building the fabric and its flows was most of a full-size plan's cost): the point
    builds it when it runs, and reports a bad fault target or switch setting there."""
    from ..pipeline.results import resolved
    from ..pipeline.run import read_scenario_data, scenario_from_data

    path = run.path()
    if not path.exists():
        raise ValueError(f"{path}: the bundled paper scenario is missing")
    data = read_scenario_data(path)
    overrides = run.overrides(quick)
    scenario, workload = scenario_from_data(
        data, overrides, None, None, name=run.file, base_dir=PAPER_DIR, build=False
    )
    return ParsedRun(
        data,
        tuple(overrides),
        scenario.transport.name,
        resolved(scenario, workload),
        cost_estimate(scenario),
    )


def point_at(parsed: ParsedRun, run: Run, seed: int, index: int) -> Point:
    """``run`` at ``seed``: the seed is the only value that differs between a file's
    seeds (it is part of the fingerprint, as in ``openmrc sweep``)."""
    from ..sweep.spec import fingerprint

    values = {**parsed.resolved, "seed": seed}
    return Point(
        index=index,
        params={"run": run.file},
        transport=parsed.transport,
        seed=seed,
        overrides=parsed.overrides,
        fingerprint=fingerprint(values, list(parsed.overrides), parsed.transport, seed),
        name=run.file,
        scenario_file=f"scenarios/paper/{run.file}.toml",
        data=parsed.data,
        base_dir=str(PAPER_DIR),
    )


def make_point(run: Run, quick: bool, seed: int, index: int = 0) -> tuple[Point, float]:
    """``run`` at ``seed`` as a sweep point, and an estimate of its cost (for the order)."""
    parsed = parse_run(run, quick)
    return point_at(parsed, run, seed, index), parsed.cost


#: What a baseline run costs relative to MRC's, as ``BASELINE_WEIGHT + qps x
#: BASELINE_QP_WEIGHT`` for ``qps`` QPs per connection: the loss-free 64-rank ring
#: all-reduce on 16 ranks (the quick size, 16 MiB, compiled, two runs each) cost RoCE
#: 1 QP 1.3 and RoCE 16 QPs 1.8 times MRC's CPU seconds; this gives 1.28 and 1.78.
#: (A host scans only the QPs that were given a message, so QPs add little.)
BASELINE_WEIGHT = 1.25
BASELINE_QP_WEIGHT = 1 / 30

#: What random loss adds to a run's cost, per unit of loss probability: at 1 % loss the
#: full-size ring cost MRC 1.74 times its loss-free CPU seconds, RoCE 1 QP about 1.9
#: (resends, recovery, a longer run); 1 + 75 x probability gives 1.75 (1.075 at 0.1 %).
LOSS_WEIGHT = 75.0


def loss_probability(scenario: Any) -> float:
    """The largest random-loss probability of the scenario's ``link_loss`` faults (0: none)."""
    return max(
        (float(f.probability) for f in scenario.faults if f.kind == "link_loss"), default=0.0
    )


def cost_estimate(scenario: Any) -> float:
    """A rough relative cost of running ``scenario``: the bytes its workload moves,
    weighted for a baseline by its QPs per connection (:data:`BASELINE_WEIGHT`,
    :data:`BASELINE_QP_WEIGHT`) and by its random loss
    (:data:`LOSS_WEIGHT`).  Only orders the runs, longest first, so that on a few
    workers no long run starts last; never changes a result."""
    moved = sum(f.size for f in scenario.flows)
    moved += sum(t.size for c in scenario.collectives for t in c.collective.transfers)
    qps = getattr(scenario.transport, "qps", None) or 1
    weight = 1.0 if scenario.transport.name == "mrc" else BASELINE_WEIGHT + qps * BASELINE_QP_WEIGHT
    return float(moved) * weight * (1.0 + LOSS_WEIGHT * loss_probability(scenario))


@dataclass
class Job:
    """One experiment at one seed: the point of each of its runs (by role)."""

    experiment: PaperExperiment
    #: 0 for the scenario files' own seed, k for k above it
    seed_index: int
    points: dict[str, Point]

    @property
    def seed(self) -> int:
        """The seed of the job's first run (the table's label for it)."""
        return next(iter(self.points.values())).seed

    def filename(self) -> str:
        """Its file under ``OUT/experiments/``."""
        return f"{self.experiment.name}.seed{self.seed}.json"


@dataclass
class Plan:
    """Every job of a paper run and the distinct points they need, longest first."""

    jobs: list[Job]
    points: list[Point]
    costs: dict[str, float] = field(default_factory=dict)


def plan(experiments: list[PaperExperiment], quick: bool, seeds: int) -> Plan:
    """The jobs of ``experiments`` over ``seeds`` seeds and their distinct points."""
    if seeds < 1:
        raise ValueError(f"--seeds: must be >= 1, got {seeds}")
    jobs: list[Job] = []
    unique: dict[str, Point] = {}
    costs: dict[str, float] = {}
    parsed: dict[tuple[str, tuple[str, ...]], ParsedRun] = {}
    made: dict[tuple[str, tuple[str, ...], int], Point] = {}
    for k in range(seeds):
        for e in experiments:
            points = {}
            for role, run in e.runs.items():
                what = (run.file, tuple(run.overrides(quick)))
                if what not in parsed:
                    parsed[what] = parse_run(run, quick)
                seed = parsed[what].resolved["seed"] + k
                key = (*what, seed)
                if key not in made:
                    made[key] = point_at(parsed[what], run, seed, len(made))
                    costs[made[key].fingerprint] = parsed[what].cost
                p = made[key]
                unique.setdefault(p.fingerprint, p)
                points[role] = p
            jobs.append(Job(e, k, points))
    ordered = sorted(unique.values(), key=lambda p: (-costs[p.fingerprint], p.index))
    return Plan(jobs, ordered, costs)


def without_timing(doc: Any) -> Any:
    """``doc`` without the keys that say when and how long it ran (:data:`TIMING_KEYS`)."""
    if isinstance(doc, dict):
        return {k: without_timing(v) for k, v in doc.items() if k not in TIMING_KEYS}
    if isinstance(doc, list):
        return [without_timing(v) for v in doc]
    return doc


def check(job: Job, docs: dict[str, Doc] | None, errors: dict[str, str]) -> Verdict:
    """The job's verdict: its shape check on the runs' documents, or why there is none."""
    if docs is None:
        return Verdict(False, "run failed: " + "; ".join(f"{r}: {m}" for r, m in errors.items()))
    try:
        return job.experiment.check(docs)
    except Exception as exc:  # a check that cannot read the runs is a result too, not a crash
        return Verdict(False, f"the shape check failed: {type(exc).__name__}: {exc}")


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` whole or not at all (a temporary file renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass
class PaperRun:
    """What :func:`run` did: the outcome of each experiment (over its seeds, in table
    order; only those whose every seed finished) and the runs it did or skipped."""

    outcomes: list[Outcome]
    ran: int = 0
    skipped: int = 0
    failed: int = 0
    interrupted: bool = False
    #: jobs finished, of all jobs
    jobs_done: int = 0
    jobs_total: int = 0


class Session:
    """A paper run into ``out``: the plan, the runs ``out`` already holds (checked at
    once), and :meth:`execute` for the rest.  ``on_job(job, verdict, done, total)``
    is called as each experiment at a seed is checked."""

    def __init__(
        self,
        experiments: list[PaperExperiment],
        out: Path,
        *,
        quick: bool,
        seeds: int = 1,
        on_job: Callable[[Job, Verdict, int, int], None] | None = None,
    ) -> None:
        self.experiments = experiments
        self.out = out
        self.quick = quick
        self.seeds = seeds
        self.on_job = on_job
        self.plan = plan(experiments, quick, seeds)
        self._waiting: dict[str, list[Job]] = {}
        for job in self.plan.jobs:
            for point in job.points.values():
                self._waiting.setdefault(point.fingerprint, []).append(job)
        self._remaining = {
            id(job): len({pt.fingerprint for pt in job.points.values()}) for job in self.plan.jobs
        }
        self._docs: dict[str, Doc] = {}  # fingerprint -> document, while a job needs it
        self._errors: dict[str, str] = {}
        self._finished: set[str] = set()
        self.verdicts: dict[tuple[str, int], Verdict] = {}
        self._first_docs: dict[str, dict[str, Doc]] = {}
        self._walls: dict[str, float] = {}
        #: the points not yet written in ``out`` (the others are checked already)
        self.todo: list[Point] = []
        for point in self.plan.points:
            stored = read_point(out, point)
            if stored is not None and stored.get("status") == "ok":
                self._arrived(point, stored)
            else:
                self.todo.append(point)
        self.skipped = len(self.plan.points) - len(self.todo)

    def _finish_job(self, job: Job) -> None:
        failed = {
            role: self._errors[pt.fingerprint]
            for role, pt in job.points.items()
            if pt.fingerprint in self._errors
        }
        docs = (
            None
            if failed
            else {role: self._docs[pt.fingerprint] for role, pt in job.points.items()}
        )
        verdict = check(job, docs, failed)
        name = job.experiment.name
        self.verdicts[(name, job.seed_index)] = verdict
        if docs is not None:
            self._walls[name] = self._walls.get(name, 0.0) + sum(
                float(d["provenance"].get("wall_seconds") or 0.0) for d in docs.values()
            )
            if job.seed_index == 0:
                self._first_docs[name] = docs
        write_json(
            self.out / EXPERIMENTS_DIR / job.filename(),
            {
                "experiment": name,
                "seed": job.seed,
                "quick": self.quick,
                "holds": verdict.holds,
                "measured": verdict.measured,
                "numbers": verdict.numbers,
                "runs": {
                    role: {"point": f"{POINTS_DIR}/{pt.fingerprint}.json", "seed": pt.seed}
                    for role, pt in job.points.items()
                },
            },
        )
        if self.on_job is not None:
            self.on_job(job, verdict, len(self.verdicts), len(self.plan.jobs))

    def _arrived(self, point: Point, result: dict[str, Any]) -> None:
        fp = point.fingerprint
        if fp in self._finished:
            return
        self._finished.add(fp)
        if result.get("status") == "ok":
            self._docs[fp] = result["record"]
        else:
            self._errors[fp] = str(result.get("error"))
        jobs = self._waiting.get(fp, [])
        for job in jobs:
            self._remaining[id(job)] -= 1
            if self._remaining[id(job)] == 0:
                self._finish_job(job)
        if all(self._remaining[id(j)] == 0 for j in jobs):
            self._docs.pop(fp, None)  # no job waits for it any more

    def execute(self, executor: Executor | None, *, stop_children: bool = False) -> PaperRun:
        """Run the points not yet written (None executor: in this process) and collect
        each experiment's outcome over its seeds."""
        outcome = run_sweep(
            self.todo, self.out, executor, on_done=self._arrived, stop_children=stop_children
        )
        outcomes = []
        for e in self.experiments:
            per_seed = [
                (job.seed, self.verdicts[(e.name, job.seed_index)])
                for job in self.plan.jobs
                if job.experiment.name == e.name and (e.name, job.seed_index) in self.verdicts
            ]
            if len(per_seed) < self.seeds:
                continue  # not every seed finished (interrupted)
            outcomes.append(
                Outcome(
                    e,
                    per_seed[0][1],
                    self._first_docs.get(e.name, {}),
                    self._walls.get(e.name, 0.0),
                    self.quick,
                    seeds=per_seed,
                )
            )
        return PaperRun(
            outcomes,
            ran=outcome.ran,
            skipped=self.skipped,
            failed=outcome.failed,
            interrupted=outcome.interrupted,
            jobs_done=len(self.verdicts),
            jobs_total=len(self.plan.jobs),
        )


def run(
    experiments: list[PaperExperiment],
    out: Path,
    *,
    quick: bool,
    seeds: int = 1,
    executor: Executor | None = None,
    on_job: Callable[[Job, Verdict, int, int], None] | None = None,
) -> PaperRun:
    """:class:`Session` and :meth:`Session.execute` in one call."""
    session = Session(experiments, out, quick=quick, seeds=seeds, on_job=on_job)
    return session.execute(executor)


@contextmanager
def executor_for(
    workers: int | None, dask: str | None, todo: int
) -> Iterator[tuple[Executor | None, str]]:
    """The executor of ``--workers`` / ``--dask``: Dask when asked, else a local
    process pool of ``workers`` (default: the CPU count, at most ``todo``), and no
    executor at all (this process) for one worker."""
    from ..sweep.runner import dask_executor, process_pool

    if dask:
        with dask_executor(dask, workers) as pair:
            yield pair
        return
    n = min(workers or os.cpu_count() or 1, max(1, todo))
    if n == 1:
        yield None, "in this process, one after the other"
        return
    with process_pool(n) as pair:
        yield pair
