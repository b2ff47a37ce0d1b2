"""The bundled paper scenarios (scenarios/paper/), run at reduced size: the published shapes."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from openmrc.scenario import parse

PAPER = Path(__file__).resolve().parent.parent / "scenarios" / "paper"


def _data(name: str) -> dict[str, Any]:
    return tomllib.loads((PAPER / f"{name}.toml").read_text())


def _shrink_incast(data: dict[str, Any], victim_alone: bool = False) -> dict[str, Any]:
    """100G links and 4 MiB flows instead of 400G and 16 MiB (same shape, 16x fewer packets)."""
    d = copy.deepcopy(data)
    d["fabric"].update(host_gbps=100, fabric_gbps=100)
    for f in d["workload"]["flows"]:
        f["size"] = "4MiB"
    if victim_alone:
        d["workload"]["flows"] = d["workload"]["flows"][-1:]
    return d


def _victim(data: dict[str, Any]) -> float:
    res = parse(data).run()
    assert res.all_ok
    victim = res.flows[-1]
    assert victim.src == 13 and victim.dst == 1
    assert victim.steady_goodput_gbps is not None
    return victim.steady_goodput_gbps


@pytest.mark.parametrize("name", [p.stem for p in sorted(PAPER.glob("*.toml"))])
def test_every_paper_scenario_says_what_was_published(name: str) -> None:
    text = (PAPER / f"{name}.toml").read_text()
    assert "Published" in text and "Expected shape" in text
    parse(tomllib.loads(text))


def test_incast_victim_mrc_untouched_pfc_below_half() -> None:
    alone = _victim(_shrink_incast(_data("incast-victim-mrc"), victim_alone=True))
    mrc = _victim(_shrink_incast(_data("incast-victim-mrc")))
    pfc_alone = _victim(_shrink_incast(_data("incast-victim-pfc"), victim_alone=True))
    pfc = _victim(_shrink_incast(_data("incast-victim-pfc")))
    assert mrc >= 0.9 * alone
    assert pfc < 0.5 * pfc_alone
