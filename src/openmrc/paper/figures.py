"""The paper's collective curves (Araujo et al. 2026, 5.2.7, Figures 16 and 17):
``openmrc paper --figures``.

Figure 16 is the ring all-reduce, Figure 17 the all-to-all, both on 64 ranks with
400 Gb/s per NIC: MRC on four planes of 100 Gb/s (one QP spraying its EVs),
RoCE on one 400 Gb/s plane with ECMP, PFC and DCQCN, with 1 QP and with 16 QPs
per connection.  Each curve is busbw (nccl-tests' bus bandwidth) against the
message size, one panel per random loss rate at every NIC ingress (0, 0.1 % and
1 %).  The runs are the bundled scenario files of ``openmrc paper`` (the
loss-free ``ring-allreduce-64-*`` and ``alltoall-64-*``), with only the message
size, the loss fault and a lossy run's cap set by ``--set`` overrides, so that every curve runs the
transports exactly as the table's experiments configure them.

Every run goes to the end of its collective.  A lossy run has a time cap (a
RoCE QP waiting for its retransmission timeout may never finish): a full-size ring
the table's (:func:`openmrc.paper.experiments.ring_lossy_cap_us`), every other run
:data:`LOSS_CAP_US`.  A run not finished by its cap has no busbw, only the upper
bound :func:`openmrc.paper.experiments.ring_run` gives it (the busbw it would have
had had its last byte arrived at the cap): ``completed: false`` with
``bound_gbps`` in the data, drawn at the bound with a downward triangle, and a
shape is decided by such a run only when the bound settles it.  Nothing here is
fitted: the curves are what the simulator gives.

The runs go through the same resumable runner as the table
(:mod:`openmrc.paper.run`): each written under ``OUT/points/`` as it finishes.
Output: ``figure16.png``, ``figure17.png``, ``figures.html`` (both, with their
numbers), ``figures.json`` and ``figures.csv``.
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import json
import statistics
from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..sweep.runner import SweepOutcome, read_point, run_sweep
from ..sweep.spec import Point
from .experiments import QUICK_A2A, QUICK_RING, Run, ring_lossy_cap_us, ring_run
from .run import parse_run, point_at


@dataclass(frozen=True)
class Figure:
    """One of the paper's figures: a collective, and the scenario file of each curve."""

    number: int
    collective: str
    #: curve label -> bundled loss-free scenario file (scenarios/paper/)
    curves: dict[str, str]


FIGURES: tuple[Figure, ...] = (
    Figure(
        16,
        "ring all-reduce",
        {
            "MRC 1 QP": "ring-allreduce-64-mrc",
            "RoCE 1 QP": "ring-allreduce-64-roce-1qp",
            "RoCE 16 QPs": "ring-allreduce-64-roce-16qp",
        },
    ),
    Figure(
        17,
        "all-to-all",
        {
            "MRC 1 QP": "alltoall-64-mrc",
            "RoCE 1 QP": "alltoall-64-roce-1qp",
            "RoCE 16 QPs": "alltoall-64-roce-16qp",
        },
    ),
)

#: Random loss at every NIC ingress (all planes), as a probability: the panels.
LOSSES: tuple[float, ...] = (0.0, 0.001, 0.01)

#: Message sizes (nccl-tests' size: the buffer per rank), latency- to bandwidth-bound:
#: from the paper's smallest (its axis runs from 4 MB to 16 GB) to what the simulator
#: moves in reasonable time.  Full size, 64 ranks: a ring step moves size / 128 per
#: channel (32 KiB to 2 MiB); an all-to-all sends size / 64 to every peer (64 KiB to
#: 4 MiB).  The ring is latency-bound up to 16 MiB (a step's 128 KiB per channel take
#: 2.6 us at 400 Gb/s against about 6.5 us of latency) and the all-to-all an open-loop
#: burst at 4 MiB (16 packets per peer); the paper's curves separate above that.  Every
#: run goes to the end of its collective (a first stretch of a run says nothing of a
#: stall that comes later): a 64-rank 256 MiB ring all-reduce moves 32 GiB through the
#: simulator, an all-to-all 4 GiB per 64 MiB of message.
SIZES: tuple[str, ...] = ("4MiB", "16MiB", "64MiB", "256MiB")

