"""Tests of openmrc.wire.srv6: uSID construction, shifting and parsing."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openmrc.wire.srv6 import (
    DEFAULT_BLOCK,
    KIND_DOWN,
    KIND_T0,
    KIND_T1,
    MAX_USIDS,
    active_usid,
    shift,
    to_ipv6,
    usid,
    usid_address,
    usids_of,
)

usid_values = st.integers(1, 0xFFFF)


def test_usid_layout() -> None:
    assert (KIND_T0, KIND_T1, KIND_DOWN) == (1, 2, 3)
    assert usid(KIND_T0, 0, 0) == 0x4000
    assert usid(KIND_T1, 15, 1023) == 0xBFFF
    assert usid(KIND_DOWN, 3, 5) == (3 << 14) | (3 << 10) | 5


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0, 0, 0), "kind"),
        ((4, 0, 0), "kind"),
        ((1, 16, 0), "plane"),
        ((1, -1, 0), "plane"),
        ((1, 0, 1024), "index"),
        ((1, 0, -1), "index"),
    ],
)
def test_usid_validation(args: tuple[int, int, int], name: str) -> None:
    with pytest.raises(ValueError, match=f"^{name}: "):
        usid(*args)


def test_address_text_form() -> None:
    addr = usid_address([0x4003, 0x8004])
    assert to_ipv6(addr) == ipaddress.IPv6Address("fcbb:0:4003:8004::")
    assert usid_address([]) == DEFAULT_BLOCK << 96
    full = usid_address([1, 2, 3, 4, 5, 6], block=0x20010DB8)
    assert to_ipv6(full) == ipaddress.IPv6Address("2001:db8:1:2:3:4:5:6")


def test_usid_address_validation() -> None:
    with pytest.raises(ValueError, match="usids: 7 uSIDs"):
        usid_address([1] * 7)
    with pytest.raises(ValueError, match=r"usids\[1\]"):
        usid_address([1, 0])
    with pytest.raises(ValueError, match=r"usids\[0\]"):
        usid_address([0x10000])
    with pytest.raises(ValueError, match="block"):
        usid_address([1], block=1 << 32)


def test_usids_of_errors() -> None:
    addr = usid_address([0x4003])
    with pytest.raises(ValueError, match="block 0xfcbb0000 is not the expected 0x20010db8"):
        usids_of(addr, block=0x20010DB8)
    with pytest.raises(ValueError, match="end-of-carrier"):
        usids_of(addr | 1)
    with pytest.raises(ValueError, match="addr"):
        usids_of(1 << 128)
    with pytest.raises(ValueError, match="addr"):
        shift(-1)


def test_four_usid_path_shifted_four_times() -> None:
    hops = [usid(KIND_T0, 2, 7), usid(KIND_T1, 2, 3), usid(KIND_T0, 2, 9), usid(KIND_DOWN, 2, 4)]
    addr = usid_address(hops)
    seen = []
    for i in range(4):
        assert usids_of(addr) == hops[i:]
        seen.append(active_usid(addr))
        addr = shift(addr)
    assert seen == hops
    assert addr == DEFAULT_BLOCK << 96
    assert usids_of(addr) == [] and active_usid(addr) == 0
    assert shift(addr) == addr


@settings(max_examples=200, deadline=None)
@given(
    st.lists(usid_values, max_size=MAX_USIDS),
    st.integers(0, 0xFFFFFFFF),
)
def test_build_shift_parse_round_trip(usids: list[int], block: int) -> None:
    addr = usid_address(usids, block)
    assert addr >> 96 == block
    assert usids_of(addr, block) == usids
    for k in range(len(usids) + 1):
        assert usids_of(addr, block) == usids[k:]
        assert active_usid(addr) == (usids[k] if k < len(usids) else 0)
        addr = shift(addr)
    assert addr == block << 96
    assert int(to_ipv6(addr)) == addr


@settings(max_examples=200, deadline=None)
@given(st.integers(0, (1 << 128) - 1))
def test_shift_keeps_block_and_moves_usids(addr: int) -> None:
    s = shift(addr)
    assert s >> 96 == addr >> 96
    assert s & ((1 << 96) - 1) == (addr << 16) & ((1 << 96) - 1)
    assert s & 0xFFFF == 0
