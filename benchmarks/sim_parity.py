"""Bit-for-bit parity of simulator results across performance changes.

A speed-up of the simulator must not change what it computes.  This script
runs a fixed set of scenarios (the small files in ``scenarios/`` with each
transport, a many-QP all-to-all, a collective, a run with random loss) and
writes each run's full results (``Result.as_dict()`` without the wall time) as
canonical JSON; ``--check DIR`` compares a new run against a saved one byte for
byte and names every case that differs.

    python benchmarks/sim_parity.py --save /tmp/parity-base      # before a change
    python benchmarks/sim_parity.py --check /tmp/parity-base     # after it
    python benchmarks/sim_parity.py --list
    python benchmarks/sim_parity.py --check-digests   # against the repository's baseline

The repository keeps one baseline as SHA-256 digests of each case's canonical
JSON (``benchmarks/parity-digests.json``, with the commit and the reason it was
last re-baselined): ``--check-digests`` names the cases whose results moved from
it (the JSON itself is large; save a directory with ``--save`` to see what
moved).  ``--save-digests REASON`` rewrites it, once per deliberate change of
behaviour, and says why.
    python benchmarks/sim_parity.py --ranks 2    # partitioned on 2 MPI ranks = sequential

``--ranks K`` runs the MRC cases in the ordinary sequential run (native when
built) and partitioned (:mod:`openmrc.sim.partition`, pure Python) on K ranks
under ``mpirun``, and names any case whose results differ (they must not:
docs/parallel.md).

(Run it from the repository root.  ``--only NAME`` runs one case.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: case name -> (scenario file, ``--set`` overrides, transport or None)
CASES: dict[str, tuple[str, list[str], str | None]] = {
    "permutation-64": ("scenarios/permutation-64.toml", [], None),
    "permutation-64-roce": ("scenarios/permutation-64-roce.toml", [], None),
    "permutation-64-ib": ("scenarios/permutation-64-roce.toml", [], "ib"),
    "incast-7to1": ("scenarios/incast-7to1.toml", [], None),
    "t0-t1-link-failure": ("scenarios/t0-t1-link-failure.toml", [], None),
    "silent-t1": ("scenarios/silent-t1.toml", ["workload.size=2MiB"], None),
    # many QPs per context: every host talks to every other
    "alltoall-16-64k": (
        "scenarios/paper/alltoall-64-mrc.toml",
        ["fabric.t0s=4", "fabric.hosts_per_t0=4", "fabric.t1s=4", "workload.size=1MiB"],
        None,
    ),
    "ring-allreduce-16-loss": (
        "scenarios/paper/ring-allreduce-64-mrc-loss0.1.toml",
        [
            "fabric.t0s=4",
            "fabric.hosts_per_t0=4",
            "fabric.t1s=4",
            "workload.size=1MiB",
            "workload.placement=[0,4,8,12,1,5,9,13,2,6,10,14,3,7,11,15]",
            "faults[0].probability=0.01",
        ],
        None,
    ),
    "ring-allreduce-16-roce": (
        "scenarios/paper/ring-allreduce-64-roce-16qp.toml",
        [
            "fabric.t0s=4",
            "fabric.hosts_per_t0=4",
            "fabric.t1s=4",
            "workload.size=1MiB",
            "workload.placement=[0,4,8,12,1,5,9,13,2,6,10,14,3,7,11,15]",
        ],
        None,
    ),
}


def run_case(name: str) -> str | None:
    """Run one case; its results as canonical JSON (wall time removed).  In a
    partitioned run (``openmrc.sim.partition.request``), None on ranks other than 0."""
    from openmrc.pipeline.run import load_scenario

    path, overrides, transport = CASES[name]
    scenario, _ = load_scenario(str(ROOT / path), overrides, transport=transport)
    exp = scenario.build()
    until = None if scenario.until_us is None else int(scenario.until_us * 1_000_000)
    result = exp.run(until)
    if result is None:
        return None
    doc = result.as_dict()
    doc.pop("wall_seconds")
    return json.dumps(doc, sort_keys=True, indent=0)


#: The cases a partitioned run supports (MRC; see openmrc.sim.partition).
PARTITIONED = [name for name, (_, _, transport) in CASES.items() if transport is None]
PARTITIONED = [n for n in PARTITIONED if n not in ("permutation-64-roce", "ring-allreduce-16-roce")]

MARK = "@@@parity "


def partitioned_child(names: list[str], partitioned: bool = True) -> None:
    """Run ``names`` partitioned over this process's MPI ranks (or alone), or in the
    ordinary sequential run; rank 0 prints each case's canonical JSON after a marker line."""
    from openmrc.sim import partition

    if partitioned:
        partition.request(partition.mpi_comm() or partition.LocalComm())
    for name in names:
        text = run_case(name)
        if text is not None:
            print(MARK + name)
            print(text, flush=True)