#: Quick size (the tests): the table's own reductions (the ring and the all-to-all on
#: 16 ranks, 4 T0s) and smaller messages.
QUICK_SIZES: tuple[str, ...] = ("64KiB", "256KiB", "1MiB", "4MiB")
QUICK_FABRIC: dict[int, tuple[str, ...]] = {16: QUICK_RING, 17: QUICK_A2A}

#: Simulated-time cap of a lossy run (us), as the bundled loss files use (the full-size
#: ring all-reduce: the table's, :func:`openmrc.paper.experiments.ring_lossy_cap_us`).
LOSS_CAP_US = {False: 20_000, True: 2_000}


def loss_overrides(loss: float, quick: bool, cap_us: int | None = None) -> tuple[str, ...]:
    """The ``--set`` overrides of a loss rate: the bundled loss files' fault, and their
    cap (``cap_us`` instead, when given)."""
    if loss == 0:
        return ()
    fault = (
        f'faults=[{{at_us = 0, kind = "link_loss", links = "host", direction = "down", '
        f"probability = {loss!r}}}]"
    )
    return (fault, f"run.until_us={LOSS_CAP_US[quick] if cap_us is None else cap_us}")


@dataclass(frozen=True)
class Cell:
    """One point of one curve: figure, curve, loss, size (its run at each seed)."""

    figure: int
    curve: str
    loss: float
    size: str

    def cap_us(self, quick: bool) -> int | None:
        """The simulated-time cap of this cell's runs (us); None: loss-free, no cap (the
        collective ends)."""
        if self.loss == 0:
            return None
        if self.figure == 16 and not quick:
            return ring_lossy_cap_us(_bytes(self.size))
        return LOSS_CAP_US[quick]

    def run(self, quick: bool) -> Run:
        """The bundled file with this cell's overrides."""
        fig = next(f for f in FIGURES if f.number == self.figure)
        fabric = QUICK_FABRIC[self.figure] if quick else ()
        loss = loss_overrides(self.loss, quick, self.cap_us(quick))
        return Run(
            fig.curves[self.curve], always=(f'workload.size="{self.size}"', *loss), quick=fabric
        )


def cells(quick: bool) -> list[Cell]:
    """Every cell of both figures, in plotting order."""
    sizes = QUICK_SIZES if quick else SIZES
    return [
        Cell(f.number, curve, loss, size)
        for f in FIGURES
        for curve in f.curves
        for loss in LOSSES
        for size in sizes
    ]


def plan(quick: bool, seeds: int = 1) -> list[tuple[Cell, Point]]:
    """Each cell's point at each seed (the file's seed and the ``seeds - 1`` next)."""
    if seeds < 1:
        raise ValueError(f"--seeds: must be >= 1, got {seeds}")
    out: list[tuple[Cell, Point]] = []
    for cell in cells(quick):
        run = cell.run(quick)
        parsed = parse_run(run, quick)
        for k in range(seeds):
            out.append((cell, point_at(parsed, run, parsed.resolved["seed"] + k, len(out))))
    return out


def points(quick: bool, seeds: int = 1) -> list[tuple[Cell, Point]]:
    """:func:`plan`: the figures' runs."""
    return plan(quick, seeds)


def finished(out: Path, item: tuple[Cell, Point]) -> bool:
    """Whether ``item``'s run is already written (ok) in ``out``."""
    stored = read_point(out, item[1])
    return stored is not None and stored.get("status") == "ok"


def run(
    items: list[tuple[Cell, Point]],
    out: Path,
    executor: Executor | None,
    *,
    stop_children: bool = False,
) -> SweepOutcome:
    """Run the figures' points not yet written in ``out``, largest first."""
    order = sorted(
        (p for _, p in items), key=lambda p: (-_size_bytes(p.overrides), -p.seed, p.index)
    )
    return run_sweep(order, out, executor, stop_children=stop_children)


def _bytes(size: str) -> int:
    from ..units import parse_size

    return parse_size(size, "workload.size")


def _size_bytes(overrides: tuple[str, ...]) -> int:
    for o in overrides:
        if o.startswith("workload.size="):
            return _bytes(o.split("=", 1)[1].strip('"'))
    return 0


