"""Self-probe fault localisation over the lab's real SRv6 fabric (``openmrc lab localise``).

Each test builds its own small lab (2 planes, 2 T0s, 1 host per T0, 2 T1s),
breaks one element with ``Lab.fail`` and checks that the self-probes name
exactly that element.  No timing assertion: a round waits a generous 0.5 s.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from openmrc.cli import lab as lab_cli
from openmrc.clustermapper.lab_agent import SelfProber
from openmrc.net.lab import Lab
from tests.tools import needs_tool

pytestmark = pytest.mark.lab

SPEC = "planes=2,t0s=2,hosts_per_t0=1,t1s=2"


def _named(lab: Lab, rounds: int = 2) -> list[tuple[str, str]]:
    res = SelfProber(lab).run(rounds)
    assert res.probes_sent > 0
    return [(r["kind"], r["element"]) for r in res.active()]


@pytest.mark.parametrize(
    ("target", "mode", "kind"),
    [
        ("h0-p1t0x0", "down", "nic_t0_link"),  # NIC-T0 link: both ends admin-down
        ("p0t0x1-p0t1x0", "down", "t0_t1_link"),
        ("p1t1x1", "down", "t1"),  # a T1 down: every port admin-down
        # a T1 up but dropping everything (nftables)
        pytest.param("p0t1x0", "silent", "t1", marks=needs_tool("nft")),
    ],
)
def test_self_probes_name_the_broken_element(
    make_lab: Callable[..., Lab], target: str, mode: str, kind: str
) -> None:
    lab = make_lab(SPEC)
    assert _named(lab, rounds=1) == []  # healthy: every probe comes back
    lab.fail(target, mode)
    assert _named(lab) == [(kind, target)]


@needs_tool("nft")
def test_a_silent_t0_t1_link_and_repair(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(SPEC)
    prober = SelfProber(lab)
    with prober:
        lab.fail("p1t0x0-p1t1x1", "silent")
        prober.run_round()
        prober.run_round()
        assert [(r["kind"], r["element"]) for r in prober.result().active()] == [
            ("t0_t1_link", "p1t0x0-p1t1x1")
        ]
        lab.restore()
        for _ in range(prober.localiser.window):  # the failed rounds age out of the window
            prober.run_round()
    res = prober.result()
    assert res.active() == []
    assert [r["element"] for r in res.localised] == ["p1t0x0-p1t1x1"]
    assert res.localised[0]["cleared_ps"] is not None


@needs_tool("nft")
def test_lab_localise_cli(lab_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    lab = Lab.up(SPEC, lab_name)
    lab.fail("p1t1x0", "silent")
    assert lab_cli.main(["lab", "localise", "--name", lab_name, "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert "localised t1 p1t1x0 (plane 1)" in out
    assert lab_cli.main(["lab", "localise", "--name", lab_name, "--rounds", "1", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["element"]) for r in data["localised"]] == [("t1", "p1t1x0")]


def test_lab_localise_bad_flags_are_named(
    make_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    lab = make_lab(SPEC)
    for flags, field in (
        (["--rounds", "0"], "--rounds"),
        (["--timeout", "-1"], "--timeout"),
        (["--t0-probes", "0"], "--t0-probes"),
        (["--t1-subset", "0"], "--t1-subset"),
    ):
        assert lab_cli.main(["lab", "localise", "--name", lab.name, *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"openmrc lab: {field}:"), err
        assert "Traceback" not in err


@needs_tool("nft")
def test_a_lossy_nic_link_is_named_and_its_plane_denied_at_the_host(
    make_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    from openmrc.net.driver import LabPeer, NetEndpoint

    lab = make_lab(SPEC)
    # 10 % each way: about 19 % of the probes lost, far from the 50 % of a failure
    lab.fail("h0-p0t0x0", "loss", 10)

    async def main() -> tuple[int, int]:
        ep = NetEndpoint(netns=lab.host_netns(0), lab=lab, host=0)
        async with ep:
            conn = ep.create_connection()
            conn.connect(0x100, LabPeer(1))  # towards h1: QP in RTS
            # --timeout 2: a round waits long enough that, on a loaded machine, a late
            # answer from a clean link is not counted as lost (which names it lossy)
            argv = ["lab", "localise", "--name", lab.name, "--rounds", "4", "--t0-probes", "16"]
            argv += ["--timeout", "2"]
            loop = asyncio.get_running_loop()
            code = await loop.run_in_executor(None, lab_cli.main, [*argv, "--deny-lossy"])
            assert conn.qp.paths is not None
            return code, conn.qp.paths.denied_planes

    code, denied = asyncio.run(main())
    out = capsys.readouterr().out
    assert code == 0
    assert "localised lossy_nic_t0_link h0-p0t0x0 (plane 0)" in out
    assert "denied plane 0 on h0" in out
    assert denied == 0b01
