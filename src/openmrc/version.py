"""The installed openmrc version (for ``--version`` and results' provenance)."""

from __future__ import annotations

from importlib import metadata


def openmrc_version() -> str:
    """The installed openmrc version (``0+unknown`` when run from a bare source tree)."""
    try:
        return metadata.version("openmrc")
    except metadata.PackageNotFoundError:
        return "0+unknown"
