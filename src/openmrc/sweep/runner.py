"""Running a sweep's points on an executor, resumably.

:func:`run_point` is the unit of work: a pure function of a
:class:`~openmrc.sweep.spec.Point` (scenario data, overrides, transport, seed)
that returns the run's results record, or the error that stopped it.  It runs
wherever the executor puts it: a local process pool (:func:`process_pool`) or
Dask distributed (:func:`dask_executor`, the ``cluster`` extra) — both are
``concurrent.futures.Executor``\\ s.

:func:`run_sweep` submits the points whose file ``OUT/points/<fingerprint>.json``
does not hold a finished result, and writes each one there as it finishes
(write, then rename: a file is whole or absent).  A failed point is written
with its error and retried by the next run; Ctrl-C cancels what has not
finished and keeps what has.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..pipeline.run import UsageError
from .spec import Point

POINTS_DIR = "points"


def run_point(point: Point) -> dict[str, Any]:
    """Run one point: ``{"status": "ok", "record": results document}``, or
    ``{"status": "error", "error": one line, "traceback": ...}``, or
    ``{"status": "interrupted"}`` when the run was cut short by Ctrl-C (not a result)."""
    from ..pipeline.run import execute, scenario_from_data

    try:
        scenario, workload = scenario_from_data(
            point.data,
            list(point.overrides),
            point.seed,
            point.transport,
            name=point.name,
            base_dir=None if point.base_dir is None else Path(point.base_dir),
        )
        outcome = execute(
            scenario,
            scenario_file=point.scenario_file,
            overrides=list(point.overrides),
            workload=workload,
        )
    except Exception as exc:
        return {
            "status": "error",
            "error": f"{type(exc).__name__}: {' '.join(str(exc).split())}",
            "traceback": traceback.format_exc(),
        }
    if outcome.partial:
        return {"status": "interrupted"}
    return {"status": "ok", "record": outcome.doc}


# ----- point files -----------------------------------------------------------------
def point_path(out: Path, point: Point) -> Path:
    """Where ``point``'s result is kept."""
    return out / POINTS_DIR / f"{point.fingerprint}.json"


