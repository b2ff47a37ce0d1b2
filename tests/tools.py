"""Optional external tools the suite can use: a test needing one skips, naming it, when absent.

The README's test command must pass on a fresh machine that lacks them (root without
nftables, tshark or Chromium): mark such a test ``@needs_tool("nft")`` (or give it
``marks=needs_tool("nft")`` in a parametrize).  ``tests/conftest.py`` turns the mark
into a skip naming the tool and its package when the tool is not on ``PATH`` at
collection; ``-m needs_tool`` selects exactly these tests (``.ci/run`` runs them once
with the tools hidden from ``PATH``).
"""

from __future__ import annotations

import shutil
import signal

import pytest

#: The Debian package that provides each tool (for the skip reason).
PACKAGES: dict[str, str] = {
    "nft": "nftables",
    "tshark": "tshark",
    "chromium": "chromium",
    "dumpcap": "wireshark-common",
    "tcpdump": "tcpdump",
    "mpirun": "openmpi-bin",
}


def have_tool(name: str) -> bool:
    """Whether ``name`` is on PATH (``chromium`` also accepts ``chromium-browser``)."""
    if name == "chromium":
        return (shutil.which("chromium") or shutil.which("chromium-browser")) is not None
    return shutil.which(name) is not None


def needs_tool(name: str) -> pytest.MarkDecorator:
    """Mark a test as needing executable ``name``; skipped, naming it, when absent."""
    return pytest.mark.needs_tool(name)


def skip_reason(name: str) -> str | None:
    """Why a test needing ``name`` cannot run here, or None if it can."""
    if have_tool(name):
        return None
    return f"needs {name} (package {PACKAGES.get(name, name)}), not found on PATH"


def sigint_default() -> None:
    """``preexec_fn`` for a child a test sends SIGINT to: SIGINT back to its default.

    A shell that starts a job in the background without job control (``cmd &``
    in a script) starts it with SIGINT ignored, and its children inherit that;
    Python then leaves SIGINT ignored (no KeyboardInterrupt), so the child would
    not stop. Reset here, the child's Python installs its handler as usual.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
