"""The paper's collectives at its own size (64 ranks): ``openmrc paper --only ...`` at
the full size, where the ring all-reduces run at 64 MiB to the end of the collective (the
0.1 % loss row at 256 MiB) and the all-to-all at 64 MiB
(openmrc.paper.experiments.RING_FULL, RING_LARGE, A2A_FULL; docs/paper.md).

Opt-in (OPENMRC_FULL_SIZE=1): tens of CPU minutes compiled, hours in pure Python.
Measured at seed 1 (docs/results/paper.md): ring MRC 333.4 Gb/s in 3.17 ms, at 1 %
loss 189.3 in 5.58 ms, RoCE 1 QP at 1 % loss 61.7 in 17.14 ms;
all-to-all MRC 357.0, RoCE 1 QP 226.4, 16 QPs 238.8.  The two 1 % loss shapes do not
hold at the quick size run to the end (KNOWN_FULL_SIZE_EXCEPTIONS): each is an
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
    name: "run to the end, RoCE at 1 % loss keeps 0.22-0.31 of MRC's busbw at the quick size "
    "(seeds 1-3: a loss costs RoCE a NAK and a rewind, a timeout only for a lost resend or "
    "tail); at full size, seed 1, RoCE 1 QP 61.7 Gb/s against MRC 189.3 (0.33), and under the "
    "20 ms cap no RoCE run can fall below 52.9 Gb/s (finished) or its bound (not finished), "
    "0.28 of MRC"
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
