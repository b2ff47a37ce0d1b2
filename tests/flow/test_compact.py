"""The run keeps an ended flow's slot in its per-slot tables, marked gone, and drops the
gone slots only when a share of them is gone (``FluidModel.compact_dead``): the task
times are those of compacting at every end, and of never compacting while a flow is in
flight, with and without a failure (whose rerouting compacts first)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from openmrc.flow.model import FluidModel
from tests.flow.mixed import mixed_roce_run


def _compacting(share: float) -> Callable[[FluidModel], None]:
    """A model set-up that compacts the tables at ``share`` of their slots gone."""

    def configure(model: FluidModel) -> None:
        model.compact_dead = share

    return configure


@pytest.mark.parametrize("fault", [False, True])
def test_gone_slots_change_no_task_time(fault: bool) -> None:
    """Compacting at every end (0), at half gone (the default) and only when none is in
    flight (inf): the same start and end for every task, and every task ends."""
    runs = []
    for share in (0.0, 0.5, math.inf):
        res = mixed_roce_run(_compacting(share), fault=fault)
        assert None not in res.jobs[0].end
        runs.append((res.jobs[0].start, res.jobs[0].end, res.events))
    assert runs[1] == runs[0]
    assert runs[2] == runs[0]
