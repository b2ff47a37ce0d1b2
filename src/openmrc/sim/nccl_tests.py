"""Message-size sweeps of a collective, as nccl-tests runs them (``-b 4M -e 1G -f 2``).

    rows = collective_sweep(ClosSpec(...), "allreduce", [4 << 20, 16 << 20], transport=...)
    print(nccl_table(rows))

Each size is a fresh experiment with the same seed; a row is the collective's
summary (``size``, ``time_us``, ``algbw_gbps``, ``busbw_gbps``, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..topology import ClosSpec
from ..workloads import collectives as coll
from .config import FabricConfig
from .experiment import TransportConfig
from .factory import make_experiment


def collective_sweep(
    spec: ClosSpec,
    kind: str,
    sizes: Sequence[int],
    ranks: int | None = None,
    transport: TransportConfig | None = None,
    fabric_config: FabricConfig | None = None,
    seed: int = 1,
    channels: int = 1,
    chunks: int = 1,
    message: int = 1 << 20,
    placement: list[int] | None = None,
    qps: int | None = None,
    settings: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One summary row per size of collective ``kind`` on ``ranks`` ranks (default: every host)."""
    n = ranks if ranks is not None else (len(placement) if placement else spec.hosts)
    rows = []
    for size in sizes:
        exp = make_experiment(spec, fabric_config=fabric_config, transport=transport, seed=seed)
        exp.add_collective(
            coll.build(kind, n, size, channels, chunks),
            placement,
            message=min(message, max(1, size)),
            qps=qps,
            settings=settings,
        )
        res = exp.run()
        row = dict(res.collectives[0])
        row["all_ok"] = res.all_ok
        rows.append(row)
    return rows


nccl_table = coll.nccl_table

__all__ = ["collective_sweep", "nccl_table"]
