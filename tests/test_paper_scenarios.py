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


def _perm_steady(name: str) -> list[float]:
    d = copy.deepcopy(_data(name))
    d["fabric"].update(host_gbps=100, fabric_gbps=100)
    for f in d["workload"]["flows"]:
        f["size"] = "4MiB"
    res = parse(d).run()
    assert res.all_ok
    return sorted(f.steady_goodput_gbps or 0.0 for f in res.flows)


def test_rack_permutation_roce_uneven_mrc_at_line_rate() -> None:
    roce = _perm_steady("permutation-racks-roce-1qp")
    mrc = _perm_steady("permutation-racks-mrc")
    # RoCE payload rate at 100G is 97 Gb/s, MRC's 95.7 (bigger headers)
    assert roce[0] <= 0.6 * 97 and roce[-1] >= 0.9 * 97  # ECMP collisions: uneven
    assert mrc[0] >= 0.9 * 95.7  # spraying: every flow at line rate


def _ring8(name: str, until_us: float | None = None, size: str = "8MiB") -> float:
    """The 64-rank ring file cut to 8 ranks on 2 T0s (every hop still crosses T0s)."""
    d = copy.deepcopy(_data(name))
    d["fabric"].update(t0s=2, hosts_per_t0=4, t1s=4)
    d["workload"]["placement"] = [(r % 2) * 4 + r // 2 for r in range(8)]
    d["workload"]["size"] = size
    if until_us is not None:
        d.setdefault("run", {})["until_us"] = until_us
    res = parse(d).run()
    (c,) = res.collectives
    return float(c["busbw_gbps"])


def test_ring_roce_one_qp_about_half_of_mrc() -> None:
    # 16 MiB: bandwidth- rather than latency-bound (0.56 here; 0.63 at 8 MiB)
    roce = _ring8("ring-allreduce-64-roce-1qp", size="16MiB")
    mrc = _ring8("ring-allreduce-64-mrc", size="16MiB")
    assert 0 < roce <= 0.65 * mrc


def test_ring_mrc_above_roce_16_qps() -> None:
    assert _ring8("ring-allreduce-64-mrc") > _ring8("ring-allreduce-64-roce-16qp")


def test_ring_mrc_barely_moved_by_0_1_percent_loss() -> None:
    # The paper: 0.1 % random loss at every NIC ingress barely moves MRC
    # (issue 9: within 15 %).  Each loss costs RACK's window, so that window
    # must follow the reordering measured, not a fixed two base RTTs (0.78).
    clean = _ring8("ring-allreduce-64-mrc")
    lossy = _ring8("ring-allreduce-64-mrc-loss0.1")
    print(f"8-rank ring busbw: MRC {clean:.1f}, at 0.1 % loss {lossy:.1f} ({lossy / clean:.2f})")
    assert lossy >= 0.85 * clean


def test_ring_one_percent_loss_makes_roce_unusable_not_mrc() -> None:
    roce = _ring8("ring-allreduce-64-roce-1qp-loss1", until_us=2000)
    mrc = _ring8("ring-allreduce-64-mrc-loss1", until_us=2000)
    print(f"8-rank ring busbw at 1 % loss: RoCE 1 QP {roce:.1f}, MRC {mrc:.1f}")
    assert mrc > 0 and roce < 0.2 * mrc


def _a2a16(name: str) -> tuple[float, int]:
    """The 64-rank all-to-all cut to 16 ranks on 4 T0s x 4 hosts, 4 T1s: (busbw, EVs blamed).

    With only 2 T0s (8 ranks) the cross-T0 flows are too few to collide on
    RoCE's ECMP uplinks and the fabric never limits anyone; with 4 T0s they do,
    as on the paper's 64-GPU fabric.
    """
    d = copy.deepcopy(_data(name))
    d["fabric"].update(t0s=4, hosts_per_t0=4, t1s=4)
    res = parse(d).run()
    (c,) = res.collectives
    return float(c["busbw_gbps"]), sum(f.evs_assumed_bad for f in res.flows)


def test_alltoall_mrc_ahead_of_roce_and_blames_no_healthy_path() -> None:
    mrc, blamed = _a2a16("alltoall-64-mrc")
    roce1, _ = _a2a16("alltoall-64-roce-1qp")
    roce16, _ = _a2a16("alltoall-64-roce-16qp")
    print(f"16-rank all-to-all busbw: MRC {mrc:.1f}, RoCE 1 QP {roce1:.1f}, 16 QPs {roce16:.1f}")
    assert mrc > roce1 and mrc > roce16
    # Nothing is lost in this fabric: every QP starting at once reorders its
    # first window by more than RACK's floor, which must not blame paths.
    assert blamed == 0
