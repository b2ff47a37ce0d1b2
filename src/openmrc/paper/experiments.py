"""The paper's published experiments, run and checked: ``openmrc paper``.

Each :class:`PaperExperiment` names the bundled scenario files it runs
(``scenarios/paper/``, by role: ``mrc``, ``alone``, ...), the ``--set``
overrides that make its reduced *quick* size, what the paper published, and a
*shape check*: a function of the runs' results documents
(:mod:`openmrc.pipeline.results`) that says whether openmrc shows the published shape,
with the numbers it measured.  ``openmrc paper`` runs them (:mod:`openmrc.paper.run`:
in parallel, resumably, over seeds) and prints and writes the table
(``paper.md``, ``paper.json``, ``report.html``);
``tests/paper/test_scenarios.py`` asserts the same checks at the quick size, so
the shapes are defined once, here.

A shape that does not hold is reported as such, with the measured numbers; it
is never hidden.  Runs shared by several experiments (the loss-free MRC ring,
the incast victim alone) are run once.
"""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..sim.result import series_span, series_values
from ..wire.packets import DATA_HEADER_BYTES

#: Where the bundled scenario files are (a source checkout or an editable install).
PAPER_DIR = Path(__file__).resolve().parents[3] / "scenarios" / "paper"

Doc = dict[str, Any]

#: Share of a 4 KiB-MTU MRC data packet's wire bytes that is payload (headers, framing).
MRC_PAYLOAD_SHARE = 4096 / (4096 + DATA_HEADER_BYTES + 38)


@dataclass(frozen=True)
class Run:
    """One scenario file run for an experiment: its overrides at full and quick size."""

    file: str
    #: ``--set`` overrides applied at both sizes (e.g. the incast victim alone).
    always: tuple[str, ...] = ()
    #: further ``--set`` overrides for ``--quick`` (the reduced size of the tests).
    quick: tuple[str, ...] = ()
    #: further ``--set`` overrides at the full size only (the file's own size is
    #: not the one the published shape is about: e.g. a bandwidth-bound message).
    full: tuple[str, ...] = ()

    def overrides(self, quick: bool) -> list[str]:
        """The ``--set`` assignments of this run at the given size."""
        return [*self.always, *(self.quick if quick else self.full)]

    def path(self) -> Path:
        """The scenario file."""
        return PAPER_DIR / f"{self.file}.toml"

    def command(self, quick: bool) -> str:
        """The ``openmrc run`` command line that makes this run on its own."""
        sets = " ".join(f"--set '{s}'" for s in self.overrides(quick))
        return f"openmrc run scenarios/paper/{self.file}.toml" + (f" {sets}" if sets else "")


@dataclass
class Verdict:
    """What a shape check found: whether the shape holds, and the numbers, in words too."""

    holds: bool
    measured: str
    numbers: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PaperExperiment:
    """One published result: the runs that reproduce it and the check of its shape."""

    name: str
    title: str
    #: what the paper published (Araujo et al. 2026), in a sentence.
    published: str
    #: the shape the check asserts, in words (thresholds included).
    shape: str
    runs: dict[str, Run]
    check: Callable[[dict[str, Doc]], Verdict]


# ----- measuring helpers -----------------------------------------------------------
def total_series(doc: Doc) -> tuple[float, list[float]]:
    """(sample interval in us, goodput summed over flows per interval, Gb/s)."""
    spans = [series_span(s) for s in (doc.get("goodput_gbps_series") or {}).values()]
    total = [0.0] * max((n for _, _, n in spans), default=0)
    # in flow order, each flow where it is non-zero: adding a zero sample changes no sum
    for start, values, _ in spans:
        for i, v in enumerate(values, start):
            total[i] += v
    return float(doc["sample_interval_us"]), total


def window_mean(doc: Doc, lo_us: float, hi_us: float) -> float:
    """Mean total goodput (Gb/s) over the sample intervals inside ``[lo_us, hi_us]``."""
    step, tot = total_series(doc)
    # interval i covers ((i, i+1] x step)
    vals = [g for i, g in enumerate(tot) if i * step >= lo_us and (i + 1) * step <= hi_us]
    if not vals:
        raise ValueError(f"no sample interval inside [{lo_us}, {hi_us}] us")
    return statistics.fmean(vals)


def window_min(doc: Doc, lo_us: float, hi_us: float, width_us: float) -> float:
    """The lowest mean total goodput over any ``width_us`` window inside ``[lo_us, hi_us]``."""
    step, tot = total_series(doc)
    k = max(1, round(width_us / step))
    idx = [i for i in range(len(tot)) if i * step >= lo_us and (i + 1) * step <= hi_us]
    vals = [tot[i : i + k] for i in idx if i + k - 1 <= idx[-1]]
    return min(statistics.fmean(v) for v in vals) if vals else window_mean(doc, lo_us, hi_us)


def fault_times_us(doc: Doc, kinds: Iterable[str] | None = None) -> list[float]:
    """Times (us) of the faults applied, optionally of the given kinds, sorted, unique."""
    want = None if kinds is None else set(kinds)
    return sorted(
        {f["time_ps"] / 1e6 for f in doc["fabric"]["faults"] if want is None or f["kind"] in want}
    )


def first_finish_us(doc: Doc) -> float:
    """The end of the steady part of a run (us): two sample intervals before the
    first flow completes (the end of the run when none did).

    A sender completes a round trip after its last byte arrived, and the sample
    interval with the last bytes is partial: the total has dropped by then.
    """
    done = [f["finish_ps"] / 1e6 for f in doc["flows"] if f["finish_ps"] is not None]
    end = min(done) if done else float(doc["sim_end_us"])
    return end - 2 * float(doc["sample_interval_us"])


def nic_delay_us(doc: Doc) -> float:
    """The scenario's port-status delay (``switches.nic_port_status_delay_ps``), in us."""
    return doc["provenance"]["resolved"]["switches"]["nic_port_status_delay_ps"] / 1e6


def busbw(doc: Doc) -> float:
    """The collective's bus bandwidth (Gb/s); 0 when it did not complete."""
    (c,) = doc["collectives"]
    return float(c.get("busbw_gbps") or 0.0)


@dataclass(frozen=True)
class RingRun:
    """A collective run to its end or to its time cap: its busbw, or that it did not finish.

    A run that did not finish by its cap has no busbw (how long its stall would
    have lasted is unknown), only an upper bound: the busbw it would have had had
    its last byte arrived at the cap, ``size x factor / cap`` (its real one is
    lower, finishing later or never).  A comparison that the bound settles (RoCE
    below 0.2 of MRC when even its bound is) is decided by it; any other is not.
    """

    #: nccl-tests' busbw (algbw x 2(n-1)/n for an all-reduce), Gb/s; None: not finished
    busbw: float | None
    #: the busbw when finished, else the upper bound at the cap (Gb/s)
    bound: float
    #: simulated time (us): the collective's time when finished, else where the run stopped
    time_us: float

    @property
    def finished(self) -> bool:
        """Whether the collective completed before the cap."""
        return self.busbw is not None

    def words(self, label: str) -> str:
        """``label 312 Gb/s`` or ``label not finished in 20000 us (busbw below 42 Gb/s)``."""
        if self.busbw is not None:
            return f"{label} {_gbps(self.busbw)}"
        return f"{label} not finished in {self.time_us:.0f} us (busbw below {_gbps(self.bound)})"


