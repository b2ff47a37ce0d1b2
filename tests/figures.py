"""Read back the layout openmrc.pipeline.report saves in every PNG it draws, and find what is wrong.

``openmrc.pipeline.report.figure_layout`` records, after layout, each axes' box (with and
without its tick labels), how many data points it draws, its legend and texts; the
PNG carries it as a text chunk (``LAYOUT_KEY``).  :func:`problems` names overlapping,
empty or one-point axes, a legend on the data, and texts outside their axes or the
figure.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import zlib
from typing import Any

from openmrc.pipeline.report import LAYOUT_KEY

Box = list[float]


def png_text(png: bytes) -> dict[str, str]:
    """The tEXt/zTXt/iTXt chunks of a PNG, by keyword."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    out: dict[str, str] = {}
    pos = 8
    while pos + 8 <= len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind = png[pos + 4 : pos + 8]
        data = png[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"tEXt":
            key, _, value = data.partition(b"\0")
            out[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, rest = data.partition(b"\0")
            out[key.decode("latin-1")] = zlib.decompress(rest[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = data.partition(b"\0")
            compressed = rest[0]
            _lang, _, rest = rest[2:].partition(b"\0")
            _tkey, _, text = rest.partition(b"\0")
            out[key.decode("utf-8")] = (zlib.decompress(text) if compressed else text).decode()
        elif kind == b"IEND":
            break
    return out


def layout(png: bytes) -> dict[str, Any]:
    """The figure layout a PNG from openmrc.pipeline.report carries."""
    text = png_text(png)
    assert LAYOUT_KEY in text, f"no {LAYOUT_KEY} chunk in the PNG"
    result: dict[str, Any] = json.loads(text[LAYOUT_KEY])
    return result


def page_images(page: str) -> dict[str, bytes]:
    """The embedded PNGs of a report page, by image id."""
    found = re.findall(r"<img id='img-([^']+)'[^>]*src='data:image/png;base64,([^']+)'", page)
    return {pid: base64.b64decode(data) for pid, data in found}


def _overlap(a: Box, b: Box) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return max(0.0, w) * max(0.0, h)


def _inside(inner: Box, outer: Box, slack: float = 2.0) -> bool:
    return (
        inner[0] >= outer[0] - slack
        and inner[1] >= outer[1] - slack
        and inner[2] <= outer[2] + slack
        and inner[3] <= outer[3] + slack
    )


def problems(fig: dict[str, Any]) -> list[str]:
    """What is wrong with one figure's layout (empty list: nothing)."""
    out = []
    width, height = fig["size"]
    page = [0.0, 0.0, width, height]
    axes = fig["axes"]
    for i, ax in enumerate(axes):
        name = f"axes {i} ({ax['label']!r})"
        if not _inside(ax["tight"], page):
            out.append(f"{name}: sticks out of the figure {ax['tight']} vs {page}")
        if not ax["colorbar"]:
            if ax["points"] == 0:
                out.append(f"{name}: empty (no data drawn)")
            elif ax["distinct_x"] < 2:
                out.append(f"{name}: a plot of a single point")
        if ax["legend_covers"]:
            out.append(f"{name}: its legend covers {ax['legend_covers']} data points")
        for t in ax["texts"]:
            if not _inside(t["box"], ax["box"]):
                out.append(f"{name}: text {t['text']!r} outside the axes")
        for j in range(i + 1, len(axes)):
            if _overlap(ax["tight"], axes[j]["tight"]) > 1.0:
                out.append(f"{name} overlaps axes {j} ({axes[j]['label']!r})")
    for legend in fig["legends"]:
        if not _inside(legend, page):
            out.append("a figure legend sticks out of the figure")
        for i, ax in enumerate(axes):
            if _overlap(legend, ax["box"]) > 1.0:
                out.append(f"a figure legend covers axes {i} ({ax['label']!r})")
    return out
