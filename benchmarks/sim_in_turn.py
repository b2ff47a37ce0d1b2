"""One run of ``perm-N`` cut into K parts that run in turn in one process: does an
event get cheaper when the state it works on is a K-th of the run's?

The parts are the partitioned run's ranks (:mod:`openmrc.sim.partition`: rack groups,
conservative windows as wide as the lookahead, the packets that cross exchanged at
each window's end, the same events for every K).  Here the K ranks are threads of one
process passing one baton: a rank runs its window while the others wait, then hands
over at the exchange, so the core works on one part's hosts and switches at a time
(cache blocking in simulated time).  If what an event touches were reused within a
window, a part's events would cost what a run of a K-th of the hosts costs.

Printed per K: the events (the sequential run's, for every K), the CPU per event of
the windows' work alone (each thread's own CPU between exchanges) and of the
exchanges (packing and unpacking what crossed).  ``--k 1`` is the partitioned run's
own loop, the reference.

    python benchmarks/sim_in_turn.py --case perm-8192 --k 1,2,4,8 --until-us 30
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_speed


class Baton:
    """What K threads share: whose turn it is, the collectives' slots, a failure."""

    def __init__(self, k: int) -> None:
        self.k = k
        self.cv = threading.Condition()
        self.turn = 0
        self.slots: list[Any] = [None] * k
        self.results: list[Any] = [None] * k
        self.arrived = 0
        self.done = [False] * k
        self.failed = False


class BatonComm:
    """The communicator of one of K ranks in threads of one process (``partition.Comm``).

    A collective puts this rank's part in, hands the baton to the next rank and waits
    for its turn; the last rank to arrive works out every rank's result and hands the
    baton to rank 0.  So ranks run one at a time, in rank order, each up to its next
    collective.
    """

    def __init__(self, rank: int, baton: Baton) -> None:
        self.rank = rank
        self.size = baton.k
        self._b = baton

    def _wait(self) -> None:
        b = self._b
        while b.turn != self.rank and not b.failed:
            b.cv.wait()
        if b.failed:
            raise RuntimeError("another part failed")

    def start(self) -> None:
        """Wait for this rank's first turn."""
        with self._b.cv:
            self._wait()

    def _collective(self, part: Any, finish: Callable[[list[Any]], list[Any]]) -> Any:
        b = self._b
        with b.cv:
            b.slots[self.rank] = part
            b.arrived += 1
            if b.arrived == b.k:
                b.results = finish(b.slots)
                b.arrived = 0
                b.slots = [None] * b.k
                b.turn = 0
            else:
                b.turn = self.rank + 1
            b.cv.notify_all()
            self._wait()
            out = b.results[self.rank]
            b.results[self.rank] = None
            return out

    def alltoall(self, objs: list[Any]) -> list[Any]:
        """Rank j gets item j of every rank's list, in rank order."""
        k = self.size
        return self._collective(  # type: ignore[no-any-return]
            list(objs), lambda s: [[s[i][j] for i in range(k)] for j in range(k)]
        )

    def allgather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order."""
        return self._collective(obj, lambda s: [list(s) for _ in s])  # type: ignore[no-any-return]

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        """Every rank's ``obj`` at ``root``; None elsewhere."""
        return self._collective(  # type: ignore[no-any-return]
            obj, lambda s: [list(s) if j == root else None for j in range(len(s))]
        )

    def Abort(self, errorcode: int = 0) -> None:
        """Stop every rank."""
        self.fail()
        raise SystemExit(errorcode)

    def fail(self) -> None:
        """Wake every rank with the failure."""
        with self._b.cv:
            self._b.failed = True
            self._b.cv.notify_all()

    def finish(self) -> None:
        """This rank is done: the baton to the next rank still running."""
        b = self._b
        with b.cv:
            b.done[self.rank] = True
            for step in range(1, b.k):
                nxt = (self.rank + step) % b.k
                if not b.done[nxt]:
                    b.turn = nxt
                    break
            b.cv.notify_all()


