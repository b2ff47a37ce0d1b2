"""What the campaign tests share: the bundled example campaign and the overrides that
turn off every drawn failure (each component rate zero)."""

from __future__ import annotations

from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "scenarios" / "training" / "campaign-16.toml"

#: no drawn failures: every component's rate zero
NO_DRAWN_FAILURES = [
    "failures.link_per_hour=0",
    "failures.optic_per_hour=0",
    "failures.switch_per_hour=0",
    "failures.nic_port_per_hour=0",
]
