"""The experiment of each transport, by name: the one place that knows them all.

``make_experiment(spec, transport=TransportConfig(name="roce"))`` builds the
experiment class that runs ``transport.name`` (or ``transport_name``):
:class:`~openmrc.sim.experiment.Experiment` for MRC,
:class:`~openmrc.baselines.experiment.BaselineExperiment` for the RoCEv2 and
InfiniBand-style baselines.  Adding a transport is one entry in
:data:`EXPERIMENTS` (a subclass of ``Experiment`` supplying its hooks, with its
names in ``transport_names``).
"""

from __future__ import annotations

import sys

from ..baselines.experiment import BaselineExperiment
from ..topology import ClosSpec
from .config import FabricConfig
from .experiment import Experiment, TransportConfig

#: The partitioned run's module (:mod:`openmrc.sim.partition`): imported by whoever
#: requests a partitioned run (``partition.request``), never here, so an ordinary run
#: does not pay for importing it (its ranks' machinery, ``ctypes`` and ``pickle``).
_PARTITION = __name__.rsplit(".", 1)[0] + ".partition"

#: The experiment class of each transport name (``TransportConfig.name``).
EXPERIMENTS: dict[str, type[Experiment]] = {
    "mrc": Experiment,
    "roce": BaselineExperiment,
    "ib": BaselineExperiment,
}


def make_experiment(
    spec: ClosSpec,
    fabric_config: FabricConfig | None = None,
    transport: TransportConfig | None = None,
    seed: int = 1,
    payloads: bool = False,
    sample_interval_ps: int = 10_000_000,
    queue_sample_interval_ps: int | None = None,
    transport_name: str | None = None,
) -> Experiment:
    """The experiment running ``transport_name`` (default ``transport.name``, else MRC);
    the arguments are :class:`~openmrc.sim.experiment.Experiment`'s."""
    name = transport_name if transport_name is not None else getattr(transport, "name", "mrc")
    # a partitioned run (openmrc.sim.partition) builds its own kind (or refuses); none
    # was requested if that module was never imported
    partition = sys.modules.get(_PARTITION)
    part = partition.partitioned_class(name) if partition is not None else None
    cls = part or (EXPERIMENTS.get(name) if isinstance(name, str) else None)
    if cls is None:
        raise ValueError(f"transport name: must be one of {', '.join(EXPERIMENTS)}, got {name!r}")
    return cls(
        spec,
        fabric_config=fabric_config,
        transport=transport,
        seed=seed,
        payloads=payloads,
        sample_interval_ps=sample_interval_ps,
        queue_sample_interval_ps=queue_sample_interval_ps,
        transport_name=transport_name,
    )
