"""RoCE's ECMP draw uses the whole seed: every seed of the rack permutation puts
its flows on its own uplinks (docs/results/baselines.md, "ECMP draws and seeds").

The rack permutation (``scenarios/paper/permutation-racks-roce-1qp.toml``: 8
flows, two racks of 4 senders, 4 uplinks per T0) gives each flow a random UDP
source port and each T0 hashes the 5-tuple onto an uplink.  The per-flow rates
depend only on how the 4 flows of each rack share the 4 uplinks (a pattern
such as {2, 1, 1} or {2, 2}), of which there are few, so different seeds often
give the same rates on different flows; the assignments themselves must differ.
"""

from __future__ import annotations

from collections import Counter

from openmrc.paper.experiments import PAPER_DIR
from openmrc.pipeline.run import load_scenario

FILE = PAPER_DIR / "permutation-racks-roce-1qp.toml"


def _uplinks(seed: int) -> tuple[int, ...]:
    """The uplink index each flow's T0 hashes it to, flows in source order."""
    scenario, _ = load_scenario(str(FILE), [f"seed={seed}"])
    exp = scenario.build()
    exp.run(1_000_000)  # 1 us: every flow has started and drawn its source port
    hpt = exp.spec.hosts_per_t0
    t0s = {sw.index: sw for sw in exp.fabric.switches.values() if sw.tier == 0}
    out = {}
    for key, sport in exp.qp_draws().items():
        if key[0] != "sport":
            continue
        src, dst = key[2], key[3]
        sw = t0s[src // hpt]
        out[src] = sw.ecmp_index(src, dst, sport, len(sw.nh[dst // hpt]))
    return tuple(out[s] for s in sorted(out))


def test_every_seed_draws_its_own_ecmp_paths() -> None:
    seeds = range(1, 21)
    draws = [_uplinks(s) for s in seeds]
    assert all(len(d) == 8 for d in draws)
    # 4^8 assignments: 20 seeds collide with probability < 0.3 %
    assert len(set(draws)) == len(draws)
    # every flow meets every uplink over the seeds (a flow stuck on a few would
    # mean part of the seed or of the port is ignored)
    for flow in range(8):
        assert len(Counter(d[flow] for d in draws)) == 4
