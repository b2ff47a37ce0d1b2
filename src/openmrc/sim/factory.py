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

from typing import Any

from ..baselines.experiment import BaselineExperiment
from ..topology import ClosSpec
from .experiment import Experiment, TransportConfig
from .partition import partitioned_class

#: The experiment class of each transport name (``TransportConfig.name``).
EXPERIMENTS: dict[str, type[Experiment]] = {
    "mrc": Experiment,
    "roce": BaselineExperiment,
    "ib": BaselineExperiment,
}


def make_experiment(
    spec: ClosSpec,
    *args: Any,
    transport: TransportConfig | None = None,
    transport_name: str | None = None,
    **kwargs: Any,
) -> Experiment:
    """The experiment running ``transport_name`` (default ``transport.name``, else MRC);
    the other arguments are the class's (:class:`~openmrc.sim.experiment.Experiment`)."""
    name = transport_name if transport_name is not None else getattr(transport, "name", "mrc")
    # a partitioned run (openmrc.sim.partition) builds its own kind (or refuses)
    cls = partitioned_class(name) or (EXPERIMENTS.get(name) if isinstance(name, str) else None)
    if cls is None:
        raise ValueError(f"transport name: must be one of {', '.join(EXPERIMENTS)}, got {name!r}")
    return cls(spec, *args, transport=transport, transport_name=transport_name, **kwargs)