def child(case: str, k: int, until_us: float) -> dict[str, Any]:
    """Build ``case`` as ``k`` parts, run them in turn to ``until_us``; the figures."""
    from openmrc.sim import partition

    baton = Baton(k)
    exps: list[partition.PartitionedExperiment] = []
    comms = [BatonComm(rank, baton) for rank in range(k)]
    for rank in range(k):
        partition.request(comms[rank])
        exp, _, _ = sim_speed.build(case, 2_000_000, 1, 1)
        assert isinstance(exp, partition.PartitionedExperiment)
        exps.append(exp)
    partition.request(None)
    cost = {"windows": 0.0, "exchange": 0.0}
    mark = threading.local()
    cls = partition.PartitionedExperiment
    prepare, exchange = cls._prepare_flows, cls._exchange

    def timed_prepare(self: Any) -> None:
        prepare(self)
        mark.t = time.thread_time()  # the first window starts

    def timed_exchange(self: Any, sim: Any, comm: Any, head: tuple[Any, ...]) -> list[Any]:
        # a window's work: this thread's CPU since the last exchange (its own only: the
        # other ranks run while it waits in the collective)
        t = time.thread_time()
        cost["windows"] += t - mark.t
        # the exchange: packing and unpacking (a thread waiting for its turn uses no CPU)
        statuses = exchange(self, sim, comm, head)
        mark.t = time.thread_time()
        cost["exchange"] += mark.t - t
        return statuses

    cls._prepare_flows = timed_prepare  # type: ignore[method-assign]
    cls._exchange = timed_exchange  # type: ignore[method-assign]
    out: list[Any] = [None] * k
    errors: list[BaseException] = []

    def body(rank: int) -> None:
        comm = comms[rank]
        try:
            comm.start()
            out[rank] = exps[rank].run(int(until_us * sim_speed.US))
        except BaseException as exc:  # every rank woken, the first error re-raised
            errors.append(exc)
            comm.fail()
        finally:
            comm.finish()

    gc.freeze()
    threads = [threading.Thread(target=body, args=(r,)) for r in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cls._prepare_flows, cls._exchange = prepare, exchange  # type: ignore[method-assign]
    if errors:
        raise errors[0]
    stats = exps[0].parallel_stats
    events = sum(r["events"] for r in stats["per_rank"])
    return {
        "case": case,
        "k": k,
        "until_us": until_us,
        "events": events,
        "windows": stats["windows"],
        "window_us": stats["window_ps"] / sim_speed.US,
        "packets_out": sum(r["packets_sent"] for r in stats["per_rank"]),
        "window_ns_per_event": round(cost["windows"] / events * 1e9, 1),
        "exchange_ns_per_event": round(cost["exchange"] / events * 1e9, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", default="perm-8192", help="perm-N")
    ap.add_argument("--k", default="1,2,4,8", help="parts, comma-separated")
    ap.add_argument("--until-us", type=float, default=30.0)
    ap.add_argument("--out", help="also write the runs here (JSON)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not args.case.startswith("perm-") or not args.case[5:].isdigit():
        ap.error(f"--case {args.case}: only perm-N")
    try:
        ks = [int(x) for x in args.k.split(",")]
    except ValueError:
        ap.error(f"--k {args.k}: comma-separated part counts")
    if not ks or min(ks) < 1:
        ap.error(f"--k {args.k}: every part count at least 1")
    if args.until_us <= 0:
        ap.error("--until-us: must be positive")
    if args.child is not None:
        print(json.dumps(child(args.case, args.child, args.until_us)))
        return 0
    runs = []
    for k in ks:  # each in a fresh interpreter: the same start for every K
        cmd = [sys.executable, __file__, "--case", args.case, "--until-us", str(args.until_us),
               "--child", str(k)]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "child failed",
                  file=sys.stderr)  # fmt: skip
            return 1
        row = json.loads(r.stdout.strip().splitlines()[-1])
        runs.append(row)
        print(
            f"{args.case} in {k} part(s): {row['events']:,} events, {row['windows']} windows of "
            f"{row['window_us']:g} us; windows {row['window_ns_per_event']:.0f} ns an event, "
            f"exchanges {row['exchange_ns_per_event']:.0f}",
            flush=True,
        )
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