def run_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """One run's point: its busbw when the collective finished (else None), and the
    upper bound of its busbw (:func:`openmrc.paper.experiments.ring_run`: the busbw
    itself when finished, else what it would have been had the last byte arrived at
    the cap; None when the run stopped at time 0)."""
    r = ring_run(doc)
    return {
        "busbw_gbps": r.busbw,
        "bound_gbps": r.bound if r.bound != float("inf") else None,
        "completed": r.finished,
        "sim_end_us": doc["sim_end_us"],
        "timeouts": sum(int(f.get("timeouts") or 0) for f in doc["flows"]),
        "evs_assumed_bad": sum(int(f.get("evs_assumed_bad") or 0) for f in doc["flows"]),
    }


def collect(out: Path, items: list[tuple[Cell, Point]], quick: bool) -> dict[str, Any]:
    """``figures.json``: every figure's curves (mean busbw over seeds per size), with
    each seed's run summarised; a run not written (failed) is left out and named."""
    rows: dict[Cell, list[dict[str, Any]]] = {}
    missing = []
    for cell, p in items:
        stored = read_point(out, p)
        if stored is None or stored.get("status") != "ok":
            missing.append({"cell": cell.__dict__, "seed": p.seed})
            continue
        rows.setdefault(cell, []).append({"seed": p.seed, **run_summary(stored["record"])})
    sizes = list(QUICK_SIZES if quick else SIZES)
    figs = []
    for f in FIGURES:
        curves = []
        for curve in f.curves:
            for loss in LOSSES:
                runs = [rows.get(Cell(f.number, curve, loss, s), []) for s in sizes]
                done = [bool(rs) and all(r["completed"] for r in rs) for rs in runs]
                curves.append(
                    {
                        "label": curve,
                        "file": f.curves[curve],
                        "loss": loss,
                        # the mean over seeds when every seed finished, else None
                        "busbw_gbps": [
                            statistics.fmean(r["busbw_gbps"] for r in rs) if ok else None
                            for rs, ok in zip(runs, done, strict=True)
                        ],
                        # the mean's upper bound (the mean itself when every seed
                        # finished); None when a run is missing or stopped at time 0
                        "bound_gbps": [_mean_bound(rs) for rs in runs],
                        "completed": done,
                        "runs": runs,
                    }
                )
        figs.append(
            {"figure": f.number, "collective": f.collective, "sizes": sizes, "curves": curves}
        )
    doc = {"quick": quick, "losses": list(LOSSES), "figures": figs, "missing": missing}
    doc["shapes"] = [dataclasses.asdict(sh) for sh in figure_shapes(doc)]
    return doc


def _mean_bound(runs: list[dict[str, Any]]) -> float | None:
    """The mean over seeds of each run's busbw or, not finished, its bound: an upper
    bound of the mean busbw.  None when there is no run or one has no bound."""
    bounds = [r["bound_gbps"] for r in runs]
    if not bounds or any(b is None for b in bounds):
        return None
    return statistics.fmean(bounds)


#: How many of the largest message sizes count as bandwidth-bound in the shape checks:
#: at 64 ranks 64 and 256 MiB (a ring step moves 512 KiB to 2 MiB per channel, 10 to
#: 40 us at 400 Gb/s against about 6.5 us of latency; an all-to-all 1 to 4 MiB per
#: peer), at the quick size its two largest.
BANDWIDTH_BOUND = 2


@dataclass(frozen=True)
class FigureShape:
    """One published statement about Figure 16 or 17, checked on the curves."""

    figure: int
    name: str
    #: the paper's words (5.2.7)
    paper: str
    #: what is checked, with its bound
    check: str
    #: None: a run it needs is not there (a loss rate or size not run); False also when a
    #: run not finished by its cap leaves it undecided
    holds: bool | None
    #: the values compared, Gb/s (``<21``: not finished by its cap, busbw below 21)
    numbers: str


#: A curve's value at one size: its busbw (None: a run did not finish) and the upper
#: bound of its busbw (the busbw itself when every run finished).
Value = tuple[float | None, float]


