"""What a simulator experiment measured, and its writers (JSON, CSV).

:class:`Result` is what :meth:`openmrc.sim.experiment.Experiment.run` returns, one
:class:`FlowResult` per flow; :meth:`Result.as_dict` is the JSON form that
``results.json`` extends (:mod:`openmrc.pipeline.results`), :meth:`Result.to_json` and
:meth:`Result.to_csv` write it.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any


@dataclass
class FlowResult:
    """What happened to one flow."""

    name: str
    src: int
    dst: int
    size: int
    start_ps: int
    finish_ps: int | None
    ok: bool
    status: str
    message_finish_ps: list[int]
    retransmits: int
    trims: int
    nacks: int
    timeouts: int
    ecn_echoes: int
    evs_assumed_bad: int
    #: when the receiver had all the data (only tracked for flows others wait for,
    #: and collective flows; None otherwise or when it never did).
    rx_finish_ps: int | None = None
    #: when the flow actually started (later than ``start_ps`` if it waited for others).
    started_ps: int | None = None
    #: payload bytes the receiver took (all of them when finished; partial otherwise).
    bytes_received: int = 0
    #: goodput over the steady-state window (start-up excluded; None when the flow
    #: lasted too few sample intervals), and that window in us.
    steady_goodput_gbps: float | None = None
    steady_window_us: tuple[float, float] | None = None
    #: unloaded FCT: size at the connection's payload rate plus the path's base RTT.
    ideal_fct_ps: int | None = None
    #: the end of the run (for the partial goodput of unfinished flows).
    _end_ps: int | None = field(default=None, repr=False)

    @property
    def fct_ps(self) -> int | None:
        """Flow completion time (ps), None when it did not finish."""
        if self.finish_ps is None:
            return None
        return self.finish_ps - (self.start_ps if self.started_ps is None else self.started_ps)

    @property
    def goodput_gbps(self) -> float:
        """Bytes over completion time, in Gb/s (0 when unfinished)."""
        fct = self.fct_ps
        return self.size * 8 / fct * 1000 if fct else 0.0

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        # what asdict gives, without its deep copies (a flow's lists are ints and floats)
        out = {
            f.name: list(v) if isinstance(v := getattr(self, f.name), list | tuple) else v
            for f in fields(self)
            if f.name != "_end_ps"
        }
        out["fct_us"] = None if self.fct_ps is None else self.fct_ps / 1e6
        out["goodput_gbps"] = round(self.goodput_gbps, 3)
        out["partial_goodput_gbps"] = round(self.partial_goodput_gbps, 3)
        out["slowdown"] = self.slowdown
        if self.steady_window_us is not None:
            out["steady_window_us"] = list(self.steady_window_us)
        return out

    @property
    def partial_goodput_gbps(self) -> float:
        """Bytes received over the time since the flow started (for unfinished flows)."""
        if self.finish_ps is not None:
            return self.goodput_gbps
        if self.started_ps is None or self._end_ps is None or self._end_ps <= self.started_ps:
            return 0.0
        return self.bytes_received * 8 / (self._end_ps - self.started_ps) * 1000

    @property
    def slowdown(self) -> float | None:
        """FCT over the ideal FCT (None when unfinished)."""
        fct = self.fct_ps
        if fct is None or not self.ideal_fct_ps:
            return None
        return round(fct / self.ideal_fct_ps, 4)


@dataclass
class Result:
    """Everything an experiment measured."""

    flows: list[FlowResult]
    sim_end_ps: int
    wall_seconds: float
    events: int
    ev_events: list[dict[str, Any]]
    qp_events: list[dict[str, Any]]
    goodput_series: dict[str, list[float]]
    sample_interval_ps: int
    fabric: dict[str, Any]
    verified: bool | None
    #: what self-probe fault localisation named, and when (see openmrc.clustermapper).
    localised: list[dict[str, Any]] = field(default_factory=list)
    #: one summary per collective added (:meth:`Collective.summary`).
    collectives: list[dict[str, Any]] = field(default_factory=list)
    #: things the user should know: faults that never fired, a run cut by its time cap.
    warnings: list[str] = field(default_factory=list)
    #: FCT and slowdown percentiles over the finished flows (:func:`metrics.fct_summary`).
    fct_summary: dict[str, Any] = field(default_factory=dict)
    #: NIC egress Gb/s per plane per sample interval (all hosts), "plane0", ...
    plane_series: dict[str, list[float]] = field(default_factory=dict)
    #: data Gb/s sent per (host, EV) per sample interval, "h0:ev0x12"; only after
    #: :meth:`~openmrc.sim.experiment.Experiment.track_ev_activity` (MRC).
    ev_series: dict[str, list[float]] = field(default_factory=dict)
    #: sampling cost: ticks run, and ticks skipped while nothing moved.
    sampling: dict[str, int] = field(default_factory=dict)

    @property
    def all_ok(self) -> bool:
        """Every flow completed successfully (and verified, when payloads are real),
        folded collectives' transfers included (their step records count them)."""
        folded_ok = all(
            rec["ok"] == rec["transfers"]
            for c in self.collectives
            for rec in c.get("step_records", ())
        )
        return folded_ok and all(f.ok for f in self.flows) and self.verified is not False

    def aggregate_series(self) -> list[float]:
        """Total goodput (Gb/s) per sample interval, over all flows."""
        series = list(self.goodput_series.values())
        if not series:
            return []
        return [sum(v[i] for v in series if i < len(v)) for i in range(max(map(len, series)))]

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "all_ok": self.all_ok,
            "sim_end_us": self.sim_end_ps / 1e6,
            "wall_seconds": self.wall_seconds,
            "events": self.events,
            "verified": self.verified,
            "flows": [f.as_dict() for f in self.flows],
            "ev_events": self.ev_events,
            "qp_events": self.qp_events,
            "sample_interval_us": self.sample_interval_ps / 1e6,
            "goodput_gbps_series": self.goodput_series,
            "fabric": self.fabric,
            "localised": self.localised,
            "collectives": self.collectives,
            "warnings": self.warnings,
            "fct_summary": self.fct_summary,
            "plane_tx_gbps_series": self.plane_series,
            "ev_tx_gbps_series": self.ev_series,
            "sampling": self.sampling,
        }

    def to_json(self, path: str | Path) -> None:
        """Write :meth:`as_dict` as JSON."""
        Path(path).write_text(json.dumps(self.as_dict(), indent=1, sort_keys=True))

    def to_csv(self, directory: str | Path) -> list[Path]:
        """Write flows.csv, goodput.csv and ev_events.csv into ``directory``."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        written = []
        rows = [f.as_dict() for f in self.flows]
        for row in rows:
            row.pop("message_finish_ps")
        for name, data in (("flows.csv", rows), ("ev_events.csv", self.ev_events)):
            path = d / name
            with path.open("w", newline="") as fh:
                if data:
                    writer = csv.DictWriter(fh, fieldnames=list(data[0]))
                    writer.writeheader()
                    writer.writerows(data)
            written.append(path)
        path = d / "goodput.csv"
        with path.open("w", newline="") as fh:
            out = csv.writer(fh)
            names = list(self.goodput_series)
            out.writerow(["time_us", *names])
            length = max((len(v) for v in self.goodput_series.values()), default=0)
            for i in range(length):
                t = (i + 1) * self.sample_interval_ps / 1e6
                out.writerow(
                    [
                        t,
                        *(
                            self.goodput_series[n][i] if i < len(self.goodput_series[n]) else ""
                            for n in names
                        ),
                    ]
                )
        written.append(path)
        return written
