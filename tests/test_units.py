"""The one size parser: dd's units, errors that name the field."""

from __future__ import annotations

import pytest

from openmrc.units import format_size, parse_size, plural


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("64K", 65536), ("64KiB", 65536), ("64KB", 64000), ("8M", 8 << 20),
     ("8mib", 8 << 20), ("8MB", 8_000_000), ("1.5G", 3 << 29), ("2GB", 2 * 10**9), ("7b", 7), (12, 12),
     ("2TiB", 2 << 40), ("3T", 3 << 40), ("5TB", 5 * 10**12), ("1PiB", 1 << 50),
     ("0.5P", 1 << 49), ("2PB", 2 * 10**15)],
)  # fmt: skip
def test_units(text: object, expected: int) -> None:
    assert parse_size(text, "size") == expected


def test_zero_and_errors_name_the_field() -> None:
    assert parse_size("0", "size", allow_zero=True) == 0
    with pytest.raises(ValueError, match="flow.size: must be positive"):
        parse_size("0", "flow.size")
    for bad in ("", "K", "lots", "3 parsecs", True, None, -5):
        with pytest.raises(ValueError, match="x.y: "):
            parse_size(bad, "x.y")


def test_sizes_and_counts_for_people() -> None:
    assert format_size(512) == "512 B" and format_size(8 << 20) == "8.0 MiB"
    assert format_size(3 << 39) == "1.5 TiB" and format_size(5 << 50) == "5.0 PiB"
    assert format_size(3 << 60) == "3,072.0 PiB"  # PiB is the largest unit
    assert plural(1, "plane") == "1 plane" and plural(8, "plane") == "8 planes"
    assert plural(0, "flow") == "0 flows" and plural(1024, "host") == "1,024 hosts"
    assert plural(2, "switch", "switches") == "2 switches"