def _series(fig: dict[str, Any], label: str, loss: float) -> list[Value] | None:
    """A curve's :data:`Value` per size, or None when that curve or one of its runs is
    missing (or a run has no bound: it stopped at time 0)."""
    for c in fig["curves"]:
        if c["label"] == label and c["loss"] == loss:
            ys, bounds = c["busbw_gbps"], c.get("bound_gbps", c["busbw_gbps"])
            out: list[Value] = []
            for y, b, ok in zip(ys, bounds, c["completed"], strict=True):
                if ok and y is not None:
                    out.append((float(y), float(y)))
                elif b is None:
                    return None
                else:
                    out.append((None, float(b)))
            return out
    return None


def _settled(rule: Any, vals: list[Value]) -> bool:
    """Whether ``rule`` holds whatever the busbw of a run not finished is, from 0 to
    its bound.  Each rule is a conjunction of comparisons each monotonic in each value
    that can be unfinished (only a lossy run has a cap, and no rule divides by a lossy
    run's busbw), so it holds over those ranges when it holds at each combination of
    their ends."""
    choices = [(v,) if v is not None else (0.0, b) for v, b in vals]
    return all(bool(rule(*combo)) for combo in itertools.product(*choices))


def _words(v: Value) -> str:
    """``312`` or ``<21`` (not finished: below its bound)."""
    y, b = v
    return f"{y:.0f}" if y is not None else f"<{b:.0f}"


