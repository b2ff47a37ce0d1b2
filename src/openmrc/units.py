"""Sizes written by people: ``4096``, ``"64K"``, ``"8MiB"``, ``"1.5G"``, ``"10MB"``.

One parser for CLI flags and scenario files alike.  The units follow dd:
``K``/``M``/``G`` and ``KiB``/``MiB``/``GiB`` are binary (1024-based),
``KB``/``MB``/``GB`` decimal; ``B`` or no unit means bytes.
"""

from __future__ import annotations

from typing import Any

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 1000,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
}


def parse_size(value: Any, name: str, allow_zero: bool = False) -> int:
    """Bytes from an int or a size string; ValueError naming ``name`` otherwise."""
    least = 0 if allow_zero else 1
    if isinstance(value, bool):
        raise ValueError(f"{name}: expected a size, got {value!r}")
    if isinstance(value, int):
        if value < least:
            raise ValueError(
                f"{name}: must be {'non-negative' if allow_zero else 'positive'}, got {value}"
            )
        return value
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(num) :]
        if unit in _UNITS and num:
            try:
                out = int(float(num) * _UNITS[unit])
            except ValueError:
                pass
            else:
                if out >= least:
                    return out
                raise ValueError(
                    f"{name}: must be {'non-negative' if allow_zero else 'positive'}, got {value}"
                )
    raise ValueError(f'{name}: {value!r} is not a size (e.g. 4096, "64K", "8MiB")')
