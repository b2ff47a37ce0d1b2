"""The flow level's run loop, turn by turn: which flows end (``_ended``: one comparison
that picks the same flows as the run's two tests, at most 1e-3 bytes or 1 ps left),
and the routes cached by one int per job, host pair and QP (``FluidModel._route``):
two jobs' or two QPs' connections between the same hosts keep routes of their own.
"""

from __future__ import annotations

import math

import numpy as np

from openmrc.flow.model import FluidModel, _ended, _Flow
from openmrc.topology import ClosSpec


def _two_tests(rem: np.ndarray, rate: np.ndarray) -> np.ndarray:
    """The run's test as written out: at most 1e-3 bytes, or at most 1 ps at the rate."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return (rem <= 1e-3) | (rem / rate <= 1.0)


def test_ended_picks_the_flows_the_two_tests_pick() -> None:
    """Rates of 0, NaN, subnormal and ordinary; bytes left at, one ulp either side of
    and far from the rate and from 1e-3, negative, 0 and inf (a gone slot): the same
    flows end, and both kinds of end occur."""
    rng = np.random.default_rng(7)
    rates = [0.0, math.nan, 5e-324, 1e-310, 1e-4, 1e-3, 0.0125, 0.5, 1.0, 3.0, 1e300]
    rates += list(rng.uniform(1e-5, 0.1, 40)) + list(2.0 ** rng.integers(-30, 4, 20))
    rem_l: list[float] = []
    rate_l: list[float] = []
    for r in rates:
        for x in (r, 1e-3, 0.0, 1.0, 2.0 * r):
            for v in (x, np.nextafter(x, -math.inf), np.nextafter(x, math.inf)):
                rem_l.append(float(v))
                rate_l.append(r)
        for v in (-1.0, -0.0, math.inf, math.nan, 7.5, 1e-7):
            rem_l.append(v)
            rate_l.append(r)
    rem, rate = np.array(rem_l), np.array(rate_l)
    want = _two_tests(rem, rate)
    got = _ended(rem, rate)
    assert got.dtype == np.bool_
    assert (got == want).all(), np.flatnonzero(got != want)
    assert want.any() and not want.all()
    # both tests decide some flows alone: at most 1 ps left above 1e-3 bytes, and
    # 1e-3 bytes left at a rate that takes more than 1 ps for them
    assert ((rem > 1e-3) & want).any()
    assert ((rem <= 1e-3) & (rem > rate) & want).any()


def test_routes_are_cached_per_job_and_qp() -> None:
    """RoCE QPs between the same two hosts, of two jobs and two QP numbers, each drawn
    onto the T1 its connection and QP hash to: each keeps its own route from the
    cache (a key without the job or the QP would hand one the other's), and a route
    read from the cache is the one a fresh model computes."""
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=4, t1s=4)

    def model() -> FluidModel:
        return FluidModel(
            spec,
            "roce",
            qps=2,
            gpus_per_server=1,
            path_hash=lambda s, d, c, q: 2 * int(c) + q,  # job 0: T1 0, 1; job 1: T1 2, 3
        )

    m = model()
    routes = {}
    for job in (0, 1):
        for qp in (0, 1):
            fl = _Flow(0, 1, 5, 1.0, job, qp)
            m._route(fl)
            routes[job, qp] = fl.rl
    assert len({tuple(r) for r in routes.values()}) == 4
    for (job, qp), rl in routes.items():
        again = _Flow(0, 1, 5, 1.0, job, qp)
        m._route(again)  # from the cache
        fresh = _Flow(0, 1, 5, 1.0, job, qp)
        model()._route(fresh)
        assert again.rl == rl == fresh.rl
        assert again.conn == str(job)
