"""Tests of the Clos topology arithmetic, uSID plan and forwarding tables."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openmrc.topology import (
    BLOCK,
    KIND_DOWN,
    KIND_T0,
    KIND_T1,
    ClosSpec,
    Topology,
    active_usid,
    shift_address,
    unpack_address,
    usid,
)
from openmrc.transport.ev import make_ev


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("planes", 0, "between 1 and 16"),
        ("planes", 17, "between 1 and 16"),
        ("t0s", 0, "between 1 and 1024"),
        ("hosts_per_t0", 1025, "between 1 and 1024"),
        ("t1s", 0, "between 1 and 1024"),
        ("t1s", 2.5, "integer"),
        ("host_gbps", 0.0, "positive"),
        ("fabric_gbps", -1.0, "positive"),
        ("link_delay_ps", -1, "negative"),
    ],
)
def test_validation_names_field(field: str, value: object, needle: str) -> None:
    spec = ClosSpec(**{field: value})  # type: ignore[arg-type]  # wrong types are the test
    with pytest.raises(ValueError, match=f"ClosSpec.{field}: .*{needle}"):
        spec.validate()
    with pytest.raises(ValueError, match=f"ClosSpec.{field}"):
        Topology(spec)


def test_exact_message() -> None:
    with pytest.raises(ValueError) as exc:
        ClosSpec(t1s=0).validate()
    assert str(exc.value) == "ClosSpec.t1s: must be between 1 and 1024, got 0"


@pytest.mark.parametrize(
    "spec",
    [ClosSpec(), ClosSpec(planes=1, t0s=1, hosts_per_t0=2, t1s=1), ClosSpec(3, 5, 2, 7)],
)
def test_counts(spec: ClosSpec) -> None:
    topo = Topology(spec)
    assert len(topo.switches) == spec.planes * (spec.t0s + spec.t1s)
    assert len(topo.links) == spec.planes * (spec.hosts + spec.t0s * spec.t1s)
    assert len(topo.hosts) == spec.hosts == spec.t0s * spec.hosts_per_t0
    assert len({s.name for s in topo.switches}) == len(topo.switches)
    assert len({s.usid for s in topo.switches}) == len(topo.switches)
    assert len({link.name for link in topo.links}) == len(topo.links)


def test_names_and_ports() -> None:
    topo = Topology(ClosSpec(planes=2, t0s=3, hosts_per_t0=4, t1s=5))
    assert topo.host_name(7) == "h7"
    assert topo.t0_name(1, 2) == "p1t0x2"
    assert topo.t1_name(0, 4) == "p0t1x4"
    link = topo.host_link(7, 1)
    assert (link.a, link.a_port, link.b, link.b_port) == ("h7", 1, "p1t0x1", 3)
    up = topo.link_between("p1t1x4", "p1t0x2")
    assert (up.a, up.a_port, up.b, up.b_port) == ("p1t0x2", 4 + 4, "p1t1x4", 2)
    # every port of every node used exactly once
    used: set[tuple[str, int]] = set()
    for link in topo.links:
        for end in ((link.a, link.a_port), (link.b, link.b_port)):
            assert end not in used
            used.add(end)
    assert sum(1 for n, _ in used if n == "p0t0x0") == 4 + 5
    assert sum(1 for n, _ in used if n == "p0t1x0") == 3
    assert sum(1 for n, _ in used if n == "h0") == 2


def test_usid_formula() -> None:
    topo = Topology(ClosSpec(planes=4, t0s=3, hosts_per_t0=2, t1s=3))
    assert topo.usid_of("p2t0x1") == (1 << 14) | (2 << 10) | 1
    assert topo.usid_of("p3t1x2") == (2 << 14) | (3 << 10) | 2
    assert usid(KIND_DOWN, 1, 5) == (3 << 14) | (1 << 10) | 5
    with pytest.raises(ValueError, match="index"):
        usid(KIND_T0, 0, 1024)


def test_path_usids() -> None:
    topo = Topology(ClosSpec(planes=8, t0s=4, hosts_per_t0=4, t1s=4))
    ev = make_ev(3, 6)
    assert topo.path_usids(1, 13, ev) == [
        usid(KIND_T0, 3, 0),
        usid(KIND_T1, 3, 6 % 4),
        usid(KIND_T0, 3, 3),
        usid(KIND_DOWN, 3, 1),
    ]
    assert topo.path_usids(1, 2, ev) == [usid(KIND_T0, 3, 0), usid(KIND_DOWN, 3, 2)]
    with pytest.raises(ValueError, match="same host"):
        topo.path_usids(2, 2, ev)
    with pytest.raises(ValueError, match="plane"):
        Topology(ClosSpec(planes=2)).path_usids(0, 5, make_ev(3, 0))


def test_path_address_packing() -> None:
    topo = Topology()
    ev = make_ev(5, 2)
    usids = topo.path_usids(0, 15, ev)
    addr = topo.path_address(0, 15, ev)
    assert addr >> 96 == 0xFCBB0000
    expected = BLOCK
    for i, u in enumerate(usids):
        expected |= u << (80 - 16 * i)
    assert addr == expected
    assert unpack_address(addr) == usids
    assert addr & ((1 << 32) - 1) == 0  # zero padded


def test_tables() -> None:
    spec = ClosSpec(planes=2, t0s=3, hosts_per_t0=2, t1s=4)
    topo = Topology(spec)
    tables = topo.tables()
    assert set(tables) == {s.name for s in topo.switches}
    t0 = tables["p1t0x2"]
    assert t0 == {
        **{usid(KIND_T1, 1, k): 2 + k for k in range(4)},
        **{usid(KIND_DOWN, 1, d): d for d in range(2)},
    }
    assert tables["p0t1x3"] == {usid(KIND_T0, 0, i): i for i in range(3)}
    text = topo.format_tables()
    assert "p1t0x2" in text and "DOWN(p1,1)" in text


def _walk(topo: Topology, src: int, dst: int, ev: int) -> tuple[list[str], int]:
    """Follow match/shift/lookup from src's T0; return the switches visited and the host reached."""
    tables = topo.tables()
    spec = topo.spec
    plane = ev & 0xF
    addr = topo.path_address(src, dst, ev)
    node = topo.t0_name(plane, src // spec.hosts_per_t0)
    visited = []
    while True:
        visited.append(node)
        assert active_usid(addr) == topo.usid_of(node)
        addr = shift_address(addr)
        port = tables[node][active_usid(addr)]
        sw = topo.switch(node)
        if sw.tier == 1:
            node = topo.t0_name(plane, port)
        elif port >= spec.hosts_per_t0:
            node = topo.t1_name(plane, port - spec.hosts_per_t0)
        else:
            return visited, sw.index * spec.hosts_per_t0 + port


@settings(max_examples=200, deadline=None)
@given(
    planes=st.integers(1, 16),
    t0s=st.integers(1, 6),
    hpt=st.integers(1, 6),
    t1s=st.integers(1, 6),
    data=st.data(),
)
def test_routes_reach_destination(planes: int, t0s: int, hpt: int, t1s: int, data) -> None:
    topo = Topology(ClosSpec(planes=planes, t0s=t0s, hosts_per_t0=hpt, t1s=t1s))
    if topo.spec.hosts < 2:
        return
    src = data.draw(st.integers(0, topo.spec.hosts - 1))
    dst = data.draw(st.integers(0, topo.spec.hosts - 1).filter(lambda x: x != src))
    plane = data.draw(st.integers(0, planes - 1))
    path = data.draw(st.integers(0, 4095))
    ev = make_ev(plane, path)
    visited, reached = _walk(topo, src, dst, ev)
    assert reached == dst
    if src // hpt == dst // hpt:
        assert visited == [topo.t0_name(plane, src // hpt)]
    else:
        assert visited[1] == topo.t1_name(plane, path % t1s)
        assert len(visited) == 3


def test_host_address_unique() -> None:
    topo = Topology(ClosSpec(planes=4, t0s=5, hosts_per_t0=3, t1s=2))
    addrs = {topo.host_address(h, p) for h in range(topo.spec.hosts) for p in range(4)}
    assert len(addrs) == topo.spec.hosts * 4
    # the address starts with the block then the host's downlink uSID
    a = topo.host_address(7, 2)
    assert a >> 96 == 0xFCBB0000
    assert unpack_address(a) == [usid(KIND_DOWN, 2, 1), usid(KIND_T0, 2, 2)]


def test_address_plan_json() -> None:
    topo = Topology(ClosSpec(planes=2, t0s=2, hosts_per_t0=2, t1s=2))
    plan = json.loads(json.dumps(topo.address_plan()))
    assert len(plan["switches"]) == 8
    assert len(plan["hosts"]) == 4
    assert len(plan["hosts"][0]["addresses"]) == 2
    assert plan["hosts"][3]["addresses"][1].startswith("fcbb:0:")
    assert len(plan["links"]) == 2 * (4 + 4)