def check_ranks(ranks: int, names: list[str]) -> list[str]:
    """Each case in the sequential run and partitioned on ``ranks`` (mpirun): the cases
    that differ."""
    import os
    import subprocess

    out = {}
    for k in (1, ranks):
        env = dict(os.environ)
        if k == 1:  # the ordinary sequential run (the native kernel when built)
            cmd = [sys.executable, __file__, "--sequential-child", ",".join(names)]
        else:
            env["OPENMRC_PURE_PYTHON"] = "1"
            cmd = [sys.executable, __file__, "--partitioned-child", ",".join(names)]
            cmd = ["mpirun", "--oversubscribe", "-n", str(k), *cmd]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"{k} rank(s): the run failed:\n{proc.stderr.strip()[-2000:]}")
        got = {}
        for part in proc.stdout.split(MARK)[1:]:
            name, _, text = part.partition("\n")
            got[name] = text.strip()
        out[k] = got
        what = "sequential" if k == 1 else f"{k} ranks"
        print(f"{what}: {len(got)} cases ({time.perf_counter() - t0:.1f} s)", flush=True)
    bad = [n for n in names if out[1].get(n) is None or out[1].get(n) != out[ranks].get(n)]
    for n in names:
        verdict = "DIFFERS" if n in bad else "identical"
        print(f"{n}: {verdict} on {ranks} ranks and in the sequential run")
    return bad


#: The repository's parity baseline: each case's digest, the commit and the reason.
DIGESTS = ROOT / "benchmarks" / "parity-digests.json"


def digest(text: str) -> str:
    """The SHA-256 of one case's canonical JSON (hex)."""
    return hashlib.sha256(text.encode()).hexdigest()


def _head() -> str:
    proc = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    """Save or check the parity set."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--save", type=Path, help="write each case's results into this directory")
    mode.add_argument("--check", type=Path, help="compare each case with this saved directory")
    mode.add_argument("--list", action="store_true", help="list the cases")
    mode.add_argument(
        "--check-digests",
        action="store_true",
        help=f"compare each case with the repository's baseline ({DIGESTS.name})",
    )
    mode.add_argument(
        "--save-digests",
        metavar="REASON",
        help=f"rewrite the repository's baseline ({DIGESTS.name}), saying why",
    )
    mode.add_argument(
        "--ranks",
        type=int,
        metavar="K",
        help="partitioned over K MPI ranks (mpirun, pure Python) against the sequential run: "
        "the MRC cases must be identical (docs/parallel.md)",
    )
    mode.add_argument("--partitioned-child", help=argparse.SUPPRESS)
    mode.add_argument("--sequential-child", help=argparse.SUPPRESS)
    ap.add_argument("--only", action="append", choices=sorted(CASES), help="run only this case")
    args = ap.parse_args(argv)
    if args.partitioned_child:
        partitioned_child(args.partitioned_child.split(","))
        return 0
    if args.sequential_child:
        partitioned_child(args.sequential_child.split(","), partitioned=False)
        return 0
    if args.ranks is not None:
        if args.ranks < 2:
            ap.error("--ranks: compare at least 2 ranks with 1")
        names = [n for n in (args.only or PARTITIONED) if n in PARTITIONED]
        return 1 if check_ranks(args.ranks, names) else 0
    if args.list:
        for name, (path, overrides, transport) in CASES.items():
            print(f"{name}: {path} {' '.join(overrides)} {transport or ''}".rstrip())
        return 0
    names = args.only or list(CASES)
    if args.check_digests or args.save_digests:
        return _digests(names, args.save_digests)
    bad = []
    for name in names:
        t0 = time.perf_counter()
        text = run_case(name)
        assert text is not None
        wall = time.perf_counter() - t0
        if args.save:
            args.save.mkdir(parents=True, exist_ok=True)
            (args.save / f"{name}.json").write_text(text)
            print(f"{name}: saved ({wall:.1f} s)", flush=True)
        else:
            ref = (args.check / f"{name}.json").read_text()
            same = ref == text
            if not same:
                bad.append(name)
                (args.check / f"{name}.new.json").write_text(text)
            print(f"{name}: {'identical' if same else 'DIFFERS'} ({wall:.1f} s)", flush=True)
    if bad:
        print(f"differ: {', '.join(bad)} (new results beside the saved ones, *.new.json)")
        return 1
    return 0


def _digests(names: list[str], reason: str | None) -> int:
    """Check ``names`` against :data:`DIGESTS`, or (``reason``) rewrite it."""
    base = json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {"cases": {}}
    got = {}
    bad = []
    for name in names:
        t0 = time.perf_counter()
        text = run_case(name)
        assert text is not None
        got[name] = digest(text)
        wall = time.perf_counter() - t0
        if reason is None:
            same = base["cases"].get(name) == got[name]
            if not same:
                bad.append(name)
            print(f"{name}: {'identical' if same else 'DIFFERS'} ({wall:.1f} s)", flush=True)
        else:
            print(f"{name}: {got[name][:16]} ({wall:.1f} s)", flush=True)
    if reason is not None:
        doc = {"commit": _head(), "reason": reason, "cases": {**base["cases"], **got}}
        DIGESTS.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        print(f"wrote {DIGESTS}")
        return 0
    if bad:
        print(f"differ from {DIGESTS.name} ({base.get('commit')}): {', '.join(bad)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
