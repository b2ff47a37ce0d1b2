"""Baseline transports to compare MRC with: RoCEv2 (go-back-N + DCQCN) and InfiniBand-style RC.

:mod:`openmrc.baselines.roce` is sans-IO like the MRC core: it builds and
consumes packet objects and never touches a clock or a socket; the simulator's
:class:`openmrc.sim.baseline.BaselineHost` drives it.
"""

from .roce import (
    Cnp,
    Dcqcn,
    DcqcnConfig,
    RoceAck,
    RoceConfig,
    RoceData,
    RoceReceiver,
    RoceSender,
    ack_timeout_ps,
)

__all__ = [
    "Cnp",
    "Dcqcn",
    "DcqcnConfig",
    "RoceAck",
    "RoceConfig",
    "RoceData",
    "RoceReceiver",
    "RoceSender",
    "ack_timeout_ps",
]
