"""``report.html``: one self-contained page with the summary table and the plots of
one run or of a comparison of transports.

Input is results documents (:mod:`openmrc.pipeline.results`), one per transport; each
plot is drawn only when the documents hold its data (EV events, queue samples,
collectives...), so metrics added later appear without changes here.  Plots are
PNG (matplotlib, the ``report`` extra, imported only when a report is written),
embedded in the page as base64, so the file can be mailed or archived alone.
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..sim.result import read_series, series_span
from .results import summary_rows

COLOURS = {"mrc": "#1f77b4", "roce": "#d62728", "ib": "#2ca02c"}
STATE_STYLE = {
    "ASSUMED_BAD": ("#d62728", "x"),
    "GOOD": ("#2ca02c", "o"),
    "SKIP": ("#ff7f0e", "."),
    "DENIED": ("#000000", "s"),
}

Plot = tuple[str, str, bytes]  # (id, caption, PNG)


def _pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend (ImportError if not installed)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _label(doc: dict[str, Any]) -> str:
    return str(doc["provenance"]["transport"])


def _colour(doc: dict[str, Any]) -> str:
    return COLOURS.get(_label(doc), "#7f7f7f")


#: PNG text chunk holding each figure's layout (see :func:`figure_layout`).
LAYOUT_KEY = "openmrc:layout"

#: Above this ratio of the longest to the shortest run, per-transport panels get
#: their own time axis (a 4 s RoCE stall would otherwise squash a 200 us MRC run
#: into one pixel); below it they share it.
SHARED_X_RATIO = 10.0


def _fault_list(doc: dict[str, Any]) -> list[tuple[float, str]]:
    """One run's own faults (and a baseline's route withdrawals): ``(time us, label)``."""
    seen: dict[tuple[float, str], None] = {}
    for f in doc.get("fabric", {}).get("faults", []):
        seen[(f["time_ps"] / 1e6, f"{f['kind']} {f.get('target', '')}".strip())] = None
    return sorted(seen)


def _faults(docs: list[dict[str, Any]]) -> list[tuple[float, str]]:
    """The faults of all ``docs`` (for numbering: F1, F2... in time order)."""
    return sorted({f for doc in docs for f in _fault_list(doc)})


def _fault_key(docs: list[dict[str, Any]]) -> str:
    """The caption's key to the fault markers: ``F1 60 us link_down ... (mrc, roce)``."""
    parts = []
    for i, fault in enumerate(_faults(docs)):
        whose = [_label(d) for d in docs if fault in _fault_list(d)]
        who = f" ({', '.join(whose)})" if len(whose) < len(docs) else ""
        parts.append(f"F{i + 1} at {fault[0]:,.1f} us: {fault[1]}{who}")
    return "; ".join(parts)


def _mark_faults(
    ax: Any, doc_or_docs: Any, numbering: list[tuple[float, str]], scale: float = 1.0
) -> None:
    """Dashed lines at the faults of ``doc_or_docs`` only, labelled F<n> inside the axes
    (``scale``: x units per us, 1e-3 for an axis in ms)."""
    docs = doc_or_docs if isinstance(doc_or_docs, list) else [doc_or_docs]
    own = sorted({f for d in docs for f in _fault_list(d)})
    lo, hi = ax.get_xlim()
    for fault in own:
        t = fault[0] * scale
        if not lo <= t <= hi:
            continue
        ax.axvline(t, color="#555555", linestyle="--", linewidth=1, label="_marker")
        ax.text(
            t,
            0.98,
            f" F{numbering.index(fault) + 1}",
            transform=ax.get_xaxis_transform(),
            ha="left" if t < lo + 0.85 * (hi - lo) else "right",
            va="top",
            fontsize=7,
            color="#333333",
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1},
            clip_on=True,
        )


def _figure(plt: Any, rows: int, cols: int, height: float, **kwargs: Any) -> tuple[Any, Any]:
    """A figure with constrained layout (nothing clipped, no tight-layout warnings)."""
    return plt.subplots(
        rows, cols, figsize=(8, height), squeeze=False, layout="constrained", **kwargs
    )


def _legend_outside(fig: Any, axes: Any) -> None:
    """One legend for the figure, above the axes (never on the data)."""
    handles: dict[str, Any] = {}
    for ax in axes.flat if hasattr(axes, "flat") else axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    if handles:
        fig.legend(
            list(handles.values()),
            list(handles),
            loc="outside upper center",
            ncol=min(len(handles), 6),
            fontsize=8,
            frameon=False,
        )