def ring_run(doc: Doc) -> RingRun:
    """The collective of ``doc`` as a :class:`RingRun` (see there)."""
    (c,) = doc["collectives"]
    if c.get("complete"):
        return RingRun(float(c["busbw_gbps"]), float(c["busbw_gbps"]), float(c["time_us"]))
    end_us = float(doc.get("sim_end_us") or 0.0)
    size, factor = float(c.get("size") or 0), float(c.get("busbw_factor") or 0.0)
    bound = size * 8 * factor / (end_us * 1e3) if end_us > 0 else float("inf")
    return RingRun(None, bound, end_us)


def _ring_numbers(**runs: RingRun) -> dict[str, Any]:
    """A verdict's numbers for ring runs: ``<name>_gbps`` (None: not finished) and, for a
    run that did not finish, ``<name>_bound_gbps``."""
    out: dict[str, Any] = {}
    for name, r in runs.items():
        out[f"{name}_gbps"] = r.busbw
        if not r.finished:
            # (infinite when the run stopped at time 0: no bound; JSON has no infinity)
            out[f"{name}_bound_gbps"] = r.bound if r.bound != float("inf") else None
    return out


def steady(doc: Doc, i: int) -> float:
    """Flow ``i``'s steady-state goodput (Gb/s; start-up left out), 0 when unknown."""
    return float(doc["flows"][i].get("steady_goodput_gbps") or 0.0)


def _clean(doc: Doc) -> tuple[bool, str]:
    """Every flow completed, none with a timeout or a failed QP: (ok, words)."""
    flows = doc["flows"]
    ok = doc["all_ok"] and all(f["finish_ps"] is not None for f in flows)
    timeouts = sum(f["timeouts"] for f in flows)
    return ok and timeouts == 0, (f"all flows ok: {'yes' if ok else 'NO'}, timeouts: {timeouts}")


def _gbps(x: float) -> str:
    return f"{x:.0f} Gb/s"


# ----- the shape checks ------------------------------------------------------------
def check_latency(d: dict[str, Doc]) -> Verdict:
    """Half the FCT of a 2 B WRITE within 10 % of 5.09 us (same T0) and 6.54 us (across T1)."""
    local, cross = (f["fct_us"] / 2 for f in d["run"]["flows"])
    holds = abs(local / 5.09 - 1) <= 0.1 and abs(cross / 6.54 - 1) <= 0.1
    return Verdict(
        holds,
        f"{local:.2f} us within a T0, {cross:.2f} us across T1",
        {"local_us": local, "cross_us": cross},
    )


def check_p2p_bandwidth(d: dict[str, Doc]) -> Verdict:
    """Each direction's steady goodput at least 93 % of the 800 Gb/s NIC."""
    doc = d["run"]
    rates = [steady(doc, i) for i in range(len(doc["flows"]))]
    nic = 800.0
    ok, words = _clean(doc)
    holds = ok and min(rates) >= 0.93 * nic
    return Verdict(
        holds,
        f"{' and '.join(_gbps(r) for r in rates)} each way "
        f"({100 * min(rates) / nic:.1f} % of 800; the header ceiling is "
        f"{100 * MRC_PAYLOAD_SHARE:.1f} %); {words}",
        {"gbps": rates, "share": min(rates) / nic},
    )


def check_drop_one_ev(d: dict[str, Doc]) -> Verdict:
    """Only EV 0x13 goes ASSUMED_BAD, within 4 base RTTs; goodput within 2 % of no drops."""
    doc, clean = d["drop"], d["clean"]
    bad = [e for e in doc["ev_events"] if e["new"] == "ASSUMED_BAD"]
    (start,) = fault_times_us(doc, ["ev_loss"])
    rtt_us = doc["provenance"]["resolved"]["switches"]["base_rtt_ps"] / 1e6
    after = bad[0]["time_us"] - start if bad else None
    g, g0 = doc["flows"][0]["goodput_gbps"], clean["flows"][0]["goodput_gbps"]
    holds = (
        doc["all_ok"]
        and [e["ev"] for e in bad] == [0x13]
        and after is not None
        and after <= 4 * rtt_us
        and g >= 0.98 * g0
    )
    return Verdict(
        holds,
        f"EVs ASSUMED_BAD: {[hex(e['ev']) for e in bad]}"
        + ("" if after is None else f", {after:.1f} us after the drops start")
        + f"; {g:.1f} Gb/s against {g0:.1f} without drops",
        {"bad_evs": [e["ev"] for e in bad], "bad_after_us": after, "gbps": g, "clean_gbps": g0},
    )


def check_ecn_two_flows(d: dict[str, Doc]) -> Verdict:
    """Flow 1's EV-A mapped out by ECN soon after flow 2 joins; both flows near peak after."""
    doc = d["run"]
    moved = [e for e in doc["ev_events"] if e["reason"] == "mapped out: ECN"]
    join = doc["flows"][1]["start_ps"] / 1e6
    peak = 100.0 * MRC_PAYLOAD_SHARE
    end = first_finish_us(doc)
    step = float(doc["sample_interval_us"])
    means = []
    for stored in doc["goodput_gbps_series"].values():
        series = series_values(stored)
        window = [
            g for i, g in enumerate(series) if i * step >= join + 150 and (i + 1) * step <= end
        ]
        means.append(statistics.fmean(window) if len(window) >= 5 else 0.0)
    when = moved[0]["time_us"] - join if moved else None
    holds = (
        doc["all_ok"]
        and [(e["host"], e["ev"]) for e in moved] == [(0, 0x00)]
        and when is not None
        and 0 < when <= 50
        and min(means) >= 0.9 * peak
    )
    return Verdict(
        holds,
        (
            "EV-A not mapped out by ECN"
            if when is None
            else f"flow 1's EV-A mapped out {when:.0f} us after flow 2 joins"
        )
        + f"; afterwards {' and '.join(_gbps(m) for m in means)} (peak {peak:.1f})",
        {"moved_after_us": when, "gbps_after": means, "peak_gbps": peak},
    )


def _before(doc: Doc, first_fault_us: float) -> float:
    """The level before the first fault (its first third left out: start-up)."""
    return window_mean(doc, first_fault_us / 3, first_fault_us)


def check_nic_links_down(d: dict[str, Doc]) -> Verdict:
    """After the k-th NIC port down, the level is (8 - k) / 8 of before, within 10 %."""
    doc = d["run"]
    downs = fault_times_us(doc, ["nic_port_down"])
    delay = nic_delay_us(doc)
    before = _before(doc, downs[0])
    ends = [*downs[1:], first_finish_us(doc)]
    ratios, dips = [], []
    for t, end in zip(downs, ends, strict=True):
        ratios.append(window_mean(doc, t + delay + 10, end) / before)
        dips.append(window_min(doc, t, t + delay + 10, 10) / before)
    want = [(8 - k) / 8 for k in range(1, len(downs) + 1)]
    ok, words = _clean(doc)
    holds = ok and all(abs(r / w - 1) <= 0.1 for r, w in zip(ratios, want, strict=True))
    return Verdict(
        holds,
        f"{_gbps(before)} before; after each port down "
        + ", ".join(f"{r:.2f}" for r in ratios)
        + " of it (one plane each: "
        + ", ".join(f"{w:.3f}" for w in want)
        + "); lowest 10 us before the NIC acts: "
        + ", ".join(f"{x:.2f}" for x in dips)
        + f"; {words}",
        {"before_gbps": before, "ratios": ratios, "expected": want, "dips": dips},
    )


