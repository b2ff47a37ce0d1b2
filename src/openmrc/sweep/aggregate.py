"""A sweep's results together: metrics taken from each point's results record,
``sweep.csv`` (a row per point and seed), and ``report.html`` with one plot per
metric and swept axis (transports side by side, mean over seeds with a 95 %
Student-t confidence interval).

Metrics are named (:data:`METRICS`) or given as a path into the results record
(``summary.fct_us.max``, ``collectives[0].algbw_gbps``): docs/sweeps.md.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..pipeline.results import percentile_so_far
from ..pipeline.run import UsageError
from .spec import Point, SweepSpec, display, toml_value

Record = dict[str, Any]


def _path(doc: Any, path: str) -> Any:
    """The value at ``a.b[0].c`` in ``doc`` (None where it is missing)."""
    node = doc
    for part in path.split("."):
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_-]*)((?:\[\d+\])*)", part)
        if not m:
            return None
        node = node.get(m.group(1)) if isinstance(node, dict) else None
        for i in re.findall(r"\[(\d+)\]", m.group(2)):
            node = node[int(i)] if isinstance(node, list) and int(i) < len(node) else None
    return node


def _received_gbps(doc: Record) -> float | None:
    sim_us = doc.get("sim_end_us") or 0.0
    if sim_us <= 0:
        return None
    received = sum(
        f.get("bytes_received", f["size"] if f.get("fct_us") is not None else 0)
        for f in doc["flows"]
    )
    return received * 8 / (sim_us * 1000)


def _iteration_mean(doc: Record) -> float | None:
    times = _path(doc, "collectives[0].iteration_us")
    return statistics.fmean(times) if isinstance(times, list) and times else None


def _at(path: str) -> Callable[[Record], Any]:
    return lambda doc: _path(doc, path)


def _so_far(key: str, p: float) -> Callable[[Record], Any]:
    """The ``p``-th percentile of ``key`` over all flows, unfinished ones at their time
    so far (:func:`openmrc.pipeline.results.percentile_so_far`)."""

    def read(doc: Record) -> float | None:
        if not isinstance(doc.get("flows"), list):
            return None
        got = percentile_so_far(doc, key, p)
        return None if got is None else round(got[0], 4)

    return read


#: Named metrics: name -> (what it is, how to read it from a results record).
METRICS: dict[str, tuple[str, Callable[[Record], Any]]] = {
    "aggregate_gbps": (
        "aggregate goodput, Gb/s: bytes of the completed flows over the simulated time",
        _at("summary.aggregate_gbps"),
    ),
    "received_gbps": (
        "bytes received by all flows, finished or not, over the simulated time, Gb/s",
        _received_gbps,
    ),
    "goodput_min_gbps": (
        "the slowest completed flow's goodput, Gb/s",
        _at("summary.goodput_gbps.min"),
    ),
    "goodput_median_gbps": (
        "median goodput of completed flows, Gb/s",
        _at("summary.goodput_gbps.median"),
    ),
    "fct_median_us": (
        "median flow completion time over all flows (unfinished: time so far), us",
        _so_far("fct_us", 50),
    ),
    "fct_p99_us": (
        "99th-percentile flow completion time over all flows, nearest rank; a flow that "
        "did not finish counts with its time so far at the run's end (a lower bound), us",
        _so_far("fct_us", 99),
    ),
    "fct_p99_finished_us": (
        "99th-percentile flow completion time of the finished flows only, us",
        _at("summary.fct_us.p99"),
    ),
    "fct_max_us": (
        "the longest flow completion time (unfinished: time so far), us",
        _so_far("fct_us", 100),
    ),
    "slowdown_median": (
        "median slowdown (FCT / ideal FCT) over all flows (unfinished: time so far)",
        _so_far("slowdown", 50),
    ),
    "slowdown_p99": (
        "99th-percentile slowdown over all flows, nearest rank (unfinished: time so far)",
        _so_far("slowdown", 99),
    ),
    "slowdown_max": (
        "the largest slowdown (unfinished: time so far)",
        _so_far("slowdown", 100),
    ),
    "completed": ("flows completed", _at("summary.completed")),
    "retransmits": ("retransmissions, summed over flows", _at("summary.retransmits")),
    "trims": ("trimmed packets, summed over flows", _at("summary.trims")),
    "nacks": ("NACKs, summed over flows", _at("summary.nacks")),
    "timeouts": ("retransmission timeouts, summed over flows", _at("summary.timeouts")),
    "evs_assumed_bad": ("EV transitions to ASSUMED_BAD", _at("summary.evs_assumed_bad")),
    "evs_recovered": ("EV transitions back to GOOD", _at("summary.evs_recovered")),
    "sim_end_us": ("simulated time at the end, us", _at("summary.sim_end_us")),
    "collective_time_us": (
        "the (first) collective's completion time, us",
        _at("collectives[0].time_us"),
    ),
    "collective_busbw_gbps": (
        "the collective's bus bandwidth (nccl-tests), Gb/s",
        _at("collectives[0].busbw_gbps"),
    ),
    "collective_algbw_gbps": (
        "the collective's algorithm bandwidth, Gb/s",
        _at("collectives[0].algbw_gbps"),
    ),
    "iteration_mean_us": ("mean training-iteration time, us", _iteration_mean),
}

#: Metrics when none is chosen (collective_time_us only when the records have collectives).
DEFAULT_METRICS = ["aggregate_gbps", "fct_p99_us", "slowdown_p99", "collective_time_us"]


def check_metrics(names: list[str]) -> list[str]:
    """``names`` if each is a named metric or a path (``a.b[0].c``); UsageError otherwise."""
    for name in names:
        if name in METRICS:
            continue
        if ("." in name or "[" in name) and all(
            re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*(?:\[\d+\])*", part) for part in name.split(".")
        ):
            continue
        raise UsageError(
            f"--metric {name}: not a metric (known: {', '.join(METRICS)}; "
            "or a path into results.json such as summary.fct_us.max)"
        )
    if len(set(names)) != len(names):
        raise UsageError("--metric: a metric is named twice")
    return names


def metric_value(doc: Record, name: str) -> float | None:
    """Metric ``name`` of a results record, as a number (None when absent)."""
    value = METRICS[name][1](doc) if name in METRICS else _path(doc, name)
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    return None


def choose_metrics(spec: SweepSpec, records: list[Record]) -> list[str]:
    """The chosen metrics, or the defaults that the records have."""
    if spec.metrics:
        return list(spec.metrics)
    return [
        m
        for m in DEFAULT_METRICS
        if m != "collective_time_us" or any(metric_value(r, m) is not None for r in records)
    ]


# ----- statistics ------------------------------------------------------------------
#: Student-t 97.5 % quantiles (two-sided 95 %) by degrees of freedom.
_T975 = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074,
    23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048, 29: 2.045,
    30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980,
}  # fmt: skip


def t975(df: int) -> float:
    """The Student-t 0.975 quantile for ``df`` degrees of freedom (the table's entry
    at or below ``df``, so never narrower; 1.96 beyond 120)."""
    if df < 1:
        raise ValueError("df must be >= 1")
    if df > 120:
        return 1.96
    return _T975[max(k for k in _T975 if k <= df)]


def mean_ci(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95 % Student-t confidence interval
    (None with fewer than two values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, t975(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


# ----- aggregation -----------------------------------------------------------------
def _cell(v: float | None) -> str:
    if v is None:
        return ""
    return str(int(v)) if v.is_integer() else repr(round(v, 6))


def write_csv(
    path: Path,
    spec: SweepSpec,
    points: list[Point],
    stored: dict[str, Record | None],
    metrics: list[str],
) -> Path:
    """``sweep.csv``: a row per point and seed (swept values, transport, seed,
    status, all_ok, the metrics, error, fingerprint)."""
    axes = [a.name for a in spec.axes]
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(
            [*axes, "transport", "seed", "status", "all_ok", *metrics, "error", "fingerprint"]
        )
        for p in points:
            s = stored.get(p.fingerprint)
            status = "missing" if s is None else str(s.get("status"))
            rec = s.get("record") if s is not None and status == "ok" else None
            values = [metric_value(rec, m) if rec is not None else None for m in metrics]
            w.writerow(
                [
                    *(display(p.params[a]) for a in axes),
                    p.transport,
                    p.seed,
                    status,
                    "" if rec is None else bool(rec.get("all_ok")),
                    *(_cell(v) for v in values),
                    "" if s is None else s.get("error", ""),
                    p.fingerprint,
                ]
            )
    return path


def groups(
    spec: SweepSpec, points: list[Point], stored: dict[str, Record | None], metric: str
) -> dict[tuple[tuple[str, ...], str], list[float]]:
    """Metric values over seeds per (swept values as TOML text, transport)."""
    out: dict[tuple[tuple[str, ...], str], list[float]] = {}
    for p in points:
        key = (tuple(toml_value(p.params[a.name]) for a in spec.axes), p.transport)
        values = out.setdefault(key, [])
        s = stored.get(p.fingerprint)
        if s is not None and s.get("status") == "ok":
            v = metric_value(s["record"], metric)
            if v is not None:
                values.append(v)
    return out


def _numeric(values: tuple[Any, ...]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def plot_metric(
    spec: SweepSpec,
    points: list[Point],
    stored: dict[str, Record | None],
    metric: str,
    axis_index: int,
    plt: Any,
) -> tuple[str, str, bytes] | None:
    """``metric`` against axis ``axis_index``: one line per transport (and per value
    of the other axes), mean over seeds with 95 % Student-t error bars."""
    from ..pipeline.report import COLOURS, png

    axis = spec.axes[axis_index]
    data = groups(spec, points, stored, metric)
    numeric = _numeric(axis.values)
    positions = list(axis.values) if numeric else list(range(len(axis.values)))
    others = [a for i, a in enumerate(spec.axes) if i != axis_index]
    other_combos = sorted(
        {tuple(k[0][i] for i in range(len(spec.axes)) if i != axis_index) for k in data}
    )
    fig, ax = plt.subplots(figsize=(7, 3.6))
    markers = "osD^vP*X"
    styles = ["-", "--", ":", "-."]
    drawn = 0
    missing = 0
    n_series = len(spec.transports) * max(1, len(other_combos))
    width = 0.0 if numeric else 0.6 / max(1, n_series)
    for ti, transport in enumerate(spec.transports):
        for ci, combo in enumerate(other_combos):
            xs, ys, errs, short = [], [], [], []
            for vi, value in enumerate(axis.values):
                full: list[str] = list(combo)
                full.insert(axis_index, toml_value(value))
                values = data.get((tuple(full), transport), [])
                if not values:
                    continue
                mean, half = mean_ci(values)
                series = ti * max(1, len(other_combos)) + ci
                xs.append(positions[vi] + (series - (n_series - 1) / 2) * width)
                ys.append(mean)
                errs.append(0.0 if half is None else half)
                short.append(len(values) < len(spec.seeds))
            if not xs:
                continue
            colour = COLOURS.get(transport, "#7f7f7f")
            if any(short):  # fewer seeds than asked had a value: hollow markers
                missing += 1
                ax.scatter(
                    [x for x, sh in zip(xs, short, strict=True) if sh],
                    [y for y, sh in zip(ys, short, strict=True) if sh],
                    s=90,
                    facecolors="white",
                    edgecolors=colour,
                    linewidths=1.5,
                    zorder=3,
                )
            label = transport + "".join(
                f", {a.name}={t}" for a, t in zip(others, combo, strict=True)
            )
            ax.errorbar(
                xs,
                ys,
                yerr=errs,
                label=label,
                color=colour,
                marker=markers[ci % len(markers)],
                linestyle=styles[ci % len(styles)],
                markersize=4,
                capsize=3,
            )
            drawn += 1
    if not drawn:
        plt.close(fig)
        return None
    if numeric:
        lo, hi = min(axis.values), max(axis.values)
        if lo > 0 and hi / lo >= 16:
            ax.set_xscale("log", base=2)
            ax.set_xticks(list(axis.values))
            ax.set_xticklabels([str(v) for v in axis.values])
    else:
        ax.set_xticks(positions)
        ax.set_xticklabels([str(display(v)) for v in axis.values], fontsize=8)
    ax.set_xlabel(axis.name)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    caption = (
        f"{metric} ({METRICS[metric][0] if metric in METRICS else 'from results.json'}) "
        f"against {axis.name}: mean over {len(spec.seeds)} seed{'s' if len(spec.seeds) != 1 else ''}"
        + (
            ", error bars: 95 % Student-t confidence interval of the mean"
            if len(spec.seeds) > 1
            else ""
        )
        + (
            "; circled: fewer seeds had a value (runs that did not finish, or failed)"
            if missing
            else ""
        )
    )
    pid = re.sub(r"[^A-Za-z0-9_-]+", "-", f"{metric}-{axis.name}")
    return pid, caption, png(fig, plt)


def _fmt(v: float) -> str:
    return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"


def summary_table(
    spec: SweepSpec, points: list[Point], stored: dict[str, Record | None], metrics: list[str]
) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the summary: per swept values and transport, each metric's
    mean over seeds ± the half-width of its 95 % Student-t interval ("-": no value;
    "(wide)": the interval is wider than the mean, the seeds disagree more than the
    mean says; "(k of n)": only k of the n seeds had a value)."""
    headers = [a.name for a in spec.axes] + ["transport"] + list(metrics)
    per_metric = {m: groups(spec, points, stored, m) for m in metrics}
    keys = list(groups(spec, points, stored, metrics[0])) if metrics else []
    rows = []
    for key in keys:
        row = [*key[0], key[1]]
        for m in metrics:
            values = per_metric[m].get(key, [])
            if not values:
                row.append("-")
                continue
            mean, half = mean_ci(values)
            row.append(
                _fmt(mean)
                + ("" if half is None else f" ± {_fmt(half)}")
                + (" (wide)" if half is not None and half > abs(mean) else "")
                + (
                    f" ({len(values)} of {len(spec.seeds)})"
                    if len(values) < len(spec.seeds)
                    else ""
                )
            )
        rows.append(row)
    return headers, rows


