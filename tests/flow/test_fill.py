"""The flow level's small refills: ``FluidModel._fill_lists`` (one float at a time)
gives ``FluidModel._fill``'s rates (numpy arrays) to the last bit.

* on random small components of RoCE QPs (shared NIC ports and T0-T1 links,
  fractional weights, paced and unpaced flows, DCQCN cuts at congested queues,
  QPs whose CNPs die, replayed DCQCN episodes): the same rates, cuts and missed
  cuts;
* on components of flows that share no resource (each alone: the shortcut);
* a whole run with every refill one float at a time, every refill by arrays, and
  the default split between them: the same task starts and ends.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from openmrc.flow.model import FluidModel, _Flow
from openmrc.topology import ClosSpec
from tests.flow.mixed import mixed_roce_run


def _component(
    model: FluidModel, rng: random.Random
) -> tuple[
    list[_Flow], list[float], list[float], list[bool], list[tuple[int, float, float, float] | None]
]:
    """A few RoCE QPs on routes of the model's fabric (host up, T0-T1 up, T1-T0 down,
    host down; some inside a server), with random weights, paces, sizes, muted QPs and
    DCQCN episodes: the flows and, per flow, its pace, size, whether it is muted and
    its episode."""
    spec = model.spec
    P, A, K, hpt = model.P, model.A, model.K, spec.hosts_per_t0
    fls: list[_Flow] = []
    paces: list[float] = []
    sizes: list[float] = []
    mutes: list[bool] = []
    eps: list[tuple[int, float, float, float] | None] = []
    for q in range(rng.randrange(1, 9)):
        s = rng.randrange(4)  # few senders: QPs share their NIC port
        d = rng.randrange(spec.hosts)
        p = rng.randrange(P)
        fl = _Flow(q, s, d, 1.0, 0, q)
        if s // model.gpus_per_server == d // model.gpus_per_server and rng.random() < 0.5:
            res = [model._nvl_out0 + s, model._nvl_in0 + d]
        else:
            a, b, k = s // hpt, d // hpt, rng.randrange(K)
            res = [
                model._up0 + s * P + p,
                model._link_up0 + (p * A + a) * K + k,
                model._link_down0 + (p * K + k) * A + b,
                model._down0 + d * P + p,
            ]
            res = res[: rng.choice((2, 4, 4, 4))]
        w = [rng.choice((1.0, 1.0, 0.5, 0.25, 1 / 3, 0.7)) for _ in res]
        fl.rl, fl.wl = res, w
        fl.res, fl.w = np.array(res, dtype=np.int64), np.array(w)
        fls.append(fl)
        paces.append(math.inf if rng.random() < 0.6 else rng.uniform(0.001, 0.02))
        sizes.append(float(rng.randrange(1, 64) << 16))
        mutes.append(rng.random() < 0.15)
        eps.append(None if rng.random() < 0.8 else (2, 0.006, 0.012, float(1 << 20)))
    return fls, paces, sizes, mutes, eps


def _both(
    model: FluidModel,
    fls: list[_Flow],
    paces: list[float],
    sizes: list[float],
    mutes: list[bool],
    eps: list[tuple[int, float, float, float] | None],
) -> tuple[tuple[bytes, list[bool], dict[int, tuple[int, float, float]]], ...]:
    """The component's rates (as bytes), cuts and missed cuts by ``_fill`` and by
    ``_fill_lists``."""
    lens = [len(f.rl) for f in fls]
    fe = np.repeat(np.arange(len(fls)), lens)
    cols = np.array([r for f in fls for r in f.rl], dtype=np.int64)
    vals = np.array([x for f in fls for x in f.wl])
    cuts = np.zeros(len(fls), dtype=bool)
    missed: dict[int, tuple[int, float, float]] = {}
    use_eps = eps if any(e is not None for e in eps) else None
    rate = model._fill(
        len(fls), fe, cols, vals, np.array(paces), np.array(sizes), np.array(mutes), use_eps,
        missed, cuts,
    )  # fmt: skip
    cuts_l: list[bool] = []
    missed_l: dict[int, tuple[int, float, float]] = {}
    rate_l = model._fill_lists(fls, paces, sizes, mutes, use_eps, missed_l, cuts_l)
    return (
        (np.asarray(rate, dtype=float).tobytes(), cuts.tolist(), missed),
        (np.array(rate_l, dtype=float).tobytes(), cuts_l, missed_l),
    )


@pytest.mark.parametrize("seed", range(4))
def test_a_small_fill_one_float_at_a_time_is_the_array_fill_to_the_bit(seed: int) -> None:
    """Random small components: ``_fill_lists`` gives ``_fill``'s rates bit for bit,
    the same DCQCN cuts and the same cuts missed by muted QPs; the components include
    congested queues where DCQCN cuts and QPs that miss a cut."""
    spec = ClosSpec(planes=2, t0s=2, hosts_per_t0=4, t1s=2)
    model = FluidModel(spec, "roce", qps=2, seed=seed, gpus_per_server=2)
    rng = random.Random(seed)
    cut = missed = 0
    for _ in range(300):
        fls, paces, sizes, mutes, eps = _component(model, rng)
        arrays, scalar = _both(model, fls, paces, sizes, mutes, eps)
        assert scalar == arrays
        cut += any(arrays[1])
        missed += bool(arrays[2])
    assert cut > 20 and missed > 2, (cut, missed)


@pytest.mark.parametrize("seed", range(3))
def test_a_fill_of_flows_each_alone_on_its_resources_is_the_array_fill(seed: int) -> None:
    """Components of flows that share no resource (``_fill_lists``' shortcut: each
    flow's rate is its lowest level, no DCQCN cut): the same rates, cuts and missed
    cuts as ``_fill``, with fractional weights, paces, dead links (capacity 0) and
    replayed DCQCN episodes."""
    spec = ClosSpec(planes=2, t0s=2, hosts_per_t0=4, t1s=2)
    model = FluidModel(spec, "roce", qps=2, seed=seed, gpus_per_server=2)
    model.fab_known[0, 0, 1] = model.fab_known[1, 1, 0] = False
    model._update_caps()
    rng = random.Random(seed)
    pool = list(range(model._nvl_out0))
    slow = 0
    for _ in range(200):
        rng.shuffle(pool)
        fls: list[_Flow] = []
        paces: list[float] = []
        eps: list[tuple[int, float, float, float] | None] = []
        at = 0
        for q in range(rng.randrange(1, 9)):
            k = rng.choice((2, 3, 4))
            res = pool[at : at + k]  # no resource of another flow
            at += k
            fl = _Flow(q, 0, 1, 1.0, 0, q)
            fl.rl = res
            fl.wl = [rng.choice((1.0, 0.5, 0.25, 1 / 3, 0.7)) for _ in res]
            fl.res, fl.w = np.array(fl.rl, dtype=np.int64), np.array(fl.wl)
            fls.append(fl)
            paces.append(math.inf if rng.random() < 0.5 else rng.uniform(0.001, 0.05))
            eps.append(None if rng.random() < 0.8 else (2, 0.006, 0.012, float(1 << 20)))
        sizes = [float(1 << 20)] * len(fls)
        mutes = [rng.random() < 0.2 for _ in fls]
        arrays, scalar = _both(model, fls, paces, sizes, mutes, eps)
        assert scalar == arrays
        slow += any(model.cap[r] == 0 for f in fls for r in f.rl)
    assert slow > 20, slow


def _run(small_fill: int, fault: bool) -> tuple[list[float | None], list[float | None]]:
    """The mixed RoCE job (``tests.flow.mixed``), optionally with a T0-T1 link failing
    mid-run, with refills of at most ``small_fill`` entries one float at a time: every
    task's start and end."""

    def configure(model: FluidModel) -> None:
        model.small_fill = small_fill

    res = mixed_roce_run(configure, fault)
    return res.jobs[0].start, res.jobs[0].end


@pytest.mark.parametrize("fault", [False, True])
def test_a_run_is_the_same_whichever_way_its_refills_are_filled(fault: bool) -> None:
    """Every refill by arrays (``small_fill`` 0), every one a float at a time, and the
    default split: the same task starts and ends to the last bit."""
    arrays = _run(0, fault)
    assert None not in arrays[1]
    assert _run(1 << 30, fault) == arrays
    assert _run(FluidModel(ClosSpec(planes=1, t0s=1, hosts_per_t0=2, t1s=1)).small_fill, fault) == (
        arrays
    )