def check_nic_flap(d: dict[str, Doc]) -> Verdict:
    """About half the level while 4 of 8 NIC ports are down (0.4-0.6), then back within 5 %."""
    doc = d["run"]
    downs = fault_times_us(doc, ["flap_down"])
    ups = fault_times_us(doc, ["flap_up"])
    delay = nic_delay_us(doc)
    before = _before(doc, downs[0])
    during = [window_mean(doc, t + delay + 10, u) / before for t, u in zip(downs, ups, strict=True)]
    # Full recovery: the last 100 us before the first flow ends (EVs blamed while
    # the ports were down come back through probes, with backoff: not at once).
    end = first_finish_us(doc)
    after = window_mean(doc, max(ups[-1] + delay + 10, end - 100), end) / before
    ok, words = _clean(doc)
    holds = ok and all(0.4 <= r <= 0.6 for r in during) and after >= 0.95
    return Verdict(
        holds,
        f"{_gbps(before)} before; while down "
        + ", ".join(f"{r:.2f}" for r in during)
        + f" of it; at the end {after:.2f}; {words}",
        {"before_gbps": before, "during": during, "after": after},
    )


def check_links_down_20(d: dict[str, Doc]) -> Verdict:
    """Mean level while the 20 links go down within 15 % of before; from 100 us after
    the last, within 5 %."""
    doc = d["run"]
    downs = fault_times_us(doc, ["link_down"])
    before = _before(doc, downs[0])
    during = window_mean(doc, downs[0], downs[-1]) / before
    after = window_mean(doc, downs[-1] + 100, first_finish_us(doc)) / before
    ok, words = _clean(doc)
    holds = ok and len(downs) == 20 and during >= 0.85 and after >= 0.95
    return Verdict(
        holds,
        f"{_gbps(before)} before; {during:.2f} of it while {len(downs)} links go down, "
        f"{after:.2f} after the last; {words}",
        {"before_gbps": before, "during": during, "after": after, "links": len(downs)},
    )


def check_links_flap_8(d: dict[str, Doc]) -> Verdict:
    """Mean level while 8 T0-T1 links flap within 10 % of before; after, within 3 %."""
    doc = d["run"]
    downs = fault_times_us(doc, ["flap_down"])
    ups = fault_times_us(doc, ["flap_up"])
    before = _before(doc, downs[0])
    during = window_mean(doc, downs[0], ups[-1]) / before
    after = window_mean(doc, ups[-1] + 50, first_finish_us(doc)) / before
    ok, words = _clean(doc)
    holds = ok and during >= 0.9 and after >= 0.97
    return Verdict(
        holds,
        f"{_gbps(before)} before; {during:.2f} of it while they flap, {after:.2f} after; {words}",
        {"before_gbps": before, "during": during, "after": after},
    )


def check_t0_down(d: dict[str, Doc]) -> Verdict:
    """After a T0 down (and the port status), the level is 7/8 of before, within 7 %."""
    doc = d["run"]
    (t,) = fault_times_us(doc, ["switch_down"])
    before = _before(doc, t)
    after = window_mean(doc, t + nic_delay_us(doc) + 10, first_finish_us(doc)) / before
    ok, words = _clean(doc)
    holds = ok and abs(after / (7 / 8) - 1) <= 0.07
    return Verdict(
        holds,
        f"{_gbps(before)} before, {after:.3f} of it after (one plane: 0.875); {words}",
        {"before_gbps": before, "after": after},
    )


def _check_t1(d: dict[str, Doc], kind: str) -> Verdict:
    doc = d["run"]
    (t,) = fault_times_us(doc, [kind])
    before = _before(doc, t)
    end = first_finish_us(doc)
    dip = window_min(doc, t, min(t + 100, end), 20) / before
    after = window_mean(doc, t + 100, end) / before
    bad = sum(f["evs_assumed_bad"] for f in doc["flows"])
    ok, words = _clean(doc)
    holds = ok and after >= 0.97 and bad > 0
    return Verdict(
        holds,
        f"{_gbps(before)} before; lowest 20 us after the failure {dip:.2f} of it, "
        f"from 100 us after {after:.3f}; {bad} EVs ASSUMED_BAD; {words}",
        {"before_gbps": before, "dip": dip, "after": after, "evs_assumed_bad": bad},
    )


def check_t1_down(d: dict[str, Doc]) -> Verdict:
    """No steady-state loss: from 100 us after the T1 goes down, within 3 % of before."""
    return _check_t1(d, "switch_down")


def check_t1_blackhole(d: dict[str, Doc]) -> Verdict:
    """A silent T1: EVs blamed and replaced, the level back within 3 %, no QP fails."""
    return _check_t1(d, "switch_blackhole")


def check_ring_roce_half(d: dict[str, Doc]) -> Verdict:
    """Ring all-reduce: RoCE 1 QP busbw at most 0.65 of MRC 1 QP's (both run to the end)."""
    roce, mrc = ring_run(d["roce-1qp"]), ring_run(d["mrc"])
    ratio = roce.bound / mrc.bound if mrc.finished and mrc.bound else None
    return Verdict(
        mrc.finished and 0 < roce.bound <= 0.65 * mrc.bound,
        f"busbw {roce.words('RoCE 1 QP')}, {mrc.words('MRC')}"
        + (f" (ratio {'below ' if not roce.finished else ''}{ratio:.2f})" if ratio else ""),
        {**_ring_numbers(roce=roce, mrc=mrc), "ratio": ratio if roce.finished else None},
    )


def check_ring_mrc_over_16qp(d: dict[str, Doc]) -> Verdict:
    """Ring all-reduce: MRC 1 QP busbw above RoCE with 16 QPs (both run to the end)."""
    roce, mrc = ring_run(d["roce-16qp"]), ring_run(d["mrc"])
    return Verdict(
        mrc.finished and mrc.bound > roce.bound > 0,
        f"busbw {mrc.words('MRC')}, {roce.words('RoCE 16 QPs')}",
        _ring_numbers(roce=roce, mrc=mrc),
    )


def check_ring_loss01(d: dict[str, Doc]) -> Verdict:
    """Ring all-reduce: MRC at 0.1 % loss within 15 % of loss-free MRC (both run to the end)."""
    lossy, clean = ring_run(d["mrc-loss0.1"]), ring_run(d["mrc"])
    ratio = lossy.bound / clean.bound if lossy.finished and clean.finished and clean.bound else None
    return Verdict(
        ratio is not None and ratio >= 0.85,
        f"busbw {lossy.words('MRC')} at 0.1 % loss, {clean.words('MRC')} without"
        + (f" ({ratio:.2f})" if ratio is not None else ""),
        {**_ring_numbers(lossy=lossy, clean=clean), "ratio": ratio},
    )


