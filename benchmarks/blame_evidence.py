"""What evidence blames each EV in a lossy run, loss by loss.

Runs one scenario with the transport's blame points observed: every packet the
fabric's wires lose (random loss or a silent link), every NACK, every RACK loss,
every gap (a transmission overtaken on its own EV by a later one that was
acknowledged) and every ``PathSet.on_loss`` with its reason.  Each gap that
blamed its EV is then classed by what really happened to the transmission it
names: lost on a wire, trimmed (NACKed), or arrived after all.  Prints one JSON
document::

    PYTHONPATH=src python benchmarks/blame_evidence.py \
        scenarios/paper/ring-allreduce-64-mrc-loss0.1.toml --seed 1 \
        --set 'workload.size="64MiB"' --set fabric.t0s=4 --set fabric.hosts_per_t0=4 \
        --set fabric.t1s=4 --set 'workload.placement=[0,4,8,12,1,5,9,13,2,6,10,14,3,7,11,15]'

(the 16-rank ring of ``openmrc paper --quick``).  Timings in the report are
microseconds after the transmission was sent (minimum, quartiles, maximum).

``--no-gap-blame`` runs the same scenario with the gaps' blames (and so their
siblings') switched off, to measure what they cost.  The observers wrap
methods of the pure-Python classes, so this runs the interpreted sources (the
worktree's ``src`` without compiled modules); with a compiled build it stops
with one line saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from typing import Any

os.environ["OPENMRC_PURE_PYTHON"] = "1"  # the fabric's pure-Python ports (read at import)

from openmrc.pipeline.run import UsageError, load_scenario
from openmrc.pipeline.scenario import ScenarioError
from openmrc.sim import port as portmod
from openmrc.transport import paths as pathsmod
from openmrc.transport import requester as reqmod
from openmrc.wire.packets import DataPacket, NackPacket

#: A transmission: (EV, PSN, send time in ps), as packets and the requester name it.
Tx = tuple[int, int, int]


class Observer:
    """Collects, per transmission, what happened to it and what it blamed."""

    def __init__(self, gap_blames: bool) -> None:
        self.gap_blames = gap_blames
        self.dropped: dict[Tx, int] = {}
        self.ctl_dropped: Counter[str] = Counter()
        self.nacked: dict[Tx, tuple[int, str]] = {}
        self.acked: dict[Tx, int] = {}
        self.rack: dict[Tx, int] = {}
        self.gap_made: dict[Tx, tuple[int, int, int]] = {}  # when; overtaker's PSN, sent
        self.blamed: list[tuple[Tx, int]] = []
        self.on_loss: Counter[str] = Counter()
        #: (requester, EV) -> its last transmission; transmission -> the next one's time.
        self.last_on_ev: dict[tuple[int, int], Tx] = {}
        self.next_on_ev: dict[Tx, int] = {}

    def install(self) -> None:
        """Wrap the blame points (pure-Python classes only)."""
        obs = self
        port_cls: Any = portmod.PyEgressPort
        req_cls: Any = reqmod.Requester
        paths_cls: Any = pathsmod.PathSet
        wire, check = port_cls._put_on_wire, req_cls._check_evidence
        order, mark = req_cls._on_order, req_cls._mark_lost
        nack, acked, loss = req_cls.on_nack, req_cls._ack_sacked, paths_cls.on_loss
        emit = req_cls._emit

        def emit_packet(
            self: Any, psn: int, op: Any, length: int, ev: int, now: int, retransmit: bool
        ) -> Any:
            pkt = emit(self, psn, op, length, ev, now, retransmit)
            key = (id(self), ev)
            prev = obs.last_on_ev.get(key)
            if prev is not None:
                obs.next_on_ev[prev] = pkt.ts
            obs.last_on_ev[key] = (ev, psn, pkt.ts)
            return pkt

        def put_on_wire(self: Any, pkt: Any, wb: int, now: int) -> bool:
            ok: bool = wire(self, pkt, wb, now)
            if not ok:
                if isinstance(pkt, DataPacket):
                    obs.dropped[(pkt.ev, pkt.psn, pkt.ts)] = now
                else:
                    obs.ctl_dropped[type(pkt).__name__] += 1
            return ok

        def check_evidence(self: Any, now: int) -> Any:
            for (psn, sent), (ev, due) in self.gaps.items():
                if due <= now and psn in self.unacked:
                    obs.blamed.append(((ev, psn, sent), now))
            return check(self, now)

        def on_order(self: Any, psn: int, ev: int, sent: int, now: int) -> None:
            before = set(self.gaps)
            order(self, psn, ev, sent, now)
            for rec, (e, _due) in self.gaps.items():
                if rec not in before:
                    obs.gap_made[(e, rec[0], rec[1])] = (now, psn, sent)

        def mark_lost(
            self: Any, psn: int, now: int, reason: str | None, front: bool = False
        ) -> None:
            if reason == "rack":
                obs.rack[(self.unacked.ev(psn), psn, self.unacked.sent(psn))] = now
            mark(self, psn, now, reason, front)

        def on_nack(self: Any, pkt: NackPacket, now: int) -> None:
            obs.nacked[(pkt.ev, pkt.psn, pkt.ts_echo)] = (now, pkt.reason.name)
            nack(self, pkt, now)

        def ack_sacked(self: Any, psn: int, op: Any, now: int, late: int, rack_xmit: int) -> Any:
            obs.acked[(self.unacked.ev(psn), psn, self.unacked.sent(psn))] = now
            return acked(self, psn, op, now, late, rack_xmit)

        def on_loss(self: Any, ev: int, now: int, reason: str) -> None:
            if reason == "loss without trim" and not obs.gap_blames:
                return
            obs.on_loss[reason] += 1
            loss(self, ev, now, reason)

        for mod in (portmod, reqmod, pathsmod):
            if not str(mod.__file__).endswith(".py"):
                raise SystemExit(
                    f"blame_evidence: {mod.__name__} is compiled ({mod.__file__}); run the "
                    "pure-Python sources (PYTHONPATH=src from a tree without compiled modules)"
                )
        port_cls._put_on_wire = put_on_wire
        req_cls._check_evidence = check_evidence
        req_cls._emit = emit_packet
        req_cls._on_order = on_order
        req_cls._mark_lost = mark_lost
        req_cls.on_nack = on_nack
        req_cls._ack_sacked = ack_sacked
        paths_cls.on_loss = on_loss

    def report(self) -> dict[str, Any]:
        """The JSON document: counts, each blamed gap's class, and timings (us)."""
        classes: Counter[str] = Counter()
        for tx, _now in self.blamed:
            if tx in self.dropped:
                classes["lost on a wire"] += 1
            elif tx in self.nacked:
                classes[f"NACKed {self.nacked[tx][1]}"] += 1
            elif tx in self.acked:
                classes["arrived"] += 1
            else:
                classes["unknown"] += 1
        made = [(tx, self.gap_made[tx]) for tx, _ in self.blamed if tx in self.gap_made]
        return {
            "data_lost_on_wires": len(self.dropped),
            "control_lost_on_wires": dict(self.ctl_dropped),
            "nacks": dict(Counter(r for _, r in self.nacked.values())),
            "losses_found_by_rack": sum(1 for tx in self.dropped if tx in self.rack),
            "on_loss_by_reason": dict(self.on_loss),
            "gap_blames": len(self.blamed),
            "gap_blames_by_fate": dict(classes),
            "gap_blames_after_rack_found_the_loss": sum(
                1 for tx, now in self.blamed if tx in self.rack and self.rack[tx] <= now
            ),
            "us_after_send (min, quartiles, max)": {
                "rack_found_a_wire_loss": _q(
                    [t - tx[2] for tx, t in self.rack.items() if tx in self.dropped]
                ),
                "next_send_on_the_ev_of_a_wire_loss": _q(
                    [self.next_on_ev[tx] - tx[2] for tx in self.dropped if tx in self.next_on_ev]
                ),
                "blamed_gap_overtaker_sent": _q([m[2] - tx[2] for tx, m in made]),
                "blamed_gap_made": _q([m[0] - tx[2] for tx, m in made]),
                "gap_blamed": _q([now - tx[2] for tx, now in self.blamed]),
            },
            "blamed_gap_overtaker_psn_distance": _q([m[1] - tx[1] for tx, m in made], scale=1),
        }


