"""``report.html``: one self-contained page with the summary table and the plots of
one run or of a comparison of transports.

Input is results documents (:mod:`openmrc.results`), one per transport; each
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


def _faults(docs: list[dict[str, Any]]) -> list[tuple[float, str]]:
    seen: dict[tuple[float, str], None] = {}
    for doc in docs:
        for f in doc.get("fabric", {}).get("faults", []):
            seen[(f["time_ps"] / 1e6, f"{f['kind']} {f.get('target', '')}".strip())] = None
    return sorted(seen)


def _mark_faults(ax: Any, faults: list[tuple[float, str]]) -> None:
    for i, (t, text) in enumerate(faults):
        ax.axvline(t, color="#555555", linestyle="--", linewidth=1)
        ax.annotate(
            text,
            (t, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12 - 11 * (i % 3)),
            textcoords="offset points",
            fontsize=7,
            color="#333333",
        )


def _png(fig: Any, plt: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _aggregate(doc: dict[str, Any]) -> tuple[list[float], list[float]]:
    series = list(doc.get("goodput_gbps_series", {}).values())
    interval = doc.get("sample_interval_us", 0.0)
    length = max((len(s) for s in series), default=0)
    xs = [(i + 1) * interval for i in range(length)]
    ys = [sum(s[i] for s in series if i < len(s)) for i in range(length)]
    return xs, ys


def plot_goodput(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """Aggregate goodput over time per transport, fault times marked.

    Overlaid on one axis, or one axis per transport when their run lengths
    differ by more than 3x (a slow baseline would squash a fast run to a spike).
    """
    curves = [(d, *_aggregate(d)) for d in docs if _aggregate(d)[0]]
    if not curves:
        return None
    ends = [xs[-1] for _, xs, _ in curves]
    separate = len(curves) > 1 and max(ends) > 3 * min(ends)
    n = len(curves) if separate else 1
    fig, axes = plt.subplots(n, 1, figsize=(8, 0.6 + (2.2 if separate else 2.8) * n), squeeze=False)
    faults = _faults(docs)
    for i, (doc, xs, ys) in enumerate(curves):
        ax = axes[i if separate else 0][0]
        ax.step(xs, ys, where="post", label=_label(doc), color=_colour(doc))
    for row in axes:
        ax = row[0]
        _mark_faults(ax, faults)
        ax.set_ylabel("goodput (Gb/s)")
        ax.set_ylim(bottom=0)
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1][0].set_xlabel("simulated time (us)")
    return (
        "goodput",
        "Goodput over time (sum over flows); dashed lines: faults",
        _png(fig, plt),
    )


def _cdf(ax: Any, values: list[float], doc: dict[str, Any]) -> None:
    values = sorted(values)
    n = len(values)
    ax.step(
        values, [(i + 1) / n for i in range(n)], where="post", label=_label(doc), color=_colour(doc)
    )


def plot_fct(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """CDFs of flow completion time and of slowdown per transport."""
    have = [d for d in docs if any(f.get("fct_us") is not None for f in d["flows"])]
    if not have:
        return None
    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3.2))
    for doc in have:
        _cdf(a, [f["fct_us"] for f in doc["flows"] if f.get("fct_us") is not None], doc)
        slow = [f["slowdown"] for f in doc["flows"] if f.get("slowdown") is not None]
        if slow:
            _cdf(b, slow, doc)
    a.set_xlabel("flow completion time (us)")
    b.set_xlabel("slowdown (FCT / ideal)")
    for ax in (a, b):
        ax.set_ylabel("fraction of flows")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    return "fct", "Flow completion time and slowdown, CDF over completed flows", _png(fig, plt)


def plot_ev_timeline(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """EV state changes over time (one row per EV that changed), with the count of
    EVs ASSUMED_BAD above, around the faults."""
    have = [d for d in docs if d.get("ev_events")]
    if not have:
        return None
    faults = _faults(docs)
    fig, axes = plt.subplots(
        len(have) + 1, 1, figsize=(8, 1.8 + 1.6 * len(have)), sharex=True, squeeze=False
    )
    top = axes[0][0]
    t_end = max(d.get("sim_end_us", 0.0) for d in have)
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
        times.append(t_end)
        counts.append(len(bad))
        top.step(times, counts, where="post", label=_label(doc), color=_colour(doc))
        ax = axes[i + 1][0]
        for state, (xs, ys) in sorted(by_state.items()):
            colour, marker = STATE_STYLE.get(state, ("#7f7f7f", "+"))
            ax.scatter(xs, ys, s=10, c=colour, marker=marker, label=state, linewidths=1)
        ax.set_ylabel(f"{_label(doc)}: EV #")
        ax.legend(fontsize=7, loc="upper right", ncol=4)
        _mark_faults(ax, faults)
        ax.grid(alpha=0.3)
    top.set_ylabel("EVs ASSUMED_BAD")
    top.legend(fontsize=8, loc="upper left")
    top.grid(alpha=0.3)
    _mark_faults(top, faults)
    if faults:
        first = faults[0][0]
        span = max(t_end - first, 1e-3)
        top.set_xlim(max(0.0, first - 0.25 * span), t_end)
    axes[-1][0].set_xlabel("simulated time (us)")
    return (
        "ev",
        "EV state changes around the faults: each row of dots is one EV of one QP "
        "(x ASSUMED_BAD, o back to GOOD, . SKIP)",
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
    fig, ax = plt.subplots(figsize=(8, 3))
    width = 0.8 / len(loads)
    for i, (doc, per) in enumerate(loads):
        xs = [p + (i - (len(loads) - 1) / 2) * width for p in planes]
        ax.bar(
            xs, [per.get(p, 0) / 1e6 for p in planes], width, label=_label(doc), color=_colour(doc)
        )
    ax.set_xticks(planes)
    ax.set_xlabel("plane")
    ax.set_ylabel("MB sent by the NICs")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return (
        "planes",
        "Per-plane load: bytes the hosts' NIC ports sent into each plane",
        _png(fig, plt),
    )


def plot_plane_series(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """NIC egress Gb/s per plane over time, when the results carry ``plane_tx_gbps_series``."""
    have = [d for d in docs if any((d.get("plane_tx_gbps_series") or {}).values())]
    if not have:
        return None
    faults = _faults(docs)
    fig, axes = plt.subplots(len(have), 1, figsize=(8, 0.6 + 2.2 * len(have)), squeeze=False)
    for ax, doc in zip((row[0] for row in axes), have, strict=True):
        interval = doc.get("sample_interval_us", 0.0)
        series = doc["plane_tx_gbps_series"]
        for name in sorted(series, key=lambda n: (len(n), n)):
            values = series[name]
            xs = [(i + 1) * interval for i in range(len(values))]
            ax.step(xs, values, where="post", label=name, linewidth=1)
        _mark_faults(ax, faults)
        ax.set_ylabel(f"{_label(doc)}: Gb/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6, ncol=8, loc="lower center")
    axes[-1][0].set_xlabel("simulated time (us)")
    return (
        "plane-series",
        "Per-plane load over time: NIC egress Gb/s into each plane",
        _png(fig, plt),
    )


def plot_queues(docs: list[dict[str, Any]], plt: Any) -> Plot | None:
    """Queue depth: the deepest queue over time when sampled, else each port's maximum."""
    sampled = [d for d in docs if d.get("fabric", {}).get("queue_samples")]
    fig, ax = plt.subplots(figsize=(8, 3))
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
        _mark_faults(ax, _faults(docs))
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
            if peaks:
                _cdf(ax, peaks, doc)
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
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
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
    """Collective step times (and iteration times) per transport, when the run had collectives."""
    steps = [(d, _step_times(d)) for d in docs]
    steps = [(d, s) for d, s in steps if s]
    iters = [
        (d, [t for c in d.get("collectives") or [] for t in (c.get("iteration_us") or [])])
        for d in docs
    ]
    iters = [(d, t) for d, t in iters if t]
    if not steps and not iters:
        return None
    panels = [
        (data, label) for data, label in ((steps, "collective step"), (iters, "iteration")) if data
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(8, 3), squeeze=False)
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
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
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


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def render_html(docs: list[dict[str, Any]], plots: list[Plot]) -> str:
    """The page: provenance, the summary table, the plots (embedded PNGs)."""
    first = docs[0]["provenance"]
    name = first.get("scenario_name") or first.get("scenario_file") or "scenario"
    transports = [_label(d) for d in docs]
    title = f"openmrc: {name} ({', '.join(transports)})"
    head_cells = "".join(f"<th>{_esc(t)}</th>" for t in transports)
    rows = []
    for measure, cells in summary_rows(docs):
        rows.append(
            f"<tr><th scope='row'>{_esc(measure)}</th>"
            + "".join(f"<td>{_esc(c)}</td>" for c in cells)
            + "</tr>"
        )
    wall = "".join(f"<td>{d['provenance']['wall_seconds']:.2f}</td>" for d in docs)
    rows.append(f"<tr><th scope='row'>wall s</th>{wall}</tr>")
    partial = [t for t, d in zip(transports, docs, strict=True) if d.get("partial")]
    warnings = [f"{_label(d)}: {w}" for d in docs for w in d["provenance"].get("warnings", [])]
    overrides = first.get("overrides") or []
    body = f"""<h1>{_esc(title)}</h1>
<p class="meta">scenario file {_esc(first.get("scenario_file"))}{
        (" with --set " + _esc(" ".join(overrides))) if overrides else ""
    }; seed {_esc(first.get("seed"))}; openmrc {_esc(first.get("openmrc_version"))};
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
{figures_html(plots)}"""
    return page_html(title, body)


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
    """``fig`` as PNG bytes (tight layout, 100 dpi); the figure is closed."""
    return _png(fig, plt)


def esc(value: Any) -> str:
    """``value`` as HTML text (quotes escaped too)."""
    return _esc(value)


def write_report(directory: str | Path, docs: list[dict[str, Any]]) -> Path:
    """Write ``report.html`` for ``docs`` into ``directory``.

    Without matplotlib (the ``report`` extra) the page has the table and a note
    instead of the plots.
    """
    try:
        plots = render_plots(docs)
        note = ""
    except ImportError:
        plots = []
        note = "No plots: matplotlib is not installed (pip install 'openmrc[report]')."
    path = Path(directory) / "report.html"
    page = render_html(docs, plots)
    if note:
        page = page.replace("</body>", f"<p class='meta'>{_esc(note)}</p>\n</body>")
    path.write_text(page)
    return path


def have_plots() -> bool:
    """Whether matplotlib (the ``report`` extra) is installed."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None