def _roce_unusable_at_1pct(run: str, label: str) -> Callable[[dict[str, Doc]], Verdict]:
    """Ring all-reduce at 1 % loss: RoCE run ``run`` below 0.2 of MRC's busbw, each run
    to the end of the collective; a RoCE run that did not finish by its cap holds when
    even its upper bound (:class:`RingRun`) is below 0.2 of MRC's busbw."""

    def check(d: dict[str, Doc]) -> Verdict:
        roce, mrc = ring_run(d[run]), ring_run(d["mrc-loss1"])
        ratio = roce.bound / mrc.bound if mrc.finished and mrc.bound else None
        return Verdict(
            ratio is not None and ratio < 0.2,
            f"busbw at 1 % loss: {roce.words(label)}, {mrc.words('MRC')}"
            + (
                f" (ratio {'below ' if not roce.finished else ''}{ratio:.2f})"
                if ratio is not None
                else ""
            ),
            {**_ring_numbers(roce=roce, mrc=mrc), "ratio": ratio if roce.finished else None},
        )

    return check


#: Ring all-reduce at 1 % loss: RoCE 1 QP (16 QPs) below 0.2 of MRC.
check_ring_loss1 = _roce_unusable_at_1pct("roce-1qp-loss1", "RoCE 1 QP")
check_ring_loss1_16qp = _roce_unusable_at_1pct("roce-16qp-loss1", "RoCE 16 QPs")


def check_alltoall(d: dict[str, Doc]) -> Verdict:
    """All-to-all: MRC busbw above both RoCE 1 QP and RoCE 16 QPs; and, as nothing is
    lost in this fabric, MRC blames no path (every QP starting at once reorders its
    first window: RACK must not take that for loss)."""
    mrc, r1, r16 = busbw(d["mrc"]), busbw(d["roce-1qp"]), busbw(d["roce-16qp"])
    blamed = sum(int(f.get("evs_assumed_bad") or 0) for f in d["mrc"]["flows"])
    return Verdict(
        mrc > max(r1, r16) and blamed == 0,
        f"busbw MRC {_gbps(mrc)}, RoCE 1 QP {_gbps(r1)}, RoCE 16 QPs {_gbps(r16)}; "
        f"MRC blamed {blamed} EVs",
        {"mrc_gbps": mrc, "roce_1qp_gbps": r1, "roce_16qp_gbps": r16, "evs_blamed": blamed},
    )


def _victim(doc: Doc) -> float:
    victim = doc["flows"][-1]
    if (victim["src"], victim["dst"]) != (13, 1):
        raise ValueError(f"the victim flow is 13 -> 1, not {victim['src']} -> {victim['dst']}")
    return float(victim.get("steady_goodput_gbps") or 0.0)


def _check_victim(d: dict[str, Doc], lo: float, hi: float, what: str) -> Verdict:
    with_incast, alone = _victim(d["incast"]), _victim(d["alone"])
    ratio = with_incast / alone if alone else 0.0
    return Verdict(
        d["incast"]["all_ok"] and lo <= ratio <= hi,
        f"victim {_gbps(with_incast)} with the incast, {_gbps(alone)} alone ({ratio:.2f}; {what})",
        {"victim_gbps": with_incast, "alone_gbps": alone, "ratio": ratio},
    )


def check_victim_mrc(d: dict[str, Doc]) -> Verdict:
    """MRC: the victim within 10 % of its rate alone."""
    return _check_victim(d, 0.9, 10.0, "shape: >= 0.9")


def check_victim_pfc(d: dict[str, Doc]) -> Verdict:
    """RoCE with PFC only: the victim below half of its rate alone."""
    return _check_victim(d, 0.0, 0.5, "shape: < 0.5")


def check_victim_dcqcn_1qp(d: dict[str, Doc]) -> Verdict:
    """DCQCN, 1 QP: the victim loses about 25 % (0.6-0.9 of its rate alone)."""
    return _check_victim(d, 0.6, 0.9, "shape: 0.6-0.9, the paper's -25 %")


def check_victim_dcqcn_8qp(d: dict[str, Doc]) -> Verdict:
    """DCQCN, 8 QPs: the victim well below its rate alone (dips to a quarter): < 0.75."""
    return _check_victim(d, 0.0, 0.75, "shape: < 0.75")


def _perm_line(d: dict[str, Doc], role: str) -> list[float]:
    return sorted(steady(d[role], i) for i in range(len(d[role]["flows"])))


def check_permutation(d: dict[str, Doc]) -> Verdict:
    """RoCE 1 QP uneven (slowest <= 0.6, fastest >= 0.9 of line); MRC every flow >= 0.9."""
    roce, mrc = _perm_line(d, "roce-1qp"), _perm_line(d, "mrc")
    line = float(d["mrc"]["provenance"]["resolved"]["fabric"]["host_gbps"])
    roce_line = line * 0.97  # RoCEv2's payload share at a 4 KiB MTU (smaller headers)
    mrc_line = line * MRC_PAYLOAD_SHARE
    holds = roce[0] <= 0.6 * roce_line and roce[-1] >= 0.9 * roce_line and mrc[0] >= 0.9 * mrc_line
    return Verdict(
        holds,
        f"RoCE 1 QP flows {roce[0]:.0f}-{roce[-1]:.0f} Gb/s, MRC {mrc[0]:.0f}-{mrc[-1]:.0f} "
        f"(payload line rate {roce_line:.0f} / {mrc_line:.0f})",
        {"roce_gbps": roce, "mrc_gbps": mrc},
    )


def check_permutation_8qp(d: dict[str, Doc]) -> Verdict:
    """RoCE 8 QPs under PFC barely helps: slowest flow <= 0.75 of line; MRC every flow >= 0.9."""
    roce, mrc = _perm_line(d, "roce-8qp"), _perm_line(d, "mrc")
    line = float(d["mrc"]["provenance"]["resolved"]["fabric"]["host_gbps"])
    roce_line, mrc_line = line * 0.97, line * MRC_PAYLOAD_SHARE
    return Verdict(
        roce[0] <= 0.75 * roce_line and mrc[0] >= 0.9 * mrc_line,
        f"RoCE 8 QPs flows {roce[0]:.0f}-{roce[-1]:.0f} Gb/s, MRC {mrc[0]:.0f}-{mrc[-1]:.0f} "
        f"(payload line rate {roce_line:.0f} / {mrc_line:.0f})",
        {"roce_gbps": roce, "mrc_gbps": mrc},
    )