def _shape(
    fig: dict[str, Any],
    name: str,
    paper: str,
    check: str,
    curves: list[tuple[str, float]],
    idx: list[int],
    rule: Any,
) -> FigureShape:
    """Evaluate ``rule`` (curves' values at one size -> bool) at every size in ``idx``; a
    run not finished decides it only when its bound settles it (:func:`_settled`)."""
    got = [_series(fig, label, loss) for label, loss in curves]
    sizes = fig["sizes"]
    if any(g is None for g in got):
        return FigureShape(fig["figure"], name, paper, check, None, "not run")
    ok = True
    words = []
    for i in idx:
        vals = [g[i] for g in got if g is not None]
        ok = _settled(rule, vals) and ok
        words.append(f"{sizes[i]}: " + " / ".join(_words(v) for v in vals))
    legend = " / ".join(f"{label} {100 * loss:g} %" for label, loss in curves)
    return FigureShape(
        fig["figure"], name, paper, check, ok, f"{legend} (Gb/s): " + "; ".join(words)
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else 0.0


def figure_shapes(doc: dict[str, Any]) -> list[FigureShape]:
    """The published shapes of Figures 16 and 17 (paper 5.2.7), checked on ``doc``
    (:func:`collect`).  The bounds are the table's where the table checks the same
    statement (:mod:`openmrc.paper.experiments`: RoCE 1 QP at most 0.65 of MRC, MRC at 0.1 % loss
    at least 0.85 of loss-free, RoCE below 0.2 of MRC at 1 %), and for the rest: "little
    difference" within 25 %, "around a third" 0.2 to 0.5, "barely sees any degradation"
    at least 0.85 (as "little impact" in the table), "slightly worse" 0.8 to 1."""
    out: list[FigureShape] = []
    mrc, r1, r16 = "MRC 1 QP", "RoCE 1 QP", "RoCE 16 QPs"
    for fig in doc["figures"]:
        n = len(fig["sizes"])
        big = list(range(max(0, n - BANDWIDTH_BOUND), n))
        every = list(range(n))
        small = [0]
        if fig["figure"] == 16:
            out += [
                _shape(
                    fig,
                    "ring-small-sizes-alike",
                    "for small message sizes ... there is little difference between RoCE and MRC",
                    "loss-free, smallest size: RoCE 1 and 16 QPs within 25 % of MRC",
                    [(mrc, 0.0), (r1, 0.0), (r16, 0.0)],
                    small,
                    lambda m, a, b: all(0.75 * m <= x <= 1.25 * m for x in (a, b)),
                ),
                _shape(
                    fig,
                    "ring-roce-1qp-half",
                    "RoCE with one QP ... generally achieves only half the possible throughput",
                    "loss-free, bandwidth-bound sizes: RoCE 1 QP <= 0.65 of MRC",
                    [(mrc, 0.0), (r1, 0.0)],
                    big,
                    lambda m, a: 0 < a <= 0.65 * m,
                ),
                _shape(
                    fig,
                    "ring-qp-scaling-helps",
                    "for RoCE, QP scaling does indeed help ... one MRC QP ... better than 16 QPs",
                    "loss-free, bandwidth-bound sizes: MRC > RoCE 16 QPs > RoCE 1 QP",
                    [(mrc, 0.0), (r16, 0.0), (r1, 0.0)],
                    big,
                    lambda m, b, a: m > b > a,
                ),
                _shape(
                    fig,
                    "ring-mrc-loss0.1",
                    "with large message sizes it can retransmit fast enough that 0.1% loss "
                    "has little impact",
                    "bandwidth-bound sizes: MRC at 0.1 % loss >= 0.85 of loss-free MRC",
                    [(mrc, 0.001), (mrc, 0.0)],
                    big,
                    lambda x, m: x >= 0.85 * m > 0,
                ),
                _shape(
                    fig,
                    "ring-roce-unusable-1pct",
                    "at 1% loss RoCE is pretty much unusable",
                    "bandwidth-bound sizes, 1 % loss: RoCE 1 and 16 QPs < 0.2 of MRC",
                    [(mrc, 0.01), (r1, 0.01), (r16, 0.01)],
                    big,
                    lambda m, a, b: m > 0 and max(a, b) < 0.2 * m,
                ),
                _shape(
                    fig,
                    "ring-mrc-third-1pct",
                    "even MRC only gets around a third of the intended throughput",
                    "bandwidth-bound sizes: MRC at 1 % loss 0.2 to 0.5 of loss-free MRC",
                    [(mrc, 0.01), (mrc, 0.0)],
                    big,
                    lambda x, m: 0.2 <= _ratio(x, m) <= 0.5,
                ),
            ]
        else:
            out += [
                _shape(
                    fig,
                    "a2a-mrc-ahead",
                    "for all message sizes MRC outperforms RoCE",
                    "loss-free, every size: MRC > RoCE 1 QP and > RoCE 16 QPs",
                    [(mrc, 0.0), (r1, 0.0), (r16, 0.0)],
                    every,
                    lambda m, a, b: m > max(a, b),
                ),
                _shape(
                    fig,
                    "a2a-16qp-slightly-worse",
                    "16 RoCE QPs per destination actually perform slightly worse than one QP",
                    "loss-free, bandwidth-bound sizes: RoCE 16 QPs 0.8 to 1 of RoCE 1 QP",
                    [(r16, 0.0), (r1, 0.0)],
                    big,
                    lambda b, a: 0.8 * a <= b < a,
                ),
                _shape(
                    fig,
                    "a2a-roce-loss0.1-large",
                    "at large message sizes and 0.1% loss, RoCE barely sees any degradation",
                    "bandwidth-bound sizes: RoCE 1 and 16 QPs at 0.1 % loss >= 0.85 of "
                    "their loss-free busbw",
                    [(r1, 0.001), (r1, 0.0), (r16, 0.001), (r16, 0.0)],
                    big,
                    lambda a, a0, b, b0: a >= 0.85 * a0 > 0 and b >= 0.85 * b0 > 0,
                ),
                _shape(
                    fig,
                    "a2a-loss-small-sizes",
                    "at small message sizes ... RoCE does very poorly. MRC's SACK-based "
                    "retransmission helps greatly here",
                    "smallest size, 0.1 % and 1 % loss: each RoCE keeps a smaller fraction "
                    "of its loss-free busbw than MRC does",
                    [
                        (mrc, 0.001),
                        (mrc, 0.01),
                        (mrc, 0.0),
                        (r1, 0.001),
                        (r1, 0.01),
                        (r1, 0.0),
                        (r16, 0.001),
                        (r16, 0.01),
                        (r16, 0.0),
                    ],
                    small,
                    lambda m1, m2, m0, a1, a2, a0, b1, b2, b0: all(
                        _ratio(x, x0) < _ratio(y, m0)
                        for x, x0, y in ((a1, a0, m1), (a2, a0, m2), (b1, b0, m1), (b2, b0, m2))
                    ),
                ),
            ]
    return out


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


COLOURS = {"MRC 1 QP": "#1f77b4", "RoCE 1 QP": "#d62728", "RoCE 16 QPs": "#ff7f0e"}
#: RoCE 16 QPs dashed: where it equals RoCE 1 QP the two lines stay visible.
STYLES = {"RoCE 16 QPs": "--"}


def plot(fig: dict[str, Any], path: Path, quick: bool) -> Path:
    """One figure like the paper's: busbw against message size, a panel per loss rate."""
    from ..units import parse_size

    plt = _pyplot()
    sizes = [parse_size(s, "size") for s in fig["sizes"]]
    panels, axes = plt.subplots(1, len(LOSSES), figsize=(4.2 * len(LOSSES), 3.6), sharey=True)
    for ax, loss in zip(axes, LOSSES, strict=True):
        for c in (c for c in fig["curves"] if c["loss"] == loss):
            # the line joins finished cells only; a cell not finished is drawn at its
            # bound with a downward triangle (its busbw is below it), a missing one not
            ys = [float("nan") if y is None else y for y in c["busbw_gbps"]]
            colour = COLOURS.get(c["label"], "#7f7f7f")
            style = STYLES.get(c["label"], "-")
            ax.plot(sizes, ys, style, marker="o", color=colour, label=c["label"])
            bounds = c.get("bound_gbps", c["busbw_gbps"])
            bad = [
                (x, b)
                for x, b, ok in zip(sizes, bounds, c["completed"], strict=True)
                if not ok and b is not None
            ]
            if bad:
                ax.plot(
                    *zip(*bad, strict=True),
                    "v",
                    color=colour,
                    markerfacecolor="none",
                    markersize=9,
                )
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, fig["sizes"])
        ax.set_title(f"{100 * loss:g} % loss")
        ax.set_xlabel("message size")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("busbw (Gb/s)")
    axes[0].legend(fontsize="small")
    where = "quick size" if quick else "64 ranks"
    panels.suptitle(
        f"Figure {fig['figure']}: {fig['collective']} ({where}); "
        "\u25bd: not finished by its cap, busbw below the mark"
    )
    panels.tight_layout()
    panels.savefig(path, dpi=110)
    plt.close(panels)
    return path


