"""The paper's collectives at its own size (64 ranks): ``openmrc paper --only ...`` at
the full size, where the ring all-reduces run at 256 MiB for 1 ms and the all-to-all at
64 MiB (openmrc.paper.RING_FULL, A2A_FULL; docs/paper.md).

Opt-in (OPENMRC_FULL_SIZE=1): about 25 CPU minutes compiled, hours in pure Python.
Measured at seed 1 (docs/paper.md): ring MRC 344.4 Gb/s, RoCE 1 QP 176.6, RoCE 16 QPs
196.5, MRC at 0.1 % loss 350.4; all-to-all MRC 357.0, RoCE 1 QP 226.4, 16 QPs 238.8.
The two 1 % loss shapes do not hold there yet (RoCE 0.23 and 0.31 of MRC's bytes moved,
the shape asks below 0.2), so this test fails today and says so: it is the target.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from openmrc.cli import main

FULL = os.environ.get("OPENMRC_FULL_SIZE") == "1"
COLLECTIVES = (
    "ring-roce-1qp-vs-mrc",
    "ring-mrc-vs-roce-16qp",
    "ring-mrc-loss0.1",
    "ring-loss1",
    "ring-loss1-roce-16qp",
    "alltoall",
)


@pytest.mark.skipif(not FULL, reason="full size: set OPENMRC_FULL_SIZE=1")
def test_the_collectives_shapes_hold_at_the_papers_size(tmp_path: Path) -> None:
    main(["paper", "--only", ",".join(COLLECTIVES), "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "paper.json").read_text())["experiments"]
    failed = {r["name"]: r["measured"] for r in rows if not r["holds"]}
    assert not failed, failed
    assert sorted(r["name"] for r in rows) == sorted(COLLECTIVES)