# ----- the experiments -------------------------------------------------------------
#: The ring all-reduces' quick size: 16 ranks on 4 T0s x 4 hosts, 4 T1s, placed so that
#: every hop crosses T0s (the all-to-all's reduction: with 2 T0s too few cross-T0 flows
#: collide on RoCE's ECMP uplinks).  The quick ring sizes are twice those of the 8-rank
#: ring used until 2026-11-27, so that each step moves as much (docs/paper.md).
QUICK_RING = (
    "fabric.t0s=4",
    "fabric.hosts_per_t0=4",
    "fabric.t1s=4",
    "workload.placement=[0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15]",
)
#: The all-to-all cut to 16 ranks on 4 T0s x 4 hosts, 4 T1s (its quick size, public for
#: openmrc.paper.figures).  With only 2 T0s (8
#: ranks) the cross-T0 transfers are too few to collide on RoCE's ECMP uplinks and the
#: fabric limits nobody; with 4 T0s they do, as on the paper's 64-GPU fabric.
QUICK_A2A = ("fabric.t0s=4", "fabric.hosts_per_t0=4", "fabric.t1s=4")
#: The full-size all-to-all (64 ranks) at 64 MiB, 1 MiB to every peer: the paper's
#: bandwidth-bound regime, where its curves separate ("the difference is greater in
#: the regime that is bandwidth-bound").  The files' own 4 MiB (one 32 KiB chunk per
#: peer and p2p channel) is an open-loop burst that no QP's window limits; there
#: the three are within a few per cent (docs/paper.md: measured, and why).
A2A_FULL = ('workload.size="64MiB"',)
#: 100G links and 4 MiB flows instead of 400G and 16 MiB: same shape, 16x fewer packets.
_INCAST_QUICK = (
    "fabric.host_gbps=100",
    "fabric.fabric_gbps=100",
    *(f'workload.flows[{i}].size="4MiB"' for i in range(8)),
)
_VICTIM_ALONE = ('workload.flows=[{src = 13, dst = 1, size = "16MiB"}]',)
_VICTIM_ALONE_QUICK = (
    "fabric.host_gbps=100",
    "fabric.fabric_gbps=100",
    'workload.flows[0].size="4MiB"',
)
_BIDIR_32 = ('workload.flows[0].size="32MiB"', 'workload.flows[1].size="32MiB"')


#: The full-size ring all-reduces (64 ranks, 400 Gb/s per NIC) run to the end of the
#: collective at 64 MiB, the smallest size in the paper's bandwidth-bound regime: a ring
#: step moves size / 128 = 512 KiB per channel, its two channels share the NIC, so a
#: step's bytes take about 21 us at 400 Gb/s against about 6.5 us of one-way latency
#: (the files' own 16 MiB: 5 us against the same 6.5, latency-bound).  The whole
#: all-reduce moves 8 GiB through the simulator (126 steps, about 3.5 ms loss-free);
#: 256 MiB would be four times that for a step time that is already over three times
#: the latency.  A run still going at its cap is reported as not finished.
RING_FULL = ('workload.size="64MiB"',)

#: The full-size ring of the 0.1 % loss row: 256 MiB, the paper's larger messages.  The
#: paper says MRC retransmits fast enough that 0.1 % loss has little impact "with large
#: message sizes", and that at smaller ones tail losses cannot be masked (its Figure 16
#: runs from 4 MB to 16 GB).  At 0.1 % nearly every step of the 64-rank ring has a loss,
#: and a loss costs its step about one recovery whatever the size: about 6 us of a 25 us
#: step at 64 MiB (MRC keeps 0.81-0.84 of loss-free), of a 95 us step at 256 MiB (0.94-0.95;
#: docs/paper.md).  Four times 64 MiB's cost per run.
RING_LARGE = ('workload.size="256MiB"',)

#: The lossy rings' cap at full size (simulated us).  The files' own 20 ms cap cannot
#: decide the 1 % rows at 64 MiB: any run that finishes by it has a busbw of at least
#: 64 MiB x 2(n-1)/n / 20 ms = 52.9 Gb/s, and an unfinished one is only known to be
#: below that, while the shape asks RoCE below 0.2 of MRC's busbw at 1 % (0.2 of about
#: 190 Gb/s).  At 50 ms the bound is 21.1 Gb/s, under 0.2 even of the third of the
#: loss-free busbw (about 333 Gb/s) that the paper says MRC keeps.  A run that finishes
#: earlier costs nothing more.
RING_LOSSY_CAP_US = 50_000