def format_table(headers: list[str], rows: list[list[str]], limit: int = 60) -> str:
    """The summary as aligned text (at most ``limit`` rows)."""
    shown = rows[:limit]
    widths = [max(len(h), *(len(r[i]) for r in shown)) for i, h in enumerate(headers)]
    lines = ["  " + "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  " + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in shown]
    if len(rows) > limit:
        lines.append(f"  ... {len(rows) - limit} more rows (sweep.csv, report.html)")
    return "\n".join(lines)


@dataclass
class Aggregated:
    """What :func:`aggregate` wrote and found."""

    files: list[Path]
    metrics: list[str]
    #: empty, or why the page has no plots
    note: str
    headers: list[str]
    rows: list[list[str]]


def render_page(
    spec: SweepSpec,
    points: list[Point],
    stored: dict[str, Record | None],
    metrics: list[str],
    plots: list[tuple[str, str, bytes]],
    note: str = "",
) -> str:
    """The sweep's page: what was swept, a table of mean ± CI, failed points, the plots."""
    from ..pipeline.report import esc, figures_html, page_html
    from ..version import openmrc_version

    title = f"openmrc sweep: {spec.name}"
    ok = sum(1 for p in points if (stored.get(p.fingerprint) or {}).get("status") == "ok")
    failed = [
        (p, s)
        for p in points
        if (s := stored.get(p.fingerprint)) is not None and s.get("status") != "ok"
    ]
    axes = (
        "; ".join(f"{a.name} = {', '.join(str(display(v)) for v in a.values)}" for a in spec.axes)
        or "(none)"
    )
    headers, cells = summary_table(spec, points, stored, metrics)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    rows = ["<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in cells]
    failures = "".join(f"<li>{esc(p.label())}: {esc(s.get('error'))}</li>" for p, s in failed)
    body = f"""<h1>{esc(title)}</h1>
<p class="meta">scenario {esc(spec.scenario_file)}{
        (" with --set " + esc(" ".join(spec.fixed))) if spec.fixed else ""
    }; swept: {esc(axes)}; transports {esc(", ".join(spec.transports))};
seeds {esc(", ".join(str(s) for s in spec.seeds))}; openmrc {esc(openmrc_version())}</p>
<p class="meta">{ok} of {len(points)} points finished{
        f", {len(failed)} failed" if failed else ""
    }. Cells: mean over seeds{
        " ± the half-width of its 95 % Student-t confidence interval; (wide): an interval "
        "wider than its mean, where the seeds disagree more than the mean says (read each "
        "seed's value in sweep.csv, or run more seeds)"
        if len(spec.seeds) > 1
        else ""
    }. FCT and slowdown percentiles count every flow: one that did not finish counts
with its time so far at the run's end (a lower bound).</p>
<table id="sweep-summary"><thead><tr>{head}</tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
{f"<h2>Failed points</h2><ul class='meta'>{failures}</ul>" if failures else ""}
{f"<p class='meta'>{esc(note)}</p>" if note else ""}
{figures_html(plots)}"""
    return page_html(title, body)


def aggregate(spec: SweepSpec, points: list[Point], out: Path) -> Aggregated:
    """Write ``sweep.csv`` and ``report.html`` for the points stored under ``out``."""
    from ..pipeline.report import have_plots, pyplot
    from .runner import read_point

    stored = {p.fingerprint: read_point(out, p) for p in points}
    records = [s["record"] for s in stored.values() if s is not None and s.get("status") == "ok"]
    metrics = choose_metrics(spec, records)
    written = [write_csv(out / "sweep.csv", spec, points, stored, metrics)]
    plots: list[tuple[str, str, bytes]] = []
    note = ""
    if not spec.axes:
        note = "No plots: nothing was swept (give --param)."
    elif not have_plots():
        note = "No plots: matplotlib is not installed (pip install 'openmrc[report]')."
    else:
        plt = pyplot()
        for m in metrics:
            for i in range(len(spec.axes)):
                plot = plot_metric(spec, points, stored, m, i, plt)
                if plot is not None:
                    plots.append(plot)
    page = out / "report.html"
    page.write_text(render_page(spec, points, stored, metrics, plots, note))
    written.append(page)
    headers, rows = summary_table(spec, points, stored, metrics)
    return Aggregated(written, metrics, note, headers, rows)