def read_point(out: Path, point: Point) -> dict[str, Any] | None:
    """``point``'s stored file, or None when there is none (or it cannot be read)."""
    try:
        doc = json.loads(point_path(out, point).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("fingerprint") == point.fingerprint else None


def write_point(out: Path, point: Point, result: dict[str, Any]) -> Path:
    """Store a finished point (atomically: a temporary file renamed over the name)."""
    from ..pipeline.results import now_utc

    doc = {
        "fingerprint": point.fingerprint,
        "params": point.params,
        "transport": point.transport,
        "seed": point.seed,
        "overrides": list(point.overrides),
        "finished_at": now_utc(),
        **result,
    }
    path = point_path(out, point)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")))
        tmp.replace(path)
    except BaseException:  # Ctrl-C or a full disk half-way: leave no partial file behind
        tmp.unlink(missing_ok=True)
        raise
    return path


# ----- executors -------------------------------------------------------------------
def _mp_context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


@contextmanager
def process_pool(workers: int | None = None) -> Iterator[tuple[Executor, str]]:
    """A local process pool of ``workers`` processes (default: the CPU count)."""
    n = workers or os.cpu_count() or 1
    pool = ProcessPoolExecutor(max_workers=n, mp_context=_mp_context())
    try:
        yield pool, f"a process pool of {n} worker{'s' if n != 1 else ''}"
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@contextmanager
def dask_executor(address: str, workers: int | None = None) -> Iterator[tuple[Executor, str]]:
    """Dask distributed: ``address`` ``local`` starts a ``LocalCluster`` of
    ``workers`` single-threaded worker processes (default: the CPU count);
    anything else is a scheduler address (``tcp://host:8786``), e.g. of a
    dask-jobqueue SLURM/PBS cluster."""
    try:
        import logging

        from distributed import Client, LocalCluster
    except ImportError:
        raise UsageError(
            "--dask: needs Dask distributed (pip install 'openmrc[cluster]')"
        ) from None
    cluster = None
    try:
        if address == "local":
            n = workers or os.cpu_count() or 1
            cluster = LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            client = Client(cluster)
            what = f"a Dask LocalCluster of {n} worker{'s' if n != 1 else ''}"
        else:
            if workers is not None:
                raise UsageError("--workers: with --dask ADDRESS the cluster decides its workers")
            try:
                client = Client(address, timeout=30)
            except (OSError, TimeoutError, ValueError) as exc:
                raise UsageError(
                    f"--dask: cannot reach the scheduler at {address} ({exc})"
                ) from None
            what = f"the Dask scheduler at {address}"
    except BaseException:
        if cluster is not None:
            cluster.close()
        raise
    try:
        yield client.get_executor(pure=False), what
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# ----- the sweep -------------------------------------------------------------------
@dataclass
class SweepOutcome:
    """What a :func:`run_sweep` call did."""

    total: int
    #: points found finished on disk and not run again
    skipped: int = 0
    #: points run now that finished (ok or failed)
    ran: int = 0
    #: points (run now) that failed with an error
    failed: int = 0
    interrupted: bool = False
    #: fingerprint -> error, of the points that failed now
    errors: dict[str, str] = field(default_factory=dict)


def pending_points(out: Path, points: list[Point]) -> tuple[list[Point], int]:
    """The points without a finished (``ok``) file, and how many have one."""
    todo = []
    done = 0
    for p in points:
        stored = read_point(out, p)
        if stored is not None and stored.get("status") == "ok":
            done += 1
        else:
            todo.append(p)
    return todo, done


#: (point, its result) as each finishes.
_Results = Generator[tuple[Point, dict[str, Any]], None, None]


def _in_process(todo: list[Point]) -> _Results:
    """Each point of ``todo`` run in this process, one after the other, as asked for."""
    for p in todo:
        yield p, run_point(p)


def _on_executor(todo: list[Point], executor: Executor) -> _Results:
    """Every point of ``todo`` submitted to ``executor`` (in order), yielded as each finishes."""
    futures: dict[Future[dict[str, Any]], Point] = {}
    try:
        for p in todo:
            futures[executor.submit(run_point, p)] = p
        for fut in as_completed(futures):
            try:
                result = fut.result()
            except Exception as exc:  # the worker itself died (or the cluster lost it)
                result = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            yield futures[fut], result
    finally:  # Ctrl-C (or the caller stopping early): what has not started never will
        for fut in futures:
            fut.cancel()


def run_sweep(
    points: list[Point],
    out: Path,
    executor: Executor | None,
    *,
    on_done: Callable[[Point, dict[str, Any]], None] | None = None,
    stop_children: bool = False,
) -> SweepOutcome:
    """Run every point of ``points`` not finished in ``out`` on ``executor`` (None:
    in this process, one after the other, in the order given), writing each as it
    finishes; ``on_done`` is called after each.  Ctrl-C cancels the rest (and with
    ``stop_children`` terminates this process's worker processes, so that a point
    half-way through does not hold the exit up)."""
    todo, done = pending_points(out, points)
    outcome = SweepOutcome(total=len(points), skipped=done)
    results = _in_process(todo) if executor is None else _on_executor(todo, executor)
    try:
        for p, result in results:
            if result.get("status") == "interrupted":
                raise KeyboardInterrupt
            write_point(out, p, result)
            outcome.ran += 1
            if result["status"] != "ok":
                outcome.failed += 1
                outcome.errors[p.fingerprint] = str(result.get("error"))
            if on_done is not None:
                on_done(p, result)
    except KeyboardInterrupt:
        outcome.interrupted = True
        results.close()
        if stop_children:
            for child in multiprocessing.active_children():
                child.terminate()
    return outcome


def progress_bar(total: int, completed: int, label: str, enabled: bool) -> Any:
    """A rich progress bar over points on stderr (None when not ``enabled``)."""
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(file=sys.stderr),
        transient=True,
    )
    progress.add_task(label, total=total, completed=completed)
    return progress
