"""The paper's published experiments (``openmrc paper``).

:mod:`~openmrc.paper.experiments` defines each experiment, what the paper
published and its shape check; :mod:`~openmrc.paper.run` runs them over seeds in
parallel and resumably; :mod:`~openmrc.paper.figures` draws Figures 16 and 17.
"""
