"""Simulator cost in instructions: a bisection aid that a loaded machine cannot blur.

CPU seconds on a shared machine move by tens of percent from run to run; the number
of instructions a run executes does not.  For each commit given (``--ref``, in the
order given), this counts, with ``valgrind --tool=cachegrind --cache-sim=no``, the
instructions of two processes of that commit's cached compiled build
(``benchmarks/speed_guard.py`` makes and keeps them; this script never builds):

* ``setup`` - the interpreter starting, the imports (pure-Python modules compiled
  from source: no ``.pyc`` is written), and the case's experiment being built
  (``sim_speed.build``), then exit;
* ``total`` - the same process running the case to its end (``sim_speed.py --child``).

``loop`` = total - setup is the event loop's share (with the result's summary), and
``loop / events`` the instructions per event.  Each row also shows the run's events,
packet-link traversals and median FCT, so the rows can be checked to do the same work.
``--annotate`` keeps the cachegrind files (``--keep DIR``) for ``cg_annotate``.

    python benchmarks/sim_icount.py --case perm-128 --ref 62e7d5a --ref 6ef0de8
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import speed_guard as guard

#: The set-up-only process: the benchmark's imports and build, nothing run.
_SETUP = (
    "import sys; sys.path.insert(0, 'benchmarks'); import sim_speed; "
    "sim_speed.build(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))"
)
_IREFS = re.compile(r"I\s+refs:\s+([\d,]+)")


def count(argv: list[str], cwd: Path, out: Path, nice: int) -> tuple[int, str]:
    """Instructions of one process under cachegrind, and its standard output."""
    cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}"]
    # no .pyc written (the cached trees have none): each run compiles the pure-Python
    # modules it imports from source, so reruns count the same
    env = {**guard.child_env(), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run(
        [*cmd, *argv], cwd=cwd, capture_output=True, text=True, env=env,
        preexec_fn=lambda: os.nice(nice),
    )  # fmt: skip
    if proc.returncode != 0:
        raise guard.GuardError(f"{' '.join(argv)} failed:\n{proc.stderr.strip()[-1500:]}")
    match = _IREFS.search(proc.stderr)
    if match is None:
        raise guard.GuardError(f"{' '.join(argv)}: no instruction count in valgrind's output")
    return int(match.group(1).replace(",", "")), proc.stdout


def measure(repo: Path, ref: str, args: argparse.Namespace, keep: Path) -> dict[str, object]:
    """One commit's row: set-up and total instructions, and the run's work."""
    try:
        sha = guard.resolve_ref(repo, ref)
    except guard.GuardError:
        raise guard.GuardError(f"--ref {ref}: not a commit in {repo}") from None
    home = guard.cache_root() / guard.ref_key(sha, guard.python_tag())
    python = home / "venv" / "bin" / "python"
    if not (home / guard.BUILT_MARKER).is_file() or not python.exists():
        raise guard.GuardError(f"--ref {ref}: no cached compiled build in {home}")
    tree = home / "src"
    extra = [str(args.size), str(args.seed), str(args.planes)]
    setup, _ = count(
        [str(python), "-c", _SETUP, args.case, *extra], tree,
        keep / f"cg.{sha[:7]}.setup", args.nice,
    )  # fmt: skip
    total, stdout = count(
        [str(python), "benchmarks/sim_speed.py", "--child", args.case, "--size", str(args.size),
         "--seed", str(args.seed), "--planes", str(args.planes)],
        tree, keep / f"cg.{sha[:7]}.total", args.nice,
    )  # fmt: skip
    run = json.loads(stdout.strip().splitlines()[-1])
    events = int(run["events"])
    date = guard.git(repo, "log", "-1", "--format=%cs", sha).strip()
    return {
        "commit": sha[:7],
        "date": date,
        "total": total,
        "setup": setup,
        "loop": total - setup,
        "per_event": round((total - setup) / events) if events else None,
        "events": events,
        "traversals": run["packet_link_traversals"],
        "median_fct_us": run["median_fct_us"],
        "all_ok": run["all_ok"],
    }


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, measure each commit in turn, print a row (JSON) per commit."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ref", action="append", required=True, help="a commit (repeatable)")
    parser.add_argument("--case", default="perm-128", help="a sim_speed.py case (perm-128)")
    parser.add_argument("--size", type=int, default=2_000_000, help="bytes per permutation flow")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--planes", type=int, default=1)
    parser.add_argument("--nice", type=int, default=10, help="niceness of the runs (10)")
    parser.add_argument("--keep", type=Path, help="keep the cachegrind files in this folder")
    args = parser.parse_args(argv)
    repo = Path(__file__).resolve().parent.parent
    try:
        guard.check_nice(args.nice)
        with tempfile.TemporaryDirectory() as tmp:
            keep = args.keep or Path(tmp)
            keep.mkdir(parents=True, exist_ok=True)
            for ref in args.ref:
                print(json.dumps(measure(repo, ref, args, keep.resolve())), flush=True)
    except guard.GuardError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
