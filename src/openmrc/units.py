"""Sizes written by people: ``4096``, ``"64K"``, ``"8MiB"``, ``"1.5G"``, ``"10MB"``, ``"2TiB"``.

One parser for CLI flags and scenario files alike.  The units follow dd:
``K``/``M``/``G``/``T``/``P`` and ``KiB``/``MiB``/``GiB``/``TiB``/``PiB`` are binary
(1024-based), ``KB``/``MB``/``GB``/``TB``/``PB`` decimal; ``B`` or no unit means bytes.
:func:`format_size` writes sizes back for people, :func:`plural` counts things.
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
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
    "p": 1 << 50,
    "pib": 1 << 50,
    "pb": 10**15,
}

_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_size(n: int | float) -> str:
    """``n`` bytes for people, binary units up to PiB: ``512 B``, ``8.0 MiB``, ``1.5 TiB``."""
    value = float(n)
    for unit in _BINARY:
        if abs(value) < 1024 or unit == _BINARY[-1]:
            return f"{int(value)} B" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def plural(count: int, word: str, many: str | None = None) -> str:
    """``1 plane``, ``8 planes``, ``1,024 hosts`` (``many``: an irregular plural)."""
    return f"{count:,} {word if count == 1 else (many or word + 's')}"


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
    raise ValueError(f'{name}: {value!r} is not a size (e.g. 4096, "64K", "8MiB", "2TiB")')