def ring_lossy_cap_us(size_bytes: int) -> int:
    """The cap (simulated us) of a lossy full-size ring all-reduce of ``size_bytes``:
    :data:`RING_LOSSY_CAP_US` up to 64 MiB, and from there scaled with the message, so
    that the busbw bound of a run not finished by it stays the same 21.1 Gb/s at every
    size (a 256 MiB ring moves four times the bytes of a 64 MiB one; at 50 ms a run
    not finished would only be known below 84 Gb/s, which decides nothing at 1 %)."""
    return RING_LOSSY_CAP_US * max(1, -(-size_bytes // (64 << 20)))


def _ring(file: str, size: str, full_size: tuple[str, ...] = RING_FULL) -> Run:
    """A ring all-reduce file: the quick reduction at ``size``, ``full_size`` at full
    size (a lossy file with :data:`RING_LOSSY_CAP_US` as its cap); both run to the end of
    the collective (the quick size under the lossy files' own 20 ms cap)."""
    full: tuple[str, ...] = full_size
    if "-loss" in file:
        full = (*full_size, f"run.until_us={RING_LOSSY_CAP_US}")
    return Run(file, quick=(*QUICK_RING, f'workload.size="{size}"'), full=full)


def _incast(file: str) -> dict[str, Run]:
    """The incast file as it is, and its victim flow alone (the same at quick size)."""
    return {
        "incast": Run(file, quick=_INCAST_QUICK),
        "alone": Run(file, always=_VICTIM_ALONE, quick=_VICTIM_ALONE_QUICK),
    }


#: The DCQCN 1-QP incast is long (128 MiB per incast flow, a 256 MiB victim of about 10 ms):
#: DCQCN recovers from the incast's start-up in milliseconds (5-50 Mb/s steps, 300 us
#: timer) and the paper's runs last seconds.  ``--quick`` runs it at this size too, at
#: the paper's 400 G: DCQCN's constants are absolute (5 and 50 Mb/s steps, 32 KB byte
#: counter, 300 us timer, 4 us CNP spacing), so at 100 G links it works at another
#: operating point, not a scaled copy (at the deployed latency the victim keeps about
#: its max-min fair share at 100 G and more at 400 G: docs/baselines.md).
def _incast_long(file: str) -> dict[str, Run]:
    """As :func:`_incast` for the long DCQCN 1-QP run (no quick reduction): its 256 MiB
    victim alone."""
    alone = ('workload.flows=[{src = 13, dst = 1, size = "256MiB"}]',)
    return {"incast": Run(file), "alone": Run(file, always=alone)}


_INCAST_PUBLISHED = "16 servers at 400G, 7-to-1 incast plus a victim flow into the target's rack: "
_FAIL_PUBLISHED = "bidirectional write_bw, 4 QPs, 8 x 100G NIC, 8 planes: "
_RING_PUBLISHED = "64 GPUs, 400G NICs, ring all-reduce: "

EXPERIMENTS: tuple[PaperExperiment, ...] = (
    PaperExperiment(
        "latency-p2p",
        "point-to-point write latency",
        "2 B RDMA WRITE: 5.09 us within one T0, 6.54 us across T1 (half the round trip)",
        "both within 10 %",
        {"run": Run("latency-p2p")},
        check_latency,
    ),
    PaperExperiment(
        "p2p-bandwidth",
        "point-to-point write bandwidth",
        "8 x 100G NIC, 4 QPs, 32 KB writes back to back, both ways: about 770 Gb/s (96 %)",
        "each direction >= 93 % of 800 Gb/s",
        {"run": Run("p2p-bandwidth", quick=_BIDIR_32)},
        check_p2p_bandwidth,
    ),
    PaperExperiment(
        "drop-20pct-one-ev",
        "20 % drop on one of 16 EVs",
        "the EV goes inactive at once, its backup takes over, line rate holds",
        "only that EV ASSUMED_BAD, within 4 base RTTs; goodput within 2 % of no drops",
        {
            "drop": Run("drop-20pct-one-ev", quick=('workload.flows[0].size="16MiB"',)),
            "clean": Run(
                "drop-20pct-one-ev",
                always=("faults=[]",),
                quick=('workload.flows[0].size="16MiB"',),
            ),
        },
        check_drop_one_ev,
    ),
    PaperExperiment(
        "ecn-two-flows",
        "ECN load balancing, two flows on one EV",
        "ECN moves one flow to its other EV; both stay near peak",
        "flow 1's EV-A mapped out by ECN within 50 us of flow 2 joining; both >= 0.9 of peak",
        {"run": Run("ecn-two-flows")},
        check_ecn_two_flows,
    ),
    PaperExperiment(
        "nic-links-down",
        "NIC-T0 links down one at a time",
        _FAIL_PUBLISHED + "NIC-T0 links down one at a time: each costs an interruption under 1 s, "
        "then one plane's worth less",
        "after the k-th, (8 - k) / 8 of the level before, within 10 %; no timeout",
        {
            "run": Run(
                "nic-links-down",
                quick=(
                    'workload.flows[0].size="40MiB"',
                    'workload.flows[1].size="40MiB"',
                    "faults[0].at_us=150",
                    "faults[1].at_us=250",
                    "faults[2].at_us=350",
                    "switches.nic_port_status_delay_ps=20_000_000",
                ),
            )
        },
        check_nic_links_down,
    ),
    PaperExperiment(
        "nic-links-flap-4of8",
        "4 of 8 NIC links flapping",
        _FAIL_PUBLISHED
        + "4 of 8 NIC links down together: about half the bandwidth, then full recovery",
        "0.4-0.6 of the level before while down, >= 0.95 at the end",
        {
            "run": Run(
                "nic-links-flap-4of8",
                quick=(
                    'workload.flows[0].size="40MiB"',
                    'workload.flows[1].size="40MiB"',
                    "faults[0].at_us=150",
                    "faults[0].period_us=150",
                    "faults[0].down_us=100",
                    "switches.nic_port_status_delay_ps=20_000_000",
                ),
            )
        },
        check_nic_flap,
    ),
    PaperExperiment(
        "t0-t1-links-down-20",
        "20 T0-T1 links down in turn",
        _FAIL_PUBLISHED + "20 T0-T1 links disabled one per second: minimal impact",
        ">= 0.85 of the level before while they go down, >= 0.95 after; no timeout",
        {
            "run": Run(
                "t0-t1-links-down-20",
                quick=(
                    'workload.flows[0].size="96MiB"',
                    'workload.flows[1].size="96MiB"',
                    *(f"faults[{i}].at_us={100 + 30 * i}" for i in range(20)),
                ),
            )
        },
        check_links_down_20,
    ),
    PaperExperiment(
        "t0-t1-links-flap-8",
        "8 T0-T1 links flapping together",
        _FAIL_PUBLISHED + "8 T0-T1 links flapping together: negligible impact",
        ">= 0.9 of the level before while they flap, >= 0.97 after; no timeout",
        {
            "run": Run(
                "t0-t1-links-flap-8",
                quick=(
                    'workload.flows[0].size="40MiB"',
                    'workload.flows[1].size="40MiB"',
                    "faults[0].at_us=100",
                    "faults[0].period_us=100",
                    "faults[0].down_us=20",
                    "faults[0].count=3",
                ),
            )
        },
        check_links_flap_8,
    ),
    PaperExperiment(
        "t0-down",
        "a T0 down",
        _FAIL_PUBLISHED + "a T0 down: about 100 Gb/s less (one plane)",
        "7/8 of the level before, within 7 %; no timeout",
        {
            "run": Run(
                "t0-down",
                quick=(
                    *_BIDIR_32,
                    "faults[0].at_us=150",
                    "switches.nic_port_status_delay_ps=20_000_000",
                ),
            )
        },
        check_t0_down,
    ),
    PaperExperiment(
        "t1-down",
        "a T1 down",
        _FAIL_PUBLISHED + "a T1 down: no steady-state loss",
        "from 100 us after, >= 0.97 of the level before; no timeout",
        {"run": Run("t1-down", quick=(*_BIDIR_32, "faults[0].at_us=150"))},
        check_t1_down,
    ),
    PaperExperiment(
        "t1-blackhole",
        "a T1 up but not forwarding",
        "production: ~580K packets dropped across a quarter of the QPs; "
        "throughput dipped and recovered, no QP failed",
        "EVs blamed; from 100 us after, >= 0.97 of the level before; no QP fails",
        {"run": Run("t1-blackhole", quick=(*_BIDIR_32, "faults[0].at_us=150"))},
        check_t1_blackhole,
    ),
    PaperExperiment(
        "ring-roce-1qp-vs-mrc",
        "ring all-reduce, RoCE 1 QP against MRC",
        _RING_PUBLISHED + "RoCE 1 QP reaches about half of the achievable (ECMP collisions)",
        "RoCE 1 QP busbw <= 0.65 of MRC's",
        {
            "roce-1qp": _ring("ring-allreduce-64-roce-1qp", "32MiB"),
            "mrc": _ring("ring-allreduce-64-mrc", "32MiB"),
        },
        check_ring_roce_half,
    ),
    PaperExperiment(
        "ring-mrc-vs-roce-16qp",
        "ring all-reduce, MRC 1 QP against RoCE 16 QPs",
        _RING_PUBLISHED + "one MRC QP spraying 256 paths is above RoCE with 16 QPs",
        "MRC busbw > RoCE 16 QPs'",
        {
            "roce-16qp": _ring("ring-allreduce-64-roce-16qp", "16MiB"),
            "mrc": _ring("ring-allreduce-64-mrc", "16MiB"),
        },
        check_ring_mrc_over_16qp,
    ),
    PaperExperiment(
        "ring-mrc-loss0.1",
        "ring all-reduce, MRC at 0.1 % loss",
        _RING_PUBLISHED + "with 0.1 % random loss at every NIC ingress, MRC at large message "
        "sizes retransmits fast enough that the loss has little impact",
        "busbw >= 0.85 of loss-free MRC",
        {
            "mrc-loss0.1": _ring("ring-allreduce-64-mrc-loss0.1", "16MiB", RING_LARGE),
            "mrc": _ring("ring-allreduce-64-mrc", "16MiB", RING_LARGE),
        },
        check_ring_loss01,
    ),
    PaperExperiment(
        "ring-loss1",
        "ring all-reduce at 1 % loss, RoCE 1 QP against MRC",
        _RING_PUBLISHED + "1 % loss makes RoCE nearly unusable; MRC keeps about a third",
        "RoCE 1 QP busbw < 0.2 of MRC's",
        {
            "roce-1qp-loss1": _ring("ring-allreduce-64-roce-1qp-loss1", "16MiB"),
            "mrc-loss1": _ring("ring-allreduce-64-mrc-loss1", "16MiB"),
        },
        check_ring_loss1,
    ),
    PaperExperiment(
        "ring-loss1-roce-16qp",
        "ring all-reduce at 1 % loss, RoCE 16 QPs against MRC",
        _RING_PUBLISHED + "1 % loss makes RoCE nearly unusable; MRC keeps about a third",
        "RoCE 16 QPs busbw < 0.2 of MRC's",
        {
            "roce-16qp-loss1": _ring("ring-allreduce-64-roce-16qp-loss1", "16MiB"),
            "mrc-loss1": _ring("ring-allreduce-64-mrc-loss1", "16MiB"),
        },
        check_ring_loss1_16qp,
    ),
    PaperExperiment(
        "alltoall",
        "all-to-all, MRC against RoCE 1 and 16 QPs",
        "64 GPUs, 400G NICs, all-to-all: MRC ahead at every size; RoCE 16 QPs slightly worse than 1",
        "MRC busbw above both RoCE runs'",
        {
            "mrc": Run("alltoall-64-mrc", quick=QUICK_A2A, full=A2A_FULL),
            "roce-1qp": Run("alltoall-64-roce-1qp", quick=QUICK_A2A, full=A2A_FULL),
            "roce-16qp": Run("alltoall-64-roce-16qp", quick=QUICK_A2A, full=A2A_FULL),
        },
        check_alltoall,
    ),
    PaperExperiment(
        "incast-victim-mrc",
        "incast victim, MRC",
        _INCAST_PUBLISHED + "MRC leaves the victim untouched",
        "victim >= 0.9 of its rate alone",
        _incast("incast-victim-mrc"),
        check_victim_mrc,
    ),
    PaperExperiment(
        "incast-victim-pfc",
        "incast victim, RoCE with PFC only",
        _INCAST_PUBLISHED + "RoCE with PFC only leaves the victim 30-100 Gb/s of 400",
        "victim < 0.5 of its rate alone",
        _incast("incast-victim-pfc"),
        check_victim_pfc,
    ),
    PaperExperiment(
        "incast-victim-dcqcn-1qp",
        "incast victim, RoCE DCQCN 1 QP",
        _INCAST_PUBLISHED + "DCQCN with 1 QP costs the victim about 25 %",
        "victim 0.6-0.9 of its rate alone (about -25 %)",
        _incast_long("incast-victim-dcqcn-1qp"),
        check_victim_dcqcn_1qp,
    ),
    PaperExperiment(
        "incast-victim-dcqcn-8qp",
        "incast victim, RoCE DCQCN 8 QPs",
        _INCAST_PUBLISHED + "DCQCN with 8-10 QPs dips to 100 Gb/s in some seconds",
        "victim < 0.75 of its rate alone",
        _incast("incast-victim-dcqcn-8qp"),
        check_victim_dcqcn_8qp,
    ),
    PaperExperiment(
        "permutation-racks",
        "rack-to-rack permutation",
        "RoCE + PFC 1 QP: some flows at line rate, others at 1/2 or 1/3; MRC: 390 Gb/s on every flow",
        "RoCE slowest <= 0.6 and fastest >= 0.9 of line rate; MRC every flow >= 0.9",
        {
            "roce-1qp": Run(
                "permutation-racks-roce-1qp",
                quick=_INCAST_QUICK,
            ),
            "mrc": Run(
                "permutation-racks-mrc",
                quick=_INCAST_QUICK,
            ),
        },
        check_permutation,
    ),
    PaperExperiment(
        "permutation-racks-8qp",
        "rack-to-rack permutation, RoCE 8 QPs",
        "8 QPs barely help RoCE under PFC; MRC: 390 Gb/s on every flow",
        "RoCE 8 QPs slowest flow <= 0.75 of line rate; MRC every flow >= 0.9",
        {
            "roce-8qp": Run("permutation-racks-roce-8qp", quick=_INCAST_QUICK),
            "mrc": Run("permutation-racks-mrc", quick=_INCAST_QUICK),
        },
        check_permutation_8qp,
    ),
)


def names() -> list[str]:
    """The experiments' names, in table order."""
    return [e.name for e in EXPERIMENTS]


def select(only: str | None) -> list[PaperExperiment]:
    """The experiments named in ``only`` (comma-separated; None: all); ValueError naming --only."""
    if only is None:
        return list(EXPERIMENTS)
    wanted = [n.strip() for n in only.split(",") if n.strip()]
    known = {e.name: e for e in EXPERIMENTS}
    for n in wanted:
        if n not in known:
            raise ValueError(f"--only: {n!r} is not an experiment (known: {', '.join(known)})")
    if not wanted:
        raise ValueError("--only: give an experiment name")
    return [e for e in EXPERIMENTS if e.name in wanted]


# ----- running -------------------------------------------------------------------
@dataclass
class Outcome:
    """An experiment run: its verdict, its runs' documents and the wall time."""

    experiment: PaperExperiment
    #: the verdict at the first seed (the scenario files' own): the table's numbers
    verdict: Verdict
    #: the first seed's runs' documents (the report's plots); may be empty
    docs: dict[str, Doc]
    wall_seconds: float
    quick: bool
    #: (seed, verdict) for every seed run, the first first; empty: ``verdict`` alone
    seeds: list[tuple[int, Verdict]] = field(default_factory=list)

    @property
    def seed_verdicts(self) -> list[tuple[int, Verdict]]:
        """(seed, verdict) of every seed run."""
        return self.seeds or [(0, self.verdict)]

    @property
    def held(self) -> int:
        """For how many of the seeds the shape holds."""
        return sum(v.holds for _, v in self.seed_verdicts)

    @property
    def holds(self) -> bool:
        """The shape holds at every seed run."""
        return self.held == len(self.seed_verdicts)

    def shape_text(self) -> str:
        """``holds`` / ``does not hold``; ``holds for K/N seeds`` when several were run."""
        n = len(self.seed_verdicts)
        return f"holds for {self.held}/{n} seeds" if n > 1 else shape_word(self.holds)

    def command(self) -> str:
        """The ``openmrc paper`` command that runs this experiment alone."""
        n = len(self.seed_verdicts)
        return f"openmrc paper{' --quick' if self.quick else ''} --only {self.experiment.name}" + (
            f" --seeds {n}" if n > 1 else ""
        )

    def row(self) -> dict[str, Any]:
        """The experiment's entry of ``paper.json``."""
        e = self.experiment
        return {
            "name": e.name,
            "title": e.title,
            "published": e.published,
            "shape": e.shape,
            "measured": self.verdict.measured,
            "holds": self.holds,
            "held": self.held,
            "seed_count": len(self.seed_verdicts),
            "seeds": [
                {"seed": s, "holds": v.holds, "measured": v.measured, "numbers": v.numbers}
                for s, v in self.seed_verdicts
            ],
            "numbers": self.verdict.numbers,
            "wall_seconds": round(self.wall_seconds, 2),
            "runs": {
                role: {
                    "file": f"scenarios/paper/{run.file}.toml",
                    "overrides": run.overrides(self.quick),
                    "command": run.command(self.quick),
                    "warnings": self.docs[role]["provenance"]["warnings"]
                    if role in self.docs
                    else [],
                }
                for role, run in e.runs.items()
            },
            "command": self.command(),
        }


# ----- output --------------------------------------------------------------------
def shape_word(holds: bool) -> str:
    """The shape column's text."""
    return "holds" if holds else "does not hold"


def format_text(outcomes: list[Outcome]) -> str:
    """The table for the terminal: one block per experiment."""
    lines = []
    for o in outcomes:
        e = o.experiment
        lines.append(f"{e.name}: {o.shape_text().upper()}  ({o.wall_seconds:.1f} s)")
        lines.append(f"  published: {e.published}")
        lines.append(f"  openmrc:   {o.verdict.measured}")
        for seed, v in o.seed_verdicts[1:]:
            if not v.holds:
                lines.append(f"  seed {seed}:    {v.measured}")
        lines.append(f"  shape:     {e.shape}")
    lines.append(_summary(outcomes))
    return "\n".join(lines)


def _summary(outcomes: list[Outcome]) -> str:
    """``N of M published shapes hold`` (at every seed, when several were run)."""
    held = sum(o.holds for o in outcomes)
    seeds = {len(o.seed_verdicts) for o in outcomes}
    every = f" at every one of {seeds.pop()} seeds" if seeds and max(seeds) > 1 else ""
    return f"{held} of {len(outcomes)} published shapes hold{every}"


def _md(text: str) -> str:
    return text.replace("|", "\\|")


#: The line a table interrupted before every experiment finished starts with.
PARTIAL = (
    "Interrupted: only the experiments that finished are here; the same command again "
    "resumes (finished runs are kept in points/)."
)


def format_markdown(outcomes: list[Outcome], quick: bool, partial: bool = False) -> str:
    """``paper.md``: the table (experiment, published, openmrc, shape, command)."""
    size = "quick (reduced) size" if quick else "full size"
    lines = [
        f"# openmrc against the MRC paper ({size})",
        "",
        *([PARTIAL, ""] if partial else []),
        "| experiment | published | openmrc | shape | command |",
        "|---|---|---|---|---|",
    ]
    for o in outcomes:
        e = o.experiment
        shape = o.shape_text()
        lines.append(
            f"| {_md(e.title)} | {_md(e.published)} | {_md(o.verdict.measured)} | "
            f"{shape if o.holds else f'**{shape}**'} ({_md(e.shape)}) | `{o.command()}` |"
        )
    lines += ["", f"{_summary(outcomes)}.", ""]
    misses = [
        f"- {o.experiment.name}, seed {seed}: {v.measured}"
        for o in outcomes
        for seed, v in o.seed_verdicts
        if not v.holds and len(o.seed_verdicts) > 1
    ]
    if misses:
        lines += ["Seeds at which a shape does not hold:", "", *misses, ""]
    lines.append("Scenario runs (each also runs alone with `openmrc run`):")
    lines.append("")
    for o in outcomes:
        for role, run in o.experiment.runs.items():
            lines.append(f"- {o.experiment.name} / {role}: `{run.command(quick)}`")
    return "\n".join(lines) + "\n"


def document(outcomes: list[Outcome], quick: bool, partial: bool = False) -> dict[str, Any]:
    """``paper.json``."""
    from ..version import openmrc_version

    return {
        "quick": quick,
        "partial": partial,
        "openmrc_version": openmrc_version(),
        "holds": sum(o.holds for o in outcomes),
        "seeds": max((len(o.seed_verdicts) for o in outcomes), default=1),
        "experiments": [o.row() for o in outcomes],
    }


def render_html(outcomes: list[Outcome], quick: bool, partial: bool = False) -> str:
    """``report.html``: the table, then each experiment's goodput plot (openmrc.pipeline.report)."""
    from ..pipeline import report

    esc = html.escape
    rows = "\n".join(
        f"<tr class='{'holds' if o.holds else 'fails'}'><th scope='row'>"
        f"{esc(o.experiment.title)}</th><td>{esc(o.experiment.published)}</td>"
        f"<td>{esc(o.verdict.measured)}</td><td>{esc(o.shape_text())}<br>"
        f"<small>{esc(o.experiment.shape)}</small></td></tr>"
        for o in outcomes
    )
    figures = []
    note = ""
    try:
        plt = report._pyplot()
    except ImportError:
        plt = None
        note = "No plots: matplotlib is not installed (pip install 'openmrc[report]')."
    if plt is not None:
        import base64

        for o in outcomes:
            if not o.docs:
                continue
            plot = report.plot_goodput(list(o.docs.values()), plt)
            if plot is None:
                continue
            png = base64.b64encode(plot[2]).decode("ascii")
            figures.append(
                f"<figure id='fig-{esc(o.experiment.name)}'><img alt='{esc(o.experiment.title)}' "
                f"src='data:image/png;base64,{png}'><figcaption>{esc(o.experiment.title)}: "
                f"goodput over time ({', '.join(esc(r) for r in o.docs)}); dashed lines: faults"
                "</figcaption></figure>"
            )
    size = "quick (reduced) size" if quick else "full size"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>openmrc against the MRC paper ({size})</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 70em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }}
