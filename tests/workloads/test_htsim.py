"""uet-htsim connection matrices: parsed, run, and their triggers fire in order."""

from __future__ import annotations

from pathlib import Path

import pytest

from openmrc.pipeline.scenario import parse
from openmrc.sim.experiment import Experiment
from openmrc.topology import ClosSpec
from openmrc.workloads.htsim import CmError, load_cm, parse_cm
from tests.narrow import known

CM = Path(__file__).parent / "data" / "triggers.cm"
SPEC = ClosSpec(planes=2, t0s=2, hosts_per_t0=4, t1s=2)


def test_cm_triggers_fire_in_order() -> None:
    cm = load_cm(CM)
    assert cm.nodes == 6 and len(cm.flows) == 7
    assert {t: v.kind for t, v in cm.triggers.items()} == {
        1: "oneshot",
        2: "barrier",
        3: "multishot",
    }
    exp = Experiment(SPEC)
    exp.add_flows(cm.flow_specs(message=64 << 10))
    res = exp.run()
    assert res.all_ok
    f = res.flows
    # `start` is in microseconds, truncated to whole ones as uet-htsim's main_uec does
    assert f[0].started_ps == 0 and f[2].started_ps == 7_000_000
    # oneshot: both targets start when flow id 1's sender completes
    assert f[1].started_ps == f[6].started_ps == f[0].finish_ps
    # barrier count 2: flow id 4 waits for both arrivals
    assert f[3].started_ps == max(known(f[1].rx_finish_ps), known(f[2].rx_finish_ps))
    # multishot: one target per activation, in file order
    assert f[4].started_ps == f[3].rx_finish_ps
    assert f[5].started_ps == f[4].rx_finish_ps
    order = sorted(range(7), key=lambda i: (f[i].started_ps, i))
    assert order == [0, 2, 1, 6, 3, 4, 5]


def test_cm_in_a_scenario_file(tmp_path: Path) -> None:
    (tmp_path / "t.cm").write_text(CM.read_text())
    sc = parse(
        {
            "fabric": {"planes": 2, "t0s": 2, "hosts_per_t0": 4, "t1s": 2},
            "workload": {"kind": "htsim", "file": "t.cm", "fractional_start": True},
        },
        base_dir=tmp_path,
    )
    assert sc.flows[2].start_ps == 7_900_000
    assert sc.run().all_ok


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Connections 1\n0->1 start 0 size 5\n", "Nodes: missing"),
        ("Nodes 2\nConnections 2\n0->1 start 0 size 5\n", "Connections: says 2"),
        ("Nodes 2\n0->1 start 0\n", "line 2: a flow needs a size"),
        ("Nodes 2\n0->1 size 5\n", "line 2: no start method"),
        ("Nodes 2\n0->1 id 1 start 0 trigger 1 size 5\ntrigger id 1 oneshot\n", "both a start"),
        ("Nodes 2\n0->1 id 1 trigger 4 size 5\n", "trigger 4 referenced but not specified"),
        ("Nodes 2\n0->1 start 0 size 5 colour red\n", "unknown token 'colour'"),
        ("Nodes 2\n0->1 start nan size 5\n", "start must be a finite number"),
        ("Nodes 2\n0->1 start inf size 5\n", "start must be a finite number"),
        ("Nodes two\n", "Nodes must be an integer"),
        ("Nodes 2\n0-> start 0 size 5\n", "is not SRC->DST"),
        ("Nodes 2\n0->5 start 0 size 5\n", "destination 5 is not a node"),
        ("Nodes 2\ntrigger id 1 barrier\n", "needs a count"),
        ("Nodes 2\nfailure switch_type TOR switch_id 1\n", "use [[faults]]"),
        (
            "Nodes 3\n0->1 id 1 start 0 size 5 recv_done_trigger 1\n"
            "1->2 id 2 trigger 1 size 5\ntrigger id 1 barrier count 2\n",
            "needs 2 activations",
        ),
    ],
)
def test_cm_mistakes_name_the_line(text: str, message: str) -> None:
    with pytest.raises(CmError) as exc:
        parse_cm(text).flow_specs()
    assert message in str(exc.value)
