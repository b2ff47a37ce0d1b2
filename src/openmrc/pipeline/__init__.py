"""The run pipeline: a scenario file in, results out.

:mod:`~openmrc.pipeline.scenario` reads and checks a scenario (TOML, ``--set``
overrides), :mod:`~openmrc.pipeline.failures` draws faults from component rates,
:mod:`~openmrc.pipeline.run` builds and runs it (packet simulator, baselines or
flow level), :mod:`~openmrc.pipeline.jobrun` places and runs training jobs,
:mod:`~openmrc.pipeline.results` writes ``results.json`` and the CSVs, and
:mod:`~openmrc.pipeline.report` the self-contained ``report.html``.
"""