def write(out: Path, doc: dict[str, Any]) -> list[Path]:
    """``figures.json``, ``figures.csv``, and a PNG per figure and ``figures.html`` (when
    matplotlib is installed), from ``doc`` (:func:`collect`), into ``out``."""
    quick = doc["quick"]
    js = out / "figures.json"
    js.write_text(json.dumps(doc, indent=1, sort_keys=True))
    rows = []
    for fig in doc["figures"]:
        for c in fig["curves"]:
            for size, runs in zip(fig["sizes"], c["runs"], strict=True):
                for r in runs:
                    rows.append(
                        {
                            "figure": fig["figure"],
                            "collective": fig["collective"],
                            "transport": c["label"],
                            "loss_pct": 100 * c["loss"],
                            "size": size,
                            **r,
                        }
                    )
    cs = out / "figures.csv"
    with cs.open("w", newline="") as fh:
        fields = ["figure", "collective", "transport", "loss_pct", "size", "seed"]
        fields += ["busbw_gbps", "bound_gbps", "completed", "sim_end_us", "timeouts"]
        fields += ["evs_assumed_bad"]
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    written = [js, cs]
    try:
        _pyplot()
    except ImportError:
        return written
    pngs = [plot(fig, out / f"figure{fig['figure']}.png", quick) for fig in doc["figures"]]
    page = out / "figures.html"
    page.write_text(render_html(doc, pngs))
    return [*written, *pngs, page]