thead th {{ background: #f0f0f0; }}
tr.fails td:last-child {{ background: #fde2e1; }} tr.holds td:last-child {{ background: #e3f6e3; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; }}
</style></head>
<body>
<h1>openmrc against the MRC paper ({size})</h1>
{f"<p><strong>{esc(PARTIAL)}</strong></p>" if partial else ""}
<p>{esc(_summary(outcomes))}.</p>
<table id="paper"><thead><tr><th>experiment</th><th>published</th><th>openmrc</th>
<th>shape</th></tr></thead>
<tbody>
{rows}
</tbody></table>
{f"<p>{esc(note)}</p>" if note else ""}
{chr(10).join(figures)}
</body></html>
"""


def write(out: Path, outcomes: list[Outcome], quick: bool, partial: bool = False) -> list[Path]:
    """Write paper.md, paper.json and report.html into ``out`` (``partial``: the run was
    interrupted and they say so)."""
    md = out / "paper.md"
    md.write_text(format_markdown(outcomes, quick, partial))
    js = out / "paper.json"
    js.write_text(json.dumps(document(outcomes, quick, partial), indent=1, sort_keys=True))
    page = out / "report.html"
    page.write_text(render_html(outcomes, quick, partial))
    return [md, js, page]


__all__ = [
    "EXPERIMENTS",
    "Outcome",
    "PaperExperiment",
    "Run",
    "Verdict",
    "document",
    "format_markdown",
    "format_text",
    "names",
    "select",
    "write",
]
