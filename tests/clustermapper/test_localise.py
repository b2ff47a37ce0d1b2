"""The shared self-probe localisation logic (openmrc.clustermapper.localise), without any fabric."""

from __future__ import annotations

import ast
import select
import time
from pathlib import Path

import pytest

import openmrc.clustermapper.localise as cm
from openmrc.clustermapper.localise import T0_TARGET, Localiser, self_probe_usids
from openmrc.topology import ClosSpec, Topology, usid_str

TOPO = Topology(ClosSpec(planes=2, t0s=3, hosts_per_t0=2, t1s=4))


def _round(loc: Localiser, lost: set[tuple[int, int, int]], now: int) -> list[cm.Finding]:
    """One round where every probe comes back except those of the ``lost`` targets."""
    for h in range(TOPO.spec.hosts):
        for plane in range(TOPO.spec.planes):
            for k in loc.targets(h, 2, 2):
                loc.sent(h, plane, k)
                if (h, plane, k) not in lost:
                    loc.back(h, plane, k)
    return loc.close_round(now)


def test_it_imports_neither_sim_nor_net() -> None:
    tree = ast.parse(Path(cm.__file__).read_text())
    mods = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m.startswith(("openmrc.sim", "openmrc.net", "openmrc.cli")) for m in mods)
    assert not any(m.startswith((".sim", ".net", "sim", "net")) for m in mods)


def test_self_probe_routes_turn_at_the_t0_or_the_t1() -> None:
    # h3 is host 1 under T0 1: up to p1t0x1 and down port 1, or via T1 2 and back
    assert [usid_str(u) for u in self_probe_usids(TOPO, 3, 1, T0_TARGET)] == [
        "T0(p1,1)=0x4401",
        "DOWN(p1,1)=0xc401",
    ]
    assert [usid_str(u) for u in self_probe_usids(TOPO, 3, 1, 2)] == [
        "T0(p1,1)=0x4401",
        "T1(p1,2)=0x8402",
        "T0(p1,1)=0x4401",
        "DOWN(p1,1)=0xc401",
    ]


def test_the_hosts_of_each_t0_cover_every_t1() -> None:
    loc = Localiser(TOPO)
    for a in range(TOPO.spec.t0s):
        covered = set().union(*(loc.t1s_of[h] for h in (2 * a, 2 * a + 1)))
        assert covered == set(range(TOPO.spec.t1s))


@pytest.mark.parametrize(
    ("lost", "named"),
    [
        ({(3, 1, T0_TARGET)} | {(3, 1, k) for k in range(4)}, ("nic_t0_link", "h3-p1t0x1")),
        ({(h, 0, T0_TARGET) for h in (4, 5)} | {(h, 0, k) for h in (4, 5) for k in range(4)},
         ("t0", "p0t0x2")),
        ({(h, 1, 2) for h in range(6)}, ("t1", "p1t1x2")),
        ({(h, 0, 3) for h in (0, 1)}, ("t0_t1_link", "p0t0x0-p0t1x3")),
    ],
)  # fmt: skip
def test_which_probes_fail_names_the_element(
    lost: set[tuple[int, int, int]], named: tuple[str, str]
) -> None:
    loc = Localiser(TOPO)
    for now in range(1, 6):
        assert _round(loc, set(), now) == []
    # After five clean rounds, one dead round of two probes per target is not a
    # failure yet (MIN_DEAD_PROBES): the second names it.
    assert _round(loc, lost, 6) == []
    found = _round(loc, lost, 7) + _round(loc, lost, 8)
    assert [(f.kind, f.element) for f in found] == [named]
    assert [(r["kind"], r["element"], r["time_ps"]) for r in loc.report()] == [(*named, 7)]


