"""MRC EV sets on the simulated fabric: 256 EVs per QP with backups, whatever the paths."""

from __future__ import annotations

from openmrc.sim.experiment import Experiment, TransportConfig
from openmrc.topology import ClosSpec
from openmrc.transport.ev import ev_path, ev_plane
from openmrc.workloads import single

US = 1_000_000


def test_default_qps_carry_256_evs_with_backups_on_8_t1s_and_replace_failed_ones() -> None:
    spec = ClosSpec(planes=8, t0s=2, hosts_per_t0=2, t1s=8)
    exp = Experiment(spec, seed=4, sample_interval_ps=5 * US)
    exp.add_flows(single(0, 2, 4 << 20) + single(1, 3, 4 << 20))
    exp.faults.link_down("p5t0x0-p5t1x6", at_ps=10 * US)
    r = exp.run()
    assert r.all_ok
    assert TransportConfig().ev_count == 256
    qps = [f.qa for f in exp.flows]  # type: ignore[attr-defined]
    sets = []
    for qp in qps:
        paths = qp.paths
        assert len(paths.slots) == 256 == len(set(paths.slots))
        assert all(paths.backup_count(p) > 0 for p in range(8))
        # 32 per plane over 8 T1s: several EVs per physical path
        plane5 = [ev for ev in paths.slots if ev_plane(ev) == 5]
        assert len(plane5) == 32
        sets.append(set(paths.slots) | set(paths.probing))
    assert sets[0] != sets[1]
    # Host 0's EVs through the dead link went bad and were replaced from plane 5's backups.
    paths = qps[0].paths
    bad = [e for e in r.ev_events if e["new"] == "ASSUMED_BAD" and e["host"] == 0]
    assert bad and all(ev_plane(e["ev"]) == 5 and ev_path(e["ev"]) % 8 == 6 for e in bad)
    assert paths.stats_replacements >= len({e["ev"] for e in bad}) - 1
    assert sum(1 for ev in paths.slots if ev_plane(ev) == 5) == 32
    assert not {e["ev"] for e in bad} & set(paths.slots)
