"""Where a paper run's time goes after the simulation: the results document's cost.

Runs one bundled paper scenario (``scenarios/paper/FILE.toml`` with the paper's
full-size overrides, or ``--quick``'s) in this process and measures, in CPU seconds
(``time.process_time``), each step ``openmrc paper`` takes with its results document
after the simulation ends:

- ``build``: the results document built from the simulator's result
  (:func:`openmrc.pipeline.results.build`, inside ``execute``);
- ``pickle`` / ``unpickle``: what a worker process sends the parent (``run_point``'s
  return value) and the parent receiving it;
- ``write``: the parent writing ``points/<fingerprint>.json``
  (:func:`openmrc.sweep.runner.write_point`);
- ``read``: reading that file back (a resumed ``openmrc paper``);
- ``check``: the experiment's shape check on the document (with the other runs it
  needs taken to be the same document: only the reading is timed);
- ``report``: the experiment's ``report.html`` plots from the document.

Also the document's size as written (MB) and as pickled.  Run it from the tree to
measure (``PYTHONPATH=src``); any tree whose ``openmrc`` has the same functions works::

    PYTHONPATH=src python benchmarks/resdoc_cost.py ring-allreduce-64-mrc alltoall-64-mrc \\
        --json benchmarks/results/resdoc-cost.json
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def cpu() -> float:
    """CPU seconds of this process so far."""
    return time.process_time()


def measure(file: str, quick: bool) -> dict[str, Any]:
    """Run the paper's run of ``file`` once and time what follows the simulation."""
    import openmrc.pipeline.results as results_mod
    from openmrc.paper import experiments as paper
    from openmrc.paper.run import make_point
    from openmrc.sweep.runner import read_point, run_point, write_point

    chosen = [
        (e, role, run)
        for e in paper.EXPERIMENTS
        for role, run in e.runs.items()
        if run.file == file
    ]
    if not chosen:
        raise SystemExit(f"{file}: no paper experiment runs this file")
    experiment, role, run = chosen[0]
    point, _ = make_point(run, quick, paper_seed(run, quick))
    spent: dict[str, float] = {}
    build = results_mod.build

    def timed_build(*args: Any, **kwargs: Any) -> Any:
        t = cpu()
        doc = build(*args, **kwargs)
        spent["build"] = cpu() - t
        return doc

    results_mod.build = timed_build  # type: ignore[assignment]
    try:
        t0 = cpu()
        result = run_point(point)
        spent["run_point"] = cpu() - t0
    finally:
        results_mod.build = build  # type: ignore[assignment]
    if result.get("status") != "ok":
        raise SystemExit(f"{file}: {result.get('error')}")
    t = cpu()
    blob = pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
    spent["pickle"] = cpu() - t
    t = cpu()
    back = pickle.loads(blob)
    spent["unpickle"] = cpu() - t
    with tempfile.TemporaryDirectory(prefix="resdoc-") as scratch:
        out = Path(scratch)
        t = cpu()
        path = write_point(out, point, back)
        spent["write"] = cpu() - t
        size = path.stat().st_size
        t = cpu()
        stored = read_point(out, point)
        spent["read"] = cpu() - t
    assert stored is not None
    doc = back["record"]
    docs = {r: doc for r in experiment.runs}
    t = cpu()
    try:
        experiment.check(docs)
    except Exception as exc:  # the other runs are stand-ins: only the reading counts
        print(f"  ({experiment.name}'s check on stand-ins: {type(exc).__name__})", file=sys.stderr)
    spent["check"] = cpu() - t
    t = cpu()
    outcome = paper.Outcome(experiment, paper.Verdict(True, "", {}), docs, 0.0, quick)
    paper.render_html([outcome], quick)
    spent["report"] = cpu() - t
    sim = spent["run_point"] - spent["build"]
    return {
        "run": file,
        "role": role,
        "experiment": experiment.name,
        "overrides": list(point.overrides),
        "seed": point.seed,
        "flows": len(doc.get("flows", ())),
        "document_mb": round(size / 1e6, 2),
        "pickled_mb": round(len(blob) / 1e6, 2),
        "cpu_seconds": {
            "simulation": round(sim, 2),
            **{k: round(v, 3) for k, v in spent.items() if k != "run_point"},
        },
    }


def paper_seed(run: Any, quick: bool) -> int:
    """The scenario file's own seed (the paper's first seed)."""
    from openmrc.paper.run import parse_run

    return int(parse_run(run, quick).resolved["seed"])


def main(argv: list[str] | None = None) -> int:
    """Measure each file given and print (and optionally save) the costs."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+", help="paper scenario files (scenarios/paper/FILE.toml)")
    p.add_argument("--quick", action="store_true", help="the --quick sizes")
    p.add_argument("--json", type=Path, help="also write the measurements here")
    a = p.parse_args(argv)
    import openmrc

    rows = []
    for f in a.files:
        row = measure(f, a.quick)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if a.json is not None:
        from openmrc.version import openmrc_version

        a.json.write_text(
            json.dumps(
                {
                    "what": "CPU seconds of each step after the simulation (resdoc_cost.py)",
                    "openmrc": openmrc.__file__,
                    "openmrc_version": openmrc_version(),
                    "compiled": bool(openmrc.compiled_modules()),
                    "load": os.getloadavg()[0],
                    "runs": rows,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
