"""Fault localisation by self-probes: the paper's Clustermapper, in one package.

* :mod:`~openmrc.clustermapper.localise` -- the decision logic, pure (no clock, no
  I/O): probe targets, self-probe routes, and :class:`Localiser`, which turns each
  round's probe counts into named elements (failed or lossy links and switches);
* :mod:`~openmrc.clustermapper.sim_agent` -- the simulator's agents
  (:class:`Clustermapper`, ``[clustermapper]`` in a scenario): they send the probes
  through a simulated fabric; :func:`enable_clustermapper` attaches them to an
  experiment;
* :mod:`~openmrc.clustermapper.lab_agent` -- the lab's agents (:class:`SelfProber`,
  ``openmrc lab localise``): UDP self-probes over the real SRv6 fabric.

It sits above :mod:`openmrc.sim` and :mod:`openmrc.net`, which never import it: the
experiment only reads ``Experiment.clustermapper.report()`` when an agent was
attached.
"""
