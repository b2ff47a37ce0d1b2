"""``openmrc topo``: the paper's topology arithmetic, closed form, at the paper's scale."""

from __future__ import annotations

import json

import pytest

from openmrc.cli import main
from openmrc.topocalc import Design, compare, parse_rate_gbps, single_plane_equivalent


def _loss(d: dict, failure: str) -> dict:
    return next(r for r in d["failure_loss"] if r["failure"] == failure)


def test_paper_figures_for_51t_switches_100g_8_planes() -> None:
    multi = Design(radix=512, speed_gbps=100, planes=8, tiers=2)
    single = single_plane_equivalent(multi, tiers=3)
    assert (single.radix, single.speed_gbps, single.planes) == (64, 800, 1)
    result = compare(multi, single)
    a, b = result["multi"], result["single"]
    assert a["hosts"] == 131_072 and b["hosts"] == 65_536
    assert a["switches_per_plane_per_tier"] == {"T0": 512, "T1": 256}
    assert a["switches"] == 6_144 and b["switches"] == 5_120
    assert b["switches_per_plane_per_tier"] == {"T0": 2048, "T1": 2048, "T2": 1024}
    assert round(_loss(a, "T0-T1 link")["of_plane_pct"], 1) == 0.4
    assert _loss(a, "NIC-T0 link")["of_node_pct"] == 12.5
    assert round(_loss(b, "T0-T1 link")["of_plane_pct"]) == 3
    assert _loss(b, "NIC-T0 link")["of_node_pct"] == 100.0
    assert _loss(b, "T1-T2 link")["of_plane_pct"] == pytest.approx(100 / 32**2, abs=1e-4)
    assert _loss(b, "T2")["of_plane_pct"] == pytest.approx(100 / 32**2, abs=1e-4)
    assert _loss(a, "T1")["of_node_pct"] == pytest.approx(100 / 256 / 8, abs=1e-4)
    assert (a["longest_path_switches"], b["longest_path_switches"]) == (3, 5)
    assert (a["one_hop_reach"], b["one_hop_reach"]) == (256, 32)
    assert result["optics_per_host_ratio_fraction"] == "2/3"
    assert result["switches_per_host_ratio_fraction"] == "3/5"
    assert [layer["links"] for layer in a["layers"]] == [131_072 * 8] * 2


def test_general_tiers_match_the_closed_forms() -> None:
    for radix in (4, 8, 64, 512):
        k = radix // 2
        two = Design(radix, 100, 1, 2)
        three = Design(radix, 100, 1, 3)
        assert two.hosts == radix**2 // 2 and two.switches == 3 * k
        assert three.hosts == radix**3 // 4 and three.switches == 5 * radix**2 // 4
        # every switch port is used once: hosts + 2 * inter-switch links = ports
        for d in (two, three):
            links = d.hosts * d.tiers
            assert d.hosts + 2 * (links - d.hosts) == d.switches * radix


def test_topo_command_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "--switch", "51.2T", "--speed", "100G", "--planes", "8", "--compare"]) == 0
    out = capsys.readouterr().out
    assert "131,072" in out and "3/5 of the switches and 2/3 of the optics" in out
    assert main(["topo", "--radix", "512", "--speed", "100G", "--planes", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["hosts"] == 131_072 and data["longest_path_switches"] == 3
    assert (
        main(
            ["topo", "--radix", "64", "--speed", "800G", "--planes", "1", "--tiers", "3", "--json"]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["hosts"] == 65_536 and data["switches"] == 5_120


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["topo", "--radix", "7"], "--radix: must be an even number"),
        (["topo", "--speed", "fast"], "--speed: 'fast' is not a rate"),
        (["topo", "--switch", "51.2T", "--speed", "300G"], "--switch: 51.2T is not a whole number"),
        (["topo", "--planes", "0"], "--planes: must be >= 1"),
        (["topo", "--radix", "64", "--switch", "51.2T"], "--radix: give --radix or --switch"),
    ],
)
def test_bad_topo_flags_name_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
    assert len(captured.err.strip().splitlines()) == 1


def test_rate_parser() -> None:
    assert parse_rate_gbps("51.2T", "x") == pytest.approx(51_200)
    assert parse_rate_gbps("100G", "x") == 100
    assert parse_rate_gbps("800Gb/s", "x") == 800
    assert parse_rate_gbps("400", "x") == 400
    with pytest.raises(ValueError, match="x: must be a positive rate"):
        parse_rate_gbps("0G", "x")
