"""``openmrc demo``: the two demos.

* :mod:`~openmrc.demo.fabric` -- ``openmrc demo``, the main one: MRC against RoCEv2
  on a small 8-plane fabric while a link and a switch fail (the bundled scenario
  ``openmrc/scenarios/demo.toml``, run through :mod:`openmrc.pipeline.run`, with a report);
* :mod:`~openmrc.demo.transfer` -- ``openmrc demo loopback``: one MRC transfer
  between two endpoints over a lossy, reordering multipath channel
  (:mod:`openmrc.loopback`).
"""
