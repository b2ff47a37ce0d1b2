"""Narrowing for tests: what a test expects to be there, checked, with its precise type.

Results and records carry optional fields (a flow that never finished has no FCT) and
``Experiment.flows`` holds each transport's own flow records behind the common
``Flow``.  A test that expects a value states it through these helpers: the check runs
(a missing value fails the test) and mypy sees the narrowed type.
"""

from __future__ import annotations

from typing import TypeVar

from openmrc.baselines.experiment import _BFlow
from openmrc.sim.experiment import Experiment
from openmrc.sim.flows import Flow, MrcFlow

T = TypeVar("T")


def known(value: T | None) -> T:
    """``value``, which the test expects to be set (fails the test when it is None)."""
    assert value is not None
    return value


def mrc_flow(flow: Flow) -> MrcFlow:
    """``flow`` as an MRC flow (its QPs and memory regions); fails on another transport's."""
    assert isinstance(flow, MrcFlow), type(flow)
    return flow


def mrc_flows(exp: Experiment) -> list[MrcFlow]:
    """``exp.flows`` as MRC flows (see :func:`mrc_flow`)."""
    return [mrc_flow(f) for f in exp.flows]


def roce_flow(flow: Flow) -> _BFlow:
    """``flow`` as a RoCE/IB baseline connection (its senders and receivers)."""
    assert isinstance(flow, _BFlow), type(flow)
    return flow


def roce_flows(exp: Experiment) -> list[_BFlow]:
    """``exp.flows`` as RoCE/IB baseline connections (see :func:`roce_flow`)."""
    return [roce_flow(f) for f in exp.flows]