def test_a_lossy_nic_link_is_told_from_a_dead_one_and_repair_clears() -> None:
    loc = Localiser(TOPO, window=4)
    # one of two T0 probes lost in two rounds out of three: lossy, not failed
    for now, lose in ((1, True), (2, False), (3, True)):
        for h in range(TOPO.spec.hosts):
            for plane in range(2):
                for i, k in enumerate(loc.targets(h, 4, 1)):
                    loc.sent(h, plane, k)
                    if not (lose and (h, plane) == (1, 0) and k == T0_TARGET and i == 0):
                        loc.back(h, plane, k)
        found = loc.close_round(now)
    kinds = [(r["kind"], r["element"]) for r in loc.report()]
    assert kinds == [("lossy_nic_t0_link", "h1-p0t0x0")]
    # named after the second lossy round (one could be the start of a failure)
    assert [(f.kind, f.host) for f in found] == [("lossy_nic_t0_link", 1)]
    assert loc.found["h1-p0t0x0"]["time_ps"] == 3 and loc.found["h1-p0t0x0"]["cleared_ps"] is None
    for now in range(4, 9):
        _round(loc, set(), now)
    assert loc.found["h1-p0t0x0"]["cleared_ps"] is not None


def test_bad_parameters_are_named() -> None:
    for kwargs, field in (
        ({"window": 0}, "window"),
        ({"fail_rate": 2}, "fail_rate"),
        ({"lossy_rate": 0}, "lossy_rate"),
        ({"t1_subset": 0}, "t1_subset"),
    ):
        with pytest.raises(ValueError, match=f"^{field}: "):
            Localiser(TOPO, **kwargs)  # type: ignore[arg-type]


def test_a_lossy_t0_t1_link_is_named_lossy_never_failed() -> None:
    import random

    # After five clean rounds, T0 2's probes through T1 1 (host 4's) lose each probe
    # with probability 0.36 (a 20 % lossy link, crossed twice) for 195 rounds.  Before, the window's loss
    # crossing 0.5 named it as *failed*, by chance, and there was no lossy verdict.
    for seed in range(1, 6):
        rng = random.Random(seed)
        loc = Localiser(TOPO)
        reports = []
        for now in range(1, 201):
            for h in range(TOPO.spec.hosts):
                for plane in range(TOPO.spec.planes):
                    for k in loc.targets(h, 2, 2):
                        loc.sent(h, plane, k)
                        if now <= 5 or (h, plane, k) != (4, 0, 1) or rng.random() >= 0.36:
                            loc.back(h, plane, k)
            reports += [(f.kind, f.element, now) for f in loc.close_round(now)]
        (_, element, when) = reports[0]
        assert [r[:2] for r in reports] == [("lossy_t0_t1_link", "p0t0x2-p0t1x1")]
        assert when <= 5 + 10
        assert loc.found[element]["cleared_ps"] is None


def test_a_round_counts_probes_queued_by_its_deadline() -> None:
    """A probe that came back before the round's deadline counts, even when the
    prober reads its socket only after the deadline (descheduled on a loaded
    machine): the collector looks once more without waiting before it gives up."""
    import socket

    from openmrc.clustermapper.lab_agent import _BODY, MAGIC, SelfProber

    backs: list[tuple[int, int, int]] = []

    class _Localiser:
        def back(self, h: int, plane: int, k: int) -> None:
            backs.append((h, plane, k))

    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.setblocking(False)
    try:
        prober = object.__new__(SelfProber)
        prober.timeout = 0.0  # the deadline has passed by the time the round collects
        prober._socks = {0: sock}
        prober._inflight = {7: (0, 1, 2)}
        prober.localiser = _Localiser()  # type: ignore[assignment]
        prober.probes_back = 0
        sock.sendto(MAGIC + _BODY.pack(7, 0), sock.getsockname())
        deadline = time.monotonic() + 2.0
        while not select.select([sock], [], [], 0.05)[0] and time.monotonic() < deadline:
            pass  # (wait until the datagram is queued)
        prober._collect()
    finally:
        sock.close()
    assert backs == [(0, 1, 2)] and prober.probes_back == 1 and prober._inflight == {}
