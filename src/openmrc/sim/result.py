"""What a simulator experiment measured, and its writers (JSON, CSV).

:class:`Result` is what :meth:`openmrc.sim.experiment.Experiment.run` returns, one
:class:`FlowResult` per flow; :meth:`Result.as_dict` is the JSON form that
``results.json`` extends (:mod:`openmrc.pipeline.results`), :meth:`Result.to_json` and
:meth:`Result.to_csv` write it.

A file stores each series (one sample per sample interval) sparsely:
:func:`store_series` defines the form, :func:`series_span`, :func:`series_values`
and :func:`read_series` read it (and the plain lists of older files).
"""

from __future__ import annotations

import csv
import json
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

#: The keys of a results document whose values map a name to a series (one sample
#: per sample interval), each stored as :func:`store_series` gives it.
SERIES_KEYS = ("goodput_gbps_series", "plane_tx_gbps_series", "ev_tx_gbps_series")


def store_series(values: list[float]) -> dict[str, Any] | list[float]:
    """A series (one float per sample interval) in its stored, sparse form.

    A series is stored as the JSON object ``{"length": N, "start": S, "values": V}``:
    ``N`` samples in all, every sample before index ``S`` and from ``S + len(V)`` on
    is ``0.0``, and ``V`` is the samples from ``S`` to the last non-zero one (zeros
    between them included).  A series of zeros only (or none) is ``{"length": N,
    "start": 0, "values": []}``.  :func:`series_span` and :func:`series_values` read
    it back (and also a plain JSON array, the form of older documents).

    It is lossless for the sampler's series, whose samples are floats: a sample is
    left out only when it is ``0.0`` (a positive zero, bit for bit; ``-0.0`` is
    kept), and read back as ``0.0``.  A transfer of a collective moves data for a
    small part of the run: stored in full, its series is mostly zeros (a 64-rank
    ring all-reduce of 64 MiB: 31 MB of document, 10 stored so).  A series with
    anything but numbers in it may be stored as it is, a plain list (both forms
    read back the same)."""
    n = len(values)
    if n and values[0] and values[-1]:  # no zero at either end (the common dense case)
        return {"length": n, "start": 0, "values": values}
    # the zero runs at either end, found at C speed: 0.0 is eight zero bytes
    try:
        raw = array("d", values).tobytes()
    except TypeError:
        return values
    lead = (n * 8 - len(raw.lstrip(b"\0"))) // 8
    if lead == n:
        return {"length": n, "start": 0, "values": []}
    trail = (n * 8 - len(raw.rstrip(b"\0"))) // 8
    kept = values if lead == trail == 0 else values[lead : n - trail]
    return {"length": n, "start": lead, "values": kept}


def series_span(stored: Any) -> tuple[int, list[float], int]:
    """``(start, values, length)`` of a stored series (:func:`store_series`'s form or
    a plain list of samples): sample ``start + i`` is ``values[i]``, every other
    sample below ``length`` is ``0.0``.  The one place that reads the stored form;
    ValueError when ``stored`` is neither form."""
    if isinstance(stored, list):
        return 0, stored, len(stored)
    if isinstance(stored, Mapping):
        try:
            start, values, length = stored["start"], stored["values"], stored["length"]
        except KeyError as exc:
            raise ValueError(f"a stored series without {exc.args[0]!r}") from None
        if (
            isinstance(start, int)
            and isinstance(length, int)
            and isinstance(values, list)
            and start >= 0
            and start + len(values) <= length
        ):
            return start, values, length
        raise ValueError(
            f"a stored series out of shape: start {start!r}, length {length!r}, "
            f"{type(values).__name__} values"
        )
    raise ValueError(f"a stored series is a list or an object, not {type(stored).__name__}")


def series_values(stored: Any) -> list[float]:
    """The full series (every sample) of a stored series (see :func:`series_span`)."""
    start, values, length = series_span(stored)
    if start == 0 and len(values) == length:
        return list(values)
    return [0.0] * start + values + [0.0] * (length - start - len(values))


def read_series(doc: Mapping[str, Any], key: str) -> dict[str, list[float]]:
    """Every series of a results document's ``key`` (one of :data:`SERIES_KEYS`) as
    full lists, by name; ``{}`` when the document has none."""
    return {name: series_values(s) for name, s in (doc.get(key) or {}).items()}


def stored(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (a :meth:`Result.as_dict`, or a document built on one) with every series
    of :data:`SERIES_KEYS` in its stored form (:func:`store_series`): what a results
    file holds.  A new dict; the lists in ``doc`` are left as they are (a stored
    series may share its samples' list)."""
    out = dict(doc)
    for key in SERIES_KEYS:
        if key in out:
            out[key] = {name: store_series(values) for name, values in out[key].items()}
    return out


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
        """JSON-able form, every series a plain list (:func:`stored` gives the form
        a file holds)."""
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
        """Write :meth:`as_dict` as JSON, its series stored sparsely (:func:`stored`)."""
        Path(path).write_text(json.dumps(stored(self.as_dict()), indent=1, sort_keys=True))

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
