"""The flow level: training jobs and collectives as fluid flows, not packets.

:mod:`~openmrc.flow.model` shares links max-min fair between the flows of a job
graph and walks the graph's tasks in time; :mod:`~openmrc.flow.dcqcn` gives RoCE
QPs meeting in a congested queue their DCQCN share; :mod:`~openmrc.flow.faults`
turns a scenario's faults into capacity changes and re-hashed ECMP paths.  It
reads the same fabric description (:mod:`openmrc.topology`) as the packet
simulator but shares no engine with it.
"""