def _points(artist: Any) -> list[tuple[float, float]]:
    """The data points an artist draws (lines, scatter offsets, bar tops), data coords."""
    from matplotlib.collections import Collection
    from matplotlib.image import AxesImage
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    if isinstance(artist, Line2D):
        xs: Any = artist.get_xdata()
        ys: Any = artist.get_ydata()
        return [(float(x), float(y)) for x, y in zip(xs, ys, strict=False)]
    if isinstance(artist, Collection):
        offsets: Any = artist.get_offsets()
        return [(float(x), float(y)) for x, y in offsets]
    if isinstance(artist, Rectangle):
        return [(artist.get_x() + artist.get_width() / 2, artist.get_y() + artist.get_height())]
    if isinstance(artist, AxesImage):
        x0, x1, y0, y1 = artist.get_extent()
        return [(x0, y0), (x1, y1)]
    return []


def figure_layout(fig: Any) -> dict[str, Any]:
    """Where everything landed in ``fig`` (pixels, origin bottom left), after layout.

    Per axes: its box, its box with tick labels and titles (``tight``), how many
    data points it draws (lines, markers, bars, images; markers such as fault
    lines are not data), its legend's box and how many data points that legend
    covers, and the boxes of its texts.  Saved in every PNG (``LAYOUT_KEY``) so a
    test can check the figures for overlapping, empty or one-point axes.
    """
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()

    def box(bb: Any) -> list[float]:
        return [round(bb.x0, 1), round(bb.y0, 1), round(bb.x1, 1), round(bb.y1, 1)]

    axes = []
    for ax in fig.axes:
        is_colorbar = hasattr(ax, "_colorbar")
        data = [
            a
            for a in [*ax.lines, *ax.collections, *ax.patches, *ax.images]
            if a.get_label() != "_marker"
        ]
        points = [pt for a in data for pt in _points(a)]
        legend = ax.get_legend()
        covered = 0
        legend_box = None
        if legend is not None:
            lb = legend.get_window_extent(renderer)
            legend_box = box(lb)
            for x, y in ax.transData.transform(points) if points else []:
                covered += int(lb.x0 <= x <= lb.x1 and lb.y0 <= y <= lb.y1)
        axes.append(
            {
                "label": ax.get_ylabel() or ax.get_label(),
                "colorbar": is_colorbar,
                "box": box(ax.get_window_extent(renderer)),
                "tight": box(ax.get_tightbbox(renderer)),
                "points": len(points),
                "distinct_x": len({round(x, 9) for x, _ in points}),
                "legend": legend_box,
                "legend_covers": covered,
                "xlim": [float(v) for v in ax.get_xlim()],
                "ylim": [float(v) for v in ax.get_ylim()],
                "texts": [
                    {"text": t.get_text(), "box": box(t.get_window_extent(renderer))}
                    for t in ax.texts
                    if t.get_text()
                ],
            }
        )
    figure_texts = [box(t.get_window_extent(renderer)) for t in fig.legends]
    width, height = fig.get_size_inches() * fig.dpi
    return {
        "size": [round(float(width), 1), round(float(height), 1)],
        "axes": axes,
        "legends": figure_texts,
    }


def _png(fig: Any, plt: Any) -> bytes:
    """``fig`` as PNG at 100 dpi, its :func:`figure_layout` in a text chunk; closes it."""
    import json

    if fig.get_layout_engine() is None:
        fig.set_layout_engine("constrained")
    fig.set_dpi(100)
    layout = figure_layout(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={LAYOUT_KEY: json.dumps(layout)})
    plt.close(fig)
    return buf.getvalue()


#: At most this many time bins per plotted series: a long run (a 4 s RoCE stall
#: sampled every 5 us is 860,000 samples) is averaged into bins first.
MAX_BINS = 1500


