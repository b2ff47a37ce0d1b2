"""What the fabric measured: port and switch counters, queue depth samples, a fault log.

Counters live on the objects (ports, switches, host ends) and cost nothing to
keep; :class:`Metrics` collects them into a JSON-able snapshot and writes JSON
or CSV.  Queue sampling is optional (:meth:`Metrics.sample_queues`) because it
costs one event per interval.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any, Protocol

from openmrc.sim._native import kernel
from openmrc.sim.port import COUNTERS, EgressPort


class MeasuredFabric(Protocol):
    """What :class:`Metrics` reads of a fabric (:class:`openmrc.sim.fabric.Fabric`
    and the baselines' fabrics): its simulator, egress ports, switches by name and
    the host ends per host and plane.  A protocol, so that the fabric may own its
    metrics without the two modules importing each other."""

    sim: Any
    ports: list[EgressPort]
    switches: dict[str, Any]
    host_ends: list[list[Any]]


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile ``p`` (0-100) of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))
    return ordered[int(rank) - 1]


def fct_summary(flows: list[Any]) -> dict[str, Any]:
    """FCT (us) and slowdown percentiles (p50, p99, max) over the finished flows.

    ``flows`` are :class:`~openmrc.sim.result.FlowResult` s (anything with
    ``fct_ps`` and ``slowdown``).
    """
    fcts = [f.fct_ps / 1e6 for f in flows if f.fct_ps is not None]
    slow = [f.slowdown for f in flows if f.slowdown is not None]
    out: dict[str, Any] = {"flows": len(flows), "finished": len(fcts)}
    for name, values in (("fct_us", fcts), ("slowdown", slow)):
        out[name] = {
            "p50": percentile(values, 50),
            "p99": percentile(values, 99),
            "max": max(values) if values else None,
        }
    return out


#: Above this many ports a snapshot lists only the ports that did something (sent,
#: trimmed, marked, dropped or lost a packet, or are down) and no per-host-end rows
#: (their totals instead): a row per port of 131,072 hosts on 8 planes is 4 million
#: dicts, minutes to make and gigabytes to write.  The totals still cover every port.
FULL_ROWS_LIMIT = 100_000


class Metrics:
    """Fault log, queue samples and counter snapshots of one :class:`Fabric`."""

    def __init__(self, fabric: MeasuredFabric) -> None:
        self.fabric = fabric
        #: ``{"time_ps", "kind", "target", ...detail}`` per fault applied, in time order.
        self.faults: list[dict[str, Any]] = []
        #: ``(time_ps, port name, data queue bytes, header queue bytes)``.
        self.queue_samples: list[tuple[int, str, int, int]] = []

    def record_fault(self, kind: str, target: str, **detail: Any) -> None:
        """Log that fault ``kind`` was applied to ``target`` now."""
        entry: dict[str, Any] = {"time_ps": self.fabric.sim.now, "kind": kind, "target": target}
        entry.update(detail)
        self.faults.append(entry)

    def sample_queues(
        self,
        interval_ps: int,
        ports: list[EgressPort] | None = None,
        until_ps: int | None = None,
        nonempty_only: bool = True,
    ) -> None:
        """Record queue depths every ``interval_ps`` from now.

        Samples ``ports`` (default: every port), skipping empty queues unless
        ``nonempty_only`` is false.  Sampling stops at ``until_ps``, or when it
        is the only thing left to simulate (so ``sim.run()`` still ends).
        """
        if interval_ps <= 0:
            raise ValueError(f"sample_queues: interval must be positive, got {interval_ps}")
        sim = self.fabric.sim
        watched = list(ports) if ports is not None else self.fabric.ports

        def tick() -> None:
            now = sim.now
            out = self.queue_samples
            for port in watched:
                d, p = port.data_bytes, port.prio_bytes
                if d or p or not nonempty_only:
                    out.append((now, port.name, d, p))
            nxt = now + interval_ps
            if (until_ps is None or nxt <= until_ps) and sim.pending() > len(sim.cancelled):
                sim.schedule(nxt, tick)

        sim.schedule(sim.now, tick)

    # ----- snapshots -------------------------------------------------------------
    def port_rows(self, ports: list[EgressPort] | None = None) -> list[dict[str, Any]]:
        """One dict per egress port (of ``ports``, default all): name, link, rate,
        counters, utilisation so far."""
        elapsed = self.fabric.sim.now
        rows = []
        for port in self.fabric.ports if ports is None else ports:
            row: dict[str, Any] = {
                "port": port.name,
                "link": port.link.name if port.link is not None else "",
                "gbps": port.rate_bps / 1e9,
                "up": port.up,
                "queue_bytes": port.data_bytes + port.prio_bytes,
            }
            row.update(port.counters())
            row["utilisation"] = round(port.utilisation(elapsed), 6)
            rows.append(row)
        return rows

    def snapshot(self, include_samples: bool = True) -> dict[str, Any]:
        """Everything as a JSON-able dict.

        A fabric of more than :data:`FULL_ROWS_LIMIT` ports lists only its active
        ports (``port_rows`` is then ``"active"``) and, instead of a row per host
        end (``hosts`` is then empty), their totals (``host_totals``).
        """
        fabric = self.fabric
        full = len(fabric.ports) <= FULL_ROWS_LIMIT
        totals, active = _totals(fabric.ports)
        rows = self.port_rows(ports=None if full else [fabric.ports[i] for i in active])
        switches = [
            {"switch": sw.name, "state": sw.state, **sw.counters()}
            for sw in fabric.switches.values()
        ]
        out: dict[str, Any] = {
            "time_ps": fabric.sim.now,
            "events": fabric.sim.events_run,
            "totals": totals,
            "bad_route": sum(sw.bad_route for sw in fabric.switches.values()),
            "discarded": sum(sw.discarded for sw in fabric.switches.values()),
            "ports": rows,
            "switches": switches,
            "faults": list(self.faults),
        }
        if full:
            out["hosts"] = [
                {
                    "host": h,
                    "plane": end.plane,
                    "received": end.received,
                    "undelivered": end.undelivered,
                }
                for h, ends in enumerate(fabric.host_ends)
                for end in ends
            ]
        else:
            out["hosts"] = []
            out["port_rows"] = "active"
            out["host_totals"] = {
                "received": sum(end.received for ends in fabric.host_ends for end in ends),
                "undelivered": sum(end.undelivered for ends in fabric.host_ends for end in ends),
            }
        if include_samples:
            out["queue_samples"] = [list(s) for s in self.queue_samples]
        return out

    # ----- export ----------------------------------------------------------------
    def to_json(self, path: str | Path) -> None:
        """Write :meth:`snapshot` as JSON."""
        Path(path).write_text(json.dumps(self.snapshot(), indent=1))

    def to_csv(self, directory: str | Path, prefix: str = "") -> list[Path]:
        """Write ports.csv, switches.csv, faults.csv and queues.csv into ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        snap = self.snapshot(include_samples=False)
        written = []
        tables: dict[str, list[dict[str, Any]]] = {
            "ports": snap["ports"],
            "switches": snap["switches"],
            "faults": snap["faults"],
            "queues": [
                {"time_ps": t, "port": n, "data_bytes": a, "header_bytes": b}
                for t, n, a, b in self.queue_samples
            ],
        }
        for name, rows in tables.items():
            written.append(write_csv_rows(d / f"{prefix}{name}.csv", rows))
        return written


def _totals(ports: list[EgressPort]) -> tuple[dict[str, int], list[int]]:
    """The counters summed over ``ports`` (``max_queue_bytes``: the max), and the
    indices of the ports that are down, sent, dropped or lost something, or hold a
    queue (natively when they are all native ports: a million in milliseconds)."""
    if kernel is not None:
        try:
            sums, active = kernel.port_totals(ports)
        except TypeError:
            pass
        else:
            return dict(zip(COUNTERS, sums, strict=True)), active
    totals = dict.fromkeys(COUNTERS, 0)
    active = []
    for i, port in enumerate(ports):
        for name in COUNTERS:
            value = getattr(port, name)
            if name == "max_queue_bytes":
                totals[name] = max(totals[name], value)
            else:
                totals[name] += value
        if not port.up or any(
            getattr(port, name)
            for name in (
                "tx_pkts",
                "drops_full",
                "drops_header",
                "drops_down",
                "lost",
                "lost_silent",
                "data_bytes",
                "prio_bytes",
            )
        ):
            active.append(i)
    return totals, active


def write_csv_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` as CSV, the columns the union of their keys in first-seen order."""
    seen: dict[str, None] = {}  # (a dict, not a list: a row can have 16,000 columns)
    for row in rows:
        for k in row:
            seen[k] = None
    keys = list(seen)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys or ["empty"])
        writer.writeheader()
        writer.writerows(rows)
    return path
