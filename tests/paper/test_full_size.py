"""The paper's collectives at its own size (64 ranks): ``openmrc paper --only ...`` at
the full size, where the ring all-reduces run at 256 MiB for 1 ms and the all-to-all at
64 MiB (openmrc.paper.experiments.RING_FULL, A2A_FULL; docs/paper.md).

Opt-in (OPENMRC_FULL_SIZE=1): about 25 CPU minutes compiled, hours in pure Python.
Measured at seed 1 (docs/paper.md): ring MRC 344.4 Gb/s, RoCE 1 QP 176.6, RoCE 16 QPs
196.5, MRC at 0.1 % loss 350.4; all-to-all MRC 357.0, RoCE 1 QP 226.4, 16 QPs 238.8.
The two 1 % loss shapes do not hold there yet (KNOWN_FULL_SIZE_EXCEPTIONS): each is an
expected failure with its reason, and a pass of one of them is reported (strict).
"""

from __future__ import annotations

import json
import os

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


#: Shapes that do not hold at the full size yet, each with why (docs/paper.md).
KNOWN_FULL_SIZE_EXCEPTIONS = {
    name: "at 1 % loss openmrc's MRC keeps 0.93 of its loss-free busbw (the paper's about "
    "a third) and RoCE moves 0.23 (1 QP) / 0.31 (16 QPs) of MRC's bytes in 1 ms (0.21 / "
    "0.35 in 5 ms: RoCE's go-back-N keeps about a third of its loss-free rate)"
    for name in ("ring-loss1", "ring-loss1-roce-16qp")
}


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, object]]:
    """``openmrc paper --only <the collectives>`` at the full size, once."""
    if not FULL:
        pytest.skip("full size: set OPENMRC_FULL_SIZE=1")
    out = tmp_path_factory.mktemp("paper-full")
    main(["paper", "--only", ",".join(COLLECTIVES), "--out", str(out)])
    doc = json.loads((out / "paper.json").read_text())
    return {r["name"]: r for r in doc["experiments"]}


@pytest.mark.parametrize("name", COLLECTIVES)
def test_the_collective_shape_holds_at_the_papers_size(
    name: str, rows: dict[str, dict[str, object]]
) -> None:
    row = rows[name]
    if name in KNOWN_FULL_SIZE_EXCEPTIONS:
        if row["holds"]:
            pytest.fail(f"{name} now holds: take it out of KNOWN_FULL_SIZE_EXCEPTIONS")
        pytest.xfail(f"{KNOWN_FULL_SIZE_EXCEPTIONS[name]}; measured: {row['measured']}")
    assert row["holds"], row["measured"]