def render_html(doc: dict[str, Any], pngs: list[Path]) -> str:
    """``figures.html``: each figure's plot and its numbers (busbw per size, Gb/s)."""
    import base64
    import html

    esc = html.escape
    parts = []
    for fig, png in zip(doc["figures"], pngs, strict=True):
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        head = "".join(f"<th>{esc(s)}</th>" for s in fig["sizes"])
        rows = "\n".join(
            f"<tr><th scope='row'>{esc(c['label'])}</th><td>{100 * c['loss']:g} %</td>"
            + "".join(
                _cell_html(y, b, ok)
                for y, b, ok in zip(
                    c["busbw_gbps"],
                    c.get("bound_gbps", c["busbw_gbps"]),
                    c["completed"],
                    strict=True,
                )
            )
            + "</tr>"
            for c in fig["curves"]
        )
        parts.append(
            f"<h2>Figure {fig['figure']}: {esc(fig['collective'])}</h2>"
            f"<img alt='Figure {fig['figure']}' src='data:image/png;base64,{data}'>"
            f"<table><thead><tr><th>transport</th><th>loss</th>{head}</tr></thead>"
            f"<tbody>{rows}</tbody></table>"
        )
    shape_rows = "\n".join(
        f"<tr><td>{sh['figure']}</td><td>{esc(sh['paper'])}</td><td>{esc(sh['check'])}</td>"
        f"<td>{_verdict(sh['holds'])}</td><td>{esc(sh['numbers'])}</td></tr>"
        for sh in doc["shapes"]
    )
    parts.append(
        "<h2>The published shapes</h2><table><thead><tr><th>figure</th><th>the paper</th>"
        f"<th>checked</th><th>holds</th><th>numbers</th></tr></thead><tbody>{shape_rows}"
        "</tbody></table>"
    )
    size = "quick size" if doc["quick"] else "64 ranks"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>openmrc: the paper's Figures 16 and 17 ({size})</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 80em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }}
img {{ max-width: 100%; }}
</style></head>
<body>
<h1>The paper's Figures 16 and 17 ({size})</h1>
<p>busbw (Gb/s) against message size, each run to the end of its collective.
"not finished (&lt; N)": a run did not finish by its time cap and has no busbw,
only the upper bound N (the busbw had its last byte arrived at the cap; the real one
is lower, finishing later or never), drawn as a hollow downward triangle at N. A
published shape is decided by such a run only when the bound settles it.
Data: figures.json, figures.csv.</p>
{chr(10).join(parts)}
</body></html>
"""


def format_text(doc: dict[str, Any]) -> str:
    """The curves as text (a line per figure, curve and loss, busbw per size) and the
    published shapes, from ``doc`` (:func:`collect`)."""
    lines = []
    for fig in doc["figures"]:
        lines.append(
            f"Figure {fig['figure']}, {fig['collective']}: busbw (Gb/s) at "
            + ", ".join(fig["sizes"])
        )
        for c in fig["curves"]:
            vals = [
                f"{y:.0f}" if ok and y is not None else ("-" if b is None else f"<{b:.0f}")
                for y, b, ok in zip(
                    c["busbw_gbps"],
                    c.get("bound_gbps", c["busbw_gbps"]),
                    c["completed"],
                    strict=True,
                )
            ]
            lines.append(
                f"  {c['label']:12} {100 * c['loss']:4g} % loss: {' '.join(f'{v:>6}' for v in vals)}"
            )
    lines.append(
        "  (<N: not finished by its cap, no busbw: below N, what it would have been had its "
        "last byte arrived at the cap; -: not run)"
    )
    shapes = doc["shapes"]
    held = sum(1 for sh in shapes if sh["holds"])
    lines.append(f"Published shapes: {held} of {len(shapes)} hold")
    for sh in shapes:
        lines.append(
            f"  [{_verdict(sh['holds'])}] Figure {sh['figure']}, {sh['check']}: {sh['numbers']}"
        )
    return "\n".join(lines)


def _cell_html(y: float | None, bound: float | None, ok: bool) -> str:
    """A table cell: the busbw, ``not finished (< N)``, or ``-`` (not run)."""
    if ok and y is not None:
        return f"<td>{y:.0f}</td>"
    if bound is None:
        return "<td>-</td>"
    return f"<td>not finished (&lt; {bound:.0f})</td>"


def _verdict(holds: bool | None) -> str:
    return "not run" if holds is None else ("holds" if holds else "does not hold")


def shapes_hold(doc: dict[str, Any]) -> bool:
    """Whether no published shape of ``doc`` (:func:`collect`) fails (one not run does
    not count)."""
    return all(sh["holds"] is not False for sh in doc["shapes"])
