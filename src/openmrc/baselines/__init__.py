"""Baseline transports to compare MRC with, end to end: RoCEv2 (go-back-N + DCQCN)
and InfiniBand-style RC.

* :mod:`openmrc.baselines.roce` -- the transport, sans-IO like the MRC core: it builds
  and consumes packet objects and never touches a clock or a socket;
* :mod:`openmrc.baselines.fabric` -- the conventional fabric they run on (destination
  routing, ECMP or adaptive routing, PFC or credits, DCQCN marking), built on
  :mod:`openmrc.sim`; its per-packet classes (port and switch) are in
  :mod:`openmrc.baselines.datapath`;
* :mod:`openmrc.baselines.experiment` -- :class:`BaselineExperiment`, with the
  simulated NIC that drives the QPs (:class:`BaselineHost`, in
  :mod:`openmrc.baselines.nic`).
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
