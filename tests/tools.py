"""Optional external tools the suite can use: a test needing one skips, naming it, when absent.

The README's test command must pass on a fresh machine that lacks them (root without
nftables, tshark or Chromium): mark such a test ``@needs_tool("nft")``.  The lookup
follows ``PATH`` at collection time, so hiding a tool from ``PATH`` (``.ci/run`` does)
skips its tests.
"""

from __future__ import annotations

import shutil

import pytest

#: The Debian package that provides each tool (for the skip reason).
PACKAGES: dict[str, str] = {
    "nft": "nftables",
    "tshark": "tshark",
    "chromium": "chromium",
    "dumpcap": "wireshark-common",
    "tcpdump": "tcpdump",
}


def have_tool(name: str) -> bool:
    """Whether ``name`` is on PATH (``chromium`` also accepts ``chromium-browser``)."""
    if name == "chromium":
        return (shutil.which("chromium") or shutil.which("chromium-browser")) is not None
    return shutil.which(name) is not None


def needs_tool(name: str) -> pytest.MarkDecorator:
    """Skip the test, naming the tool and its package, when ``name`` is not on PATH."""
    package = PACKAGES.get(name, name)
    return pytest.mark.skipif(
        not have_tool(name), reason=f"needs {name} (package {package}), not found on PATH"
    )
