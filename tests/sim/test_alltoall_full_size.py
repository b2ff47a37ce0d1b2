"""The paper's 64-rank all-to-all (scenarios/paper/alltoall-64-mrc.toml, 4 MiB,
4 x 100G planes, a fabric that drops nothing) blames no EV.

Opt-in (OPENMRC_FULL_SIZE=1): about 40 s compiled on an idle 2-core machine, minutes
in pure Python.  Before the NIC sent control packets ahead of data (see
tests/transport/test_control_priority.py, which runs in the suite), this run blamed
22 EVs at seed 1, every one "probe unanswered": the EV probes' round trips waited
behind a data packet of each of the host's 62 other QPs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from openmrc.pipeline.run import load_scenario

FULL = os.environ.get("OPENMRC_FULL_SIZE") == "1"
SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "paper" / "alltoall-64-mrc.toml"


@pytest.mark.skipif(not FULL, reason="full size: set OPENMRC_FULL_SIZE=1")
@pytest.mark.parametrize("seed", [1, 2])
def test_lossless_64_rank_alltoall_blames_no_ev(seed: int) -> None:
    scenario, _ = load_scenario(str(SCENARIO), [], seed=seed)
    result = scenario.build().run(None)
    (coll,) = result.collectives
    assert coll["complete"]
    blamed = [e for e in result.ev_events if e.get("new") == "ASSUMED_BAD"]
    assert blamed == [], blamed[:5]
    assert all(f.timeouts == 0 for f in result.flows)