def _q(xs: list[int], scale: float = 1e6) -> list[float] | None:
    """Minimum, quartiles and maximum of ``xs`` (ps shown in us), None when empty."""
    if not xs:
        return None
    s = sorted(xs)
    return [round(s[int(f * (len(s) - 1))] / scale, 2) for f in (0, 0.25, 0.5, 0.75, 1)]


def main(argv: list[str] | None = None) -> int:
    """Run the scenario observed and print the report."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenario")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--set", action="append", default=[], dest="sets", metavar="KEY=VALUE")
    p.add_argument("--no-gap-blame", action="store_true", help="gaps blame no EV")
    a = p.parse_args(argv)
    obs = Observer(gap_blames=not a.no_gap_blame)
    obs.install()
    try:
        scenario, _ = load_scenario(a.scenario, a.sets, seed=a.seed)
    except (ScenarioError, UsageError, ValueError) as exc:
        raise SystemExit(f"blame_evidence: {exc}") from None
    exp = scenario.build()
    until = None if scenario.until_us is None else int(scenario.until_us * 1_000_000)
    result = exp.run(until)
    doc = obs.report()
    doc["collectives"] = result.collectives
    doc["evs_assumed_bad"] = sum(f.evs_assumed_bad for f in result.flows)
    print(json.dumps(doc, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
