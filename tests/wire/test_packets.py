"""Packet objects: equality, copies and field lists, compiled or interpreted."""

from __future__ import annotations

import pytest

from openmrc.baselines.roce import RoceData
from openmrc.wire.packets import (
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    SackPacket,
    copy_packet,
    packet_fields,
)


def _data(psn: int = 3, length: int = 100) -> DataPacket:
    return DataPacket(1, 2, Opcode.WRITE_ONLY, psn, 4, 5, 6, length)


def test_equality_compares_every_field() -> None:
    assert _data() == _data()
    assert _data(psn=3) != _data(psn=4)
    assert _data(length=100) != _data(length=101)
    p = _data()
    p.ecn = True
    assert p != _data()
    assert SackPacket(1, 1, 10, 10, 0) != SackPacket(1, 1, 10, 10, 1)
    assert NackPacket(1, 1, NackReason.TRIMMED, 1, 1) != NackPacket(1, 1, NackReason.TRIMMED, 2, 1)
    assert ProbePacket(1, 1, 1, 1) != object()


def test_route_meta_and_size_do_not_count() -> None:
    p = _data()
    p.route, p.meta = 7, "x"
    assert p == _data()


def test_packets_are_not_hashable() -> None:
    with pytest.raises(TypeError):
        hash(_data())


def test_fields_list_the_bases_first_and_a_subclass_s_own() -> None:
    names = packet_fields(DataPacket)
    assert names[:7] == ["dqpn", "ecn", "ev", "meta", "path_ev", "route", "size"]
    assert {"psn", "msn", "va", "rkey", "length", "opcode", "payload"} <= set(names)
    assert {"dst", "src", "sport", "last"} <= set(packet_fields(RoceData))


def test_copy_is_a_new_object_with_every_field() -> None:
    p = _data()
    p.route, p.meta, p.ecn = 7, "x", True
    c = copy_packet(p)
    assert c is not p and type(c) is DataPacket
    assert all(getattr(c, n) == getattr(p, n) for n in packet_fields(DataPacket))
    r = RoceData(1, 2, 0, 0, 1000, False, 0, 1, 50000)
    rc = copy_packet(r)
    assert type(rc) is RoceData
    assert all(getattr(rc, n) == getattr(r, n) for n in packet_fields(RoceData))


def test_data_packets_of_one_size_share_its_object() -> None:
    # (the simulator's ports read ``size`` at every hop: one int object for the packets
    # of a size, not one allocated per packet and cold by the next hop)
    a, b = _data(length=4096), _data(length=4096)
    assert a.size == b.size == 144 + 4096 and a.size is b.size
    c = DataPacket(1, 2, Opcode.WRITE_ONLY_IMM, 3, 4, 5, 6, 4096, imm=9)
    d, e = _data(length=100), _data(length=4096)
    assert (c.size, d.size, e.size) == (4244, 244, 4240)
    e.trim(lasthop=False)
    assert e.size == 144 and a.size == 4240
