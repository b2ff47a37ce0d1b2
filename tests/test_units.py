"""The one size parser: dd's units, errors that name the field."""

from __future__ import annotations

import pytest

from openmrc.units import parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [("4096", 4096), ("64K", 65536), ("64KiB", 65536), ("64KB", 64000), ("8M", 8 << 20),
     ("8mib", 8 << 20), ("8MB", 8_000_000), ("1.5G", 3 << 29), ("2GB", 2 * 10**9), ("7b", 7), (12, 12)],
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