def _bin(values: list[float], bins: int) -> list[float]:
    """``values`` averaged into ``bins`` consecutive bins of equal length (the last may
    be shorter); unchanged when there are no more values than bins."""
    n = len(values)
    if n <= bins:
        return list(values)
    width = -(-n // bins)
    return [sum(values[i : i + width]) / len(values[i : i + width]) for i in range(0, n, width)]


def _aggregate(doc: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Total goodput over time (Gb/s), averaged into at most :data:`MAX_BINS` steps."""
    # each series read where it is non-zero only: a bin's sum over the rest adds zeros
    spans = [series_span(s) for s in (doc.get("goodput_gbps_series") or {}).values()]
    interval = doc.get("sample_interval_us", 0.0)
    length = max((n for _, _, n in spans), default=0)
    width = max(1, -(-length // MAX_BINS))
    bins = -(-length // width)
    sums = [0.0] * bins
    for start, values, _ in spans:
        end = start + len(values)
        for j in range(start - start % width, end, width):
            sums[j // width] += sum(values[max(j - start, 0) : j + width - start])
    ys = [total / min(width, length - j * width) for j, total in enumerate(sums)]
    xs = [min((j + 1) * width, length) * interval for j in range(bins)]
    return xs, ys


def _end_us(doc: dict[str, Any]) -> float:
    """When the run ended (its last flow finished, or it was stopped), us."""
    return float(doc.get("sim_end_us") or 0.0)


def _share_x(docs: list[dict[str, Any]]) -> bool:
    """Whether per-transport panels share one time axis (runs of similar length)."""
    ends = [_end_us(d) for d in docs if _end_us(d) > 0]
    return not ends or max(ends) <= SHARED_X_RATIO * min(ends)


def _time_axes(axes: list[Any], docs: list[dict[str, Any]], shared: bool) -> None:
    """x from 0 to the run's end (the longest run's when shared); a run that ended
    earlier than the shared axis gets a dotted line at its end."""
    longest = max((_end_us(d) for d in docs), default=0.0)
    for ax, doc in zip(axes, docs, strict=True):
        end = longest if shared else _end_us(doc)
        if end > 0:
            ax.set_xlim(0, end)
        if shared and 0 < _end_us(doc) < longest:
            ax.axvline(_end_us(doc), color="#999999", linestyle=":", linewidth=1, label="_marker")


def plot_goodput(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """Aggregate goodput over time, one panel per transport (same Gb/s scale), each
    with its own faults; panels share the time axis unless the run lengths differ
    by more than :data:`SHARED_X_RATIO`."""
    curves = [(d, xs, ys) for d in docs for xs, ys in [_aggregate(d)] if xs]
    if not curves:
        return None
    have = [d for d, _, _ in curves]
    shared = _share_x(have)
    fig, axes = _figure(plt, len(curves), 1, 0.8 + 1.9 * len(curves), sharey=True, sharex=shared)
    numbering = _faults(have)
    flat = [row[0] for row in axes]
    for ax, (doc, xs, ys) in zip(flat, curves, strict=True):
        ax.step(xs, ys, where="post", color=_colour(doc))
        ax.set_ylabel(f"{_label(doc)}\nGb/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    _time_axes(flat, have, shared)
    for ax, doc in zip(flat, have, strict=True):
        _mark_faults(ax, doc, numbering)
    flat[-1].set_xlabel("simulated time (us)")
    key = _fault_key(have)
    return (
        "goodput",
        "Goodput over time (sum over flows), one panel per transport on the same Gb/s scale"
        + ("" if shared or len(curves) == 1 else " (each on its own time scale)")
        + (f"; dashed lines: each run's own faults: {key}" if key else ""),
        _png(fig, plt),
    )


def _cdf(ax: Any, values: list[float], doc: dict[str, Any], total: int) -> None:
    """CDF over ``total`` flows: unfinished flows keep the curve below 1."""
    values = sorted(values)
    if not values:
        return
    ax.step(
        values,
        [(i + 1) / total for i in range(len(values))],
        where="post",
        label=_label(doc),
        color=_colour(doc),
        marker="." if len(values) == 1 else None,
    )


def plot_fct(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """CDFs of flow completion time and of slowdown per transport, over all flows."""
    have = [d for d in docs if any(f.get("fct_us") is not None for f in d["flows"])]
    if not have:
        return None
    fig, axes = _figure(plt, 1, 2, 3.4, sharey=True)
    a, b = axes[0]
    for doc in have:
        total = len(doc["flows"])
        _cdf(a, [f["fct_us"] for f in doc["flows"] if f.get("fct_us") is not None], doc, total)
        slow = [f["slowdown"] for f in doc["flows"] if f.get("slowdown") is not None]
        _cdf(b, slow, doc, total)
    for ax in (a, b):
        lo, hi = ax.dataLim.x0, ax.dataLim.x1
        if lo > 0 and hi > 100 * lo:  # runs orders of magnitude apart: all visible
            ax.set_xscale("log")
    a.set_xlabel("flow completion time (us)")
    b.set_xlabel("slowdown (FCT / ideal)")
    a.set_ylabel("fraction of flows")
    for ax in (a, b):
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    _legend_outside(fig, axes)
    return (
        "fct",
        "Flow completion time and slowdown, CDF over all flows (a curve that stops "
        "below 1: flows that did not finish)",
        _png(fig, plt),
    )


def plot_ev_timeline(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """EV state changes over time (one row per EV that changed), with the count of
    EVs ASSUMED_BAD above, around the faults of the runs that have EVs."""
    have = [d for d in docs if d.get("ev_events")]
    if not have:
        return None
    numbering = _faults(have)
    fig, axes = _figure(
        plt,
        len(have) + 1,
        1,
        1.9 + 1.7 * len(have),
        sharex=True,
        height_ratios=[1] + [1.5] * len(have),
    )
    top = axes[0][0]
    t_end = max(_end_us(d) for d in have)
    for i, doc in enumerate(have):
        events = doc["ev_events"]
        rows: dict[tuple[Any, Any, Any], int] = {}
        bad: set[tuple[Any, Any, Any]] = set()
        times, counts = [0.0], [0]
        by_state: dict[str, tuple[list[float], list[int]]] = {}
        for e in events:
            key = (e["host"], e["qpn"], e["ev"])
            row = rows.setdefault(key, len(rows))
            if e["new"] == "ASSUMED_BAD":
                bad.add(key)
            else:
                bad.discard(key)
            times.append(e["time_us"])
            counts.append(len(bad))
            xs, ys = by_state.setdefault(e["new"], ([], []))
            xs.append(e["time_us"])
            ys.append(row)
        times.append(max(t_end, times[-1]))
        counts.append(len(bad))
        top.step(times, counts, where="post", label=_label(doc), color=_colour(doc))
        ax = axes[i + 1][0]
        for state, (xs, ys) in sorted(by_state.items()):
            colour, marker = STATE_STYLE.get(state, ("#7f7f7f", "+"))
            ax.scatter(xs, ys, s=10, c=colour, marker=marker, label=state, linewidths=1)
        ax.set_ylabel(f"{_label(doc)}\nEV #")
        ax.grid(alpha=0.3)
    top.set_ylabel("EVs\nASSUMED_BAD")
    top.set_ylim(bottom=0)
    top.grid(alpha=0.3)
    first = numbering[0][0] if numbering else 0.0
    span = max(t_end - first, 1e-3)
    top.set_xlim(max(0.0, first - 0.25 * span), t_end)
    _mark_faults(top, have, numbering)
    for i, doc in enumerate(have):
        _mark_faults(axes[i + 1][0], doc, numbering)
    axes[-1][0].set_xlabel("simulated time (us)")
    _legend_outside(fig, [row[0] for row in axes[1:]])
    fault_key = _fault_key(have)
    return (
        "ev",
        "EV state changes around the faults: each row of dots is one EV of one QP "
        "(x ASSUMED_BAD, o back to GOOD, . SKIP), to the end of the run"
        + (f"; dashed lines: {fault_key}" if fault_key else ""),
        _png(fig, plt),
    )


_PLANE = re.compile(r"^h\d+:(\d+)->")


def plot_planes(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """Bytes each plane carried from the NICs, per transport."""
    loads: list[tuple[dict[str, Any], dict[int, int]]] = []
    for doc in docs:
        per: dict[int, int] = {}
        for port in doc.get("fabric", {}).get("ports", []):
            m = _PLANE.match(str(port.get("port", "")))
            if m:
                plane = int(m.group(1))
                per[plane] = per.get(plane, 0) + int(port.get("tx_bytes", 0))
        if per:
            loads.append((doc, per))
    if not loads:
        return None
    planes = sorted({p for _, per in loads for p in per})
    fig, axes = _figure(plt, 1, 1, 3.2)
    ax = axes[0][0]
    width = 0.8 / len(loads)
    for i, (doc, per) in enumerate(loads):
        xs = [p + (i - (len(loads) - 1) / 2) * width for p in planes]
        ax.bar(
            xs, [per.get(p, 0) / 1e6 for p in planes], width, label=_label(doc), color=_colour(doc)
        )
    ax.set_xticks(planes)
    ax.set_xlabel("plane")
    ax.set_ylabel("MB sent by the NICs")
    ax.grid(alpha=0.3, axis="y")
    if len(loads) > 1:
        _legend_outside(fig, axes)
    return (
        "planes",
        "Per-plane load: bytes the hosts' NIC ports sent into each plane"
        + ("" if len(loads) > 1 else f" ({_label(loads[0][0])})"),
        _png(fig, plt),
    )


def plot_plane_series(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """NIC egress Gb/s per plane over time, a heatmap per transport (plane x time, one
    colour scale), when the results carry ``plane_tx_gbps_series``."""
    have = [d for d in docs if any(read_series(d, "plane_tx_gbps_series").values())]
    if not have:
        return None
    shared = _share_x(have)
    numbering = _faults(have)
    fig, axes = _figure(plt, len(have), 1, 0.9 + 1.8 * len(have), sharex=shared)
    flat = [row[0] for row in axes]
    grids = []
    for doc in have:
        series = read_series(doc, "plane_tx_gbps_series")
        names = sorted(series, key=lambda n: (len(n), n))
        grids.append((names, [series[n] for n in names]))
    vmax = max((max(v, default=0.0) for _, rows in grids for v in rows), default=0.0) or 1.0
    image = None
    for ax, doc, (names, rows) in zip(flat, have, grids, strict=True):
        interval = doc.get("sample_interval_us", 0.0)
        length = max(len(r) for r in rows)
        padded = [_bin(list(r) + [0.0] * (length - len(r)), MAX_BINS) for r in rows]
        image = ax.imshow(
            padded,
            aspect="auto",
            origin="lower",
            interpolation="nearest",
            extent=(0.0, length * interval, -0.5, len(rows) - 0.5),
            cmap="viridis",
            vmin=0.0,
            vmax=vmax,
        )
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([n.replace("plane", "") for n in names], fontsize=7)
        ax.set_ylabel(f"{_label(doc)}\nplane")
    _time_axes(flat, have, shared)
    for ax, doc in zip(flat, have, strict=True):
        _mark_faults(ax, doc, numbering)
    flat[-1].set_xlabel("simulated time (us)")
    fig.colorbar(image, ax=flat, label="Gb/s into the plane", shrink=0.9)
    key = _fault_key(have)
    return (
        "plane-series",
        "Per-plane load over time: NIC egress Gb/s into each plane (one row per plane)"
        + (f"; dashed lines: {key}" if key else ""),
        _png(fig, plt),
    )


def plot_queues(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """Queue depth: the deepest queue over time when sampled, else each port's maximum."""
    sampled = [d for d in docs if d.get("fabric", {}).get("queue_samples")]
    fig, axes = _figure(plt, 1, 1, 3.2)
    ax = axes[0][0]
    if sampled:
        for doc in sampled:
            deepest: dict[int, int] = {}
            for t, _port, data, _hdr in doc["fabric"]["queue_samples"]:
                deepest[t] = max(deepest.get(t, 0), data)
            ts = sorted(deepest)
            ax.step(
                [t / 1e6 for t in ts],
                [deepest[t] / 1e3 for t in ts],
                where="post",
                label=_label(doc),
                color=_colour(doc),
            )
        ax.set_xlim(0, max(_end_us(d) for d in sampled) or None)
        _mark_faults(ax, sampled, _faults(sampled))
        ax.set_xlabel("simulated time (us)")
        ax.set_ylabel("deepest data queue (KB)")
        caption = "Queue depth: the deepest egress data queue in the fabric at each sample"
    else:
        drawn = False
        for doc in docs:
            peaks = [
                p.get("max_queue_bytes", 0) / 1e3 for p in doc.get("fabric", {}).get("ports", [])
            ]
            peaks = [p for p in peaks if p > 0]
            if len(peaks) > 1:
                _cdf(ax, peaks, doc, len(peaks))
                drawn = True
        if not drawn:
            plt.close(fig)
            return None
        ax.set_xscale("log")
        ax.set_xlabel("largest queue of the port during the run (KB)")
        ax.set_ylabel("fraction of busy ports")
        caption = (
            "Queue depth: each egress port's largest queue, CDF over ports that queued "
            "(set run.queue_sample_us for depth over time)"
        )
    ax.grid(alpha=0.3)
    _legend_outside(fig, axes)
    return "queues", caption, _png(fig, plt)


_STEP = re.compile(r":s(\d+)c")


def _step_times(doc: dict[str, Any]) -> list[float]:
    """Duration of each collective step (from flow names ``...:s<step>c...``), us."""
    ends: dict[int, int] = {}
    for f in doc["flows"]:
        m = _STEP.search(str(f.get("name", "")))
        if m and f.get("finish_ps") is not None:
            s = int(m.group(1))
            ends[s] = max(ends.get(s, 0), f["finish_ps"])
    if len(ends) < 2:
        return []
    steps = sorted(ends)
    prev = min(f["start_ps"] for f in doc["flows"] if _STEP.search(str(f.get("name", ""))))
    out = []
    for s in steps:
        out.append(max(0, ends[s] - prev) / 1e6)
        prev = ends[s]
    return out


def plot_collectives(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """Collective step times (and iteration times, from two iterations on) per transport,
    when the run had collectives; a single value is in the headline, not plotted."""
    steps = [(d, _step_times(d)) for d in docs]
    steps = [(d, s) for d, s in steps if len(s) > 1]
    iters = [
        (d, [t for c in d.get("collectives") or [] for t in (c.get("iteration_us") or [])])
        for d in docs
    ]
    iters = [(d, t) for d, t in iters if len(t) > 1]
    if not steps and not iters:
        return None
    panels = [
        (data, label) for data, label in ((steps, "collective step"), (iters, "iteration")) if data
    ]
    fig, axes = _figure(plt, 1, len(panels), 3.2)
    for ax, (data, xlabel) in zip(axes[0], panels, strict=True):
        for doc, values in data:
            ax.plot(
                range(len(values)),
                values,
                marker="o",
                markersize=3,
                label=_label(doc),
                color=_colour(doc),
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel("time (us)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    _legend_outside(fig, axes)
    return "collectives", "Collective step (and iteration) times", _png(fig, plt)


PLOTS: list[Callable[[list[dict[str, Any]], Any], Plot | None]] = [
    plot_goodput,
    plot_fct,
    plot_ev_timeline,
    plot_planes,
    plot_plane_series,
    plot_queues,
    plot_collectives,
]


def render_plots(docs: list[dict[str, Any]]) -> list[Plot]:
    """Every plot the documents have data for."""
    plt = _pyplot()
    out = []
    for fn in PLOTS:
        plot = fn(docs, plt)
        if plot is not None:
            out.append(plot)
    return out


def _first_blame(doc: dict[str, Any]) -> str:
    """Who noticed the first fault first, and how soon: an EV ASSUMED_BAD, a
    self-probe localisation, or (baselines) a route withdrawn and ACK timeouts."""
    faults = [
        f
        for f in doc.get("fabric", {}).get("faults", [])
        if f.get("kind") not in ("route_withdrawn", "switch_up", "link_up")
    ]
    first = min(faults, key=lambda f: f["time_ps"]) if faults else None
    t0 = None if first is None else first["time_ps"] / 1e6

    def after(t: float) -> str:
        if t0 is None or first is None:
            return f"at {t:,.1f} us"
        what = f"{first['kind']} {first.get('target', '')}".strip()
        return f"at {t:,.1f} us, {t - t0:,.1f} us after the first fault ({what} at {t0:,.1f} us)"

    s = doc["summary"]
    parts = []
    if s.get("first_bad_us") is not None:
        parts.append(f"first blame: a path (EV) marked ASSUMED_BAD {after(s['first_bad_us'])}")
    localised = doc.get("localised") or []
    if localised:
        loc = min(localised, key=lambda r: r["time_us"])
        parts.append(
            f"self-probes localised {loc['kind']} {loc['element']} {after(loc['time_us'])}"
        )
    withdrawn = [
        f["time_ps"] / 1e6
        for f in doc.get("fabric", {}).get("faults", [])
        if f.get("kind") == "route_withdrawn"
    ]
    if withdrawn:
        parts.append(f"first blame: routes withdrawn {after(min(withdrawn))}")
    if not parts and t0 is not None:
        parts.append("no path was blamed")
    if s.get("timeouts"):
        parts.append(f"{s['timeouts']:,} timeout{'s' * (s['timeouts'] != 1)}")
    return "; ".join(parts)


def headline(docs: list[dict[str, Any]]) -> list[str]:
    """The story in a few sentences: who finished how fast (collective time and busbw
    when there is a collective), how much longer the others took, and what noticed
    the first fault first."""
    lines = []
    durations: dict[str, float] = {}
    for doc in docs:
        name, s = _label(doc), doc["summary"]
        coll = (doc.get("collectives") or [None])[0]
        if coll is not None and coll.get("time_us") is not None:
            t = float(coll["time_us"])
            text = (
                f"{name}: the {coll.get('kind', 'collective')} over {coll.get('ranks', '?')} ranks "
                f"took {t:,.1f} us, busbw {coll.get('busbw_gbps', 0.0):,.1f} Gb/s"
            )
            durations[name] = t
        elif s["completed"] == s["flows"]:
            t = float(s["sim_end_us"])
            text = (
                f"{name}: all {s['flows']:,} flows finished in {t:,.1f} us "
                f"({s['aggregate_gbps']:,.1f} Gb/s aggregate)"
            )
            durations[name] = t
        else:
            missing = s["flows"] - s["completed"]
            text = (
                f"{name}: {missing:,} of {s['flows']:,} flows did not finish "
                f"in {s['sim_end_us']:,.1f} us"
            )
        if not s["all_ok"] and s["completed"] == s["flows"]:
            text += " (NOT all ok)"
        if doc.get("partial"):
            text += " (interrupted: partial results)"
        blame = _first_blame(doc)
        lines.append(text + (f"; {blame}" if blame else ""))
    if len(durations) > 1:
        best = min(durations, key=lambda n: durations[n])
        slower = [
            f"{n} took {durations[n] / durations[best]:,.1f} x as long"
            for n in durations
            if n != best and durations[best] > 0
        ]
        unfinished = [_label(d) for d in docs if _label(d) not in durations]
        lines.insert(
            0,
            f"Outcome: {best} was fastest"
            + (f"; {', '.join(slower)}" if slower else "")
            + (f"; {' and '.join(unfinished)} did not finish" if unfinished else ""),
        )
    return lines


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def render_html(
    docs: list[dict[str, Any]], plots: list[Plot], scenario_copy: str | Path | None = None
) -> str:
    """The page: the headline, provenance, the summary table, the plots (embedded PNGs).

    ``scenario_copy``: the copy of the scenario file in the output folder, which the
    page names (the file the run read may be a temporary or packaged one)."""
    from .jobrun import has_jobs, job_rows
    from .report_jobs import headline as job_headline
    from .report_jobs import section_note as job_note

    first = docs[0]["provenance"]
    name = first.get("scenario_name") or first.get("scenario_file") or "scenario"
    transports = [_label(d) for d in docs]
    title = f"openmrc: {name} ({', '.join(transports)})"
    head_cells = "".join(f"<th>{_esc(t)}</th>" for t in transports)
    jobs = has_jobs(docs)
    # a job run's table is its jobs' step times; the flow counters follow in a table
    # of their own when the run had flows (packet level)
    measures = job_rows(docs) if jobs else summary_rows(docs)
    rows = _table_rows(measures)
    wall = "".join(f"<td>{d['provenance']['wall_seconds']:.2f}</td>" for d in docs)
    rows.append(f"<tr><th scope='row'>wall s</th>{wall}</tr>")
    network = ""
    if jobs and any(d["summary"]["flows"] for d in docs):
        network = (
            "<h2>Network</h2>\n<table id='network'><thead><tr><th></th>"
            f"{head_cells}</tr></thead>\n<tbody>\n"
            + "\n".join(_table_rows(summary_rows(docs)))
            + "\n</tbody></table>"
        )
    partial = [t for t, d in zip(transports, docs, strict=True) if d.get("partial")]
    warnings = [f"{_label(d)}: {w}" for d in docs for w in d["provenance"].get("warnings", [])]
    overrides = first.get("overrides") or []
    lines = job_headline(docs) if jobs else headline(docs)
    story = "".join(f"<p>{_esc(line)}</p>" for line in lines)
    job_ids = {pid for pid, _, _ in plots if pid.startswith("job-")}
    job_plots = [p for p in plots if p[0] in job_ids]
    other_plots = [p for p in plots if p[0] not in job_ids]
    source = first.get("scenario_file")
    where = (
        f"scenario file {_esc(scenario_copy)} (a copy of {_esc(source)})"
        if scenario_copy is not None
        else f"scenario file {_esc(source)}"
    )
    body = f"""<h1>{_esc(title)}</h1>
<div id="headline" class="headline">{story}</div>
<p class="meta">{where}{(" with --set " + _esc(" ".join(overrides))) if overrides else ""}; seed {
        _esc(first.get("seed"))
    }; openmrc {_esc(first.get("openmrc_version"))};
started {_esc(first.get("start_time"))}</p>
{
        f'<p class="partial">Interrupted ({_esc(", ".join(partial))}): these are partial results.</p>'
        if partial
        else ""
    }
<table id="summary"><thead><tr><th></th>{head_cells}</tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
{
        "<ul class='meta'>" + "".join(f"<li>{_esc(w)}</li>" for w in warnings) + "</ul>"
        if warnings
        else ""
    }
{
        "<section id='jobs'><h2>Where the step time went</h2>"
        + figures_html(job_plots)
        + job_note(docs)
        + "</section>"
        if jobs
        else ""
    }
{network}
{figures_html(other_plots)}"""
    return page_html(title, body)


def _table_rows(measures: list[tuple[str, list[str]]]) -> list[str]:
    """``<tr>`` rows of (measure, cells)."""
    return [
        f"<tr><th scope='row'>{_esc(measure)}</th>"
        + "".join(f"<td>{_esc(c)}</td>" for c in cells)
        + "</tr>"
        for measure, cells in measures
    ]


def figures_html(plots: list[Plot]) -> str:
    """The plots as ``<figure>`` elements with their PNGs embedded (base64)."""
    return "\n".join(
        f"<figure id='fig-{_esc(pid)}'><img id='img-{_esc(pid)}' alt='{_esc(caption)}' "
        f"src='data:image/png;base64,{base64.b64encode(data).decode('ascii')}'>"
        f"<figcaption>{_esc(caption)}</figcaption></figure>"
        for pid, caption, data in plots
    )


def page_html(title: str, body: str) -> str:
    """A self-contained page: ``title``, the report style, and ``body`` (HTML, escaped by the caller)."""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{_esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 60em; color: #222; }}
h1 {{ font-size: 1.4em; }} .meta {{ color: #555; font-size: 0.9em; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }}
th[scope=row] {{ text-align: left; font-weight: normal; }}
thead th {{ background: #f0f0f0; }}
.partial {{ background: #fff3cd; border: 1px solid #e0c060; padding: 0.5em; }}
.headline {{ font-size: 1.05em; border-left: 4px solid #1f77b4; padding: 0.1em 0.8em; }}
figure {{ margin: 1.5em 0; }} img {{ max-width: 100%; }}
figcaption {{ color: #444; font-size: 0.9em; }}
</style></head>
<body>
{body}
</body></html>
"""


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend, for other pages' plots (ImportError without it)."""
    return _pyplot()


def png(fig: Any, plt: Any) -> bytes:
    """``fig`` as PNG bytes (constrained layout, 100 dpi, its layout in a text chunk);
    the figure is closed."""
    return _png(fig, plt)


def esc(value: Any) -> str:
    """``value`` as HTML text (quotes escaped too)."""
    return _esc(value)


def write_report(
    directory: str | Path,
    docs: list[dict[str, Any]],
    scenario_copy: str | Path | None = None,
    traces: list[dict[str, Any] | None] | None = None,
) -> Path:
    """Write ``report.html`` for ``docs`` into ``directory`` (``scenario_copy``: see
    :func:`render_html`).

    A job run's report leads with its job section (:mod:`openmrc.pipeline.report_jobs`;
    ``traces``: each run's trace.json, for the per-rank timeline) and writes its
    step times per iteration as ``job_steps.csv`` beside the page.  Without
    matplotlib (the ``report`` extra) the page has the table and a note instead
    of the plots.
    """
    from . import report_jobs

    report_jobs.write_csv(directory, docs)
    try:
        plt = _pyplot()
        kit = report_jobs.Kit(_figure, _png, _faults, _fault_key, _mark_faults, SHARED_X_RATIO)
        job_plots = report_jobs.render(docs, traces or [None] * len(docs), plt, kit)
        plots = job_plots + render_plots(docs)
        note = ""
    except ImportError:
        plots = []
        note = "No plots: matplotlib is not installed (pip install 'openmrc[report]')."
    path = Path(directory) / "report.html"
    page = render_html(docs, plots, scenario_copy)
    if note:
        page = page.replace("</body>", f"<p class='meta'>{_esc(note)}</p>\n</body>")
    path.write_text(page)
    return path


def have_plots() -> bool:
    """Whether matplotlib (the ``report`` extra) is installed."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
