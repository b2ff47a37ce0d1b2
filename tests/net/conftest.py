"""Fixtures for the network-namespace lab tests (``-m lab``).

The ``lab`` marker tags tests that build real namespaces; they skip (with the
reason) when not root, when ``ip`` is missing or when the kernel lacks SRv6
uSID (``seg6local End flavors next-csid``).  Every lab a test builds has a
unique name and is torn down in a ``finally``, whatever happens.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from openmrc.net.lab import Lab, down_lab

_counter = itertools.count()
_probe_result: str | None = None
_probed = False


def pytest_configure(config: pytest.Config) -> None:
    """Register the ``lab`` marker."""
    config.addinivalue_line(
        "markers", "lab: builds a real network-namespace SRv6 fabric (needs root, ip, SRv6)"
    )


def _probe() -> str | None:
    """Why lab tests cannot run here, or ``None`` if they can (checked once)."""
    global _probe_result, _probed
    if _probed:
        return _probe_result
    _probed = True
    if os.geteuid() != 0:
        _probe_result = "lab tests need root"
    elif shutil.which("ip") is None:
        _probe_result = "lab tests need the 'ip' command (iproute2)"
    else:
        ns = f"omrc-probe{os.getpid()}-x"
        try:
            subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
            subprocess.run(
                ["ip", "-n", ns, "link", "set", "lo", "up"], check=True, capture_output=True
            )
            proc = subprocess.run(
                ["ip", "-n", ns, "-6", "route", "add", "fcbb:0:4000::/48", "encap", "seg6local",
                 "action", "End", "flavors", "next-csid", "lblen", "32", "nflen", "16",
                 "dev", "lo"],
                capture_output=True, text=True,
            )  # fmt: skip
            if proc.returncode != 0:
                _probe_result = f"kernel/iproute2 lack SRv6 uSID: {proc.stderr.strip()}"
        except (OSError, subprocess.CalledProcessError) as exc:
            _probe_result = f"cannot create network namespaces: {exc}"
        finally:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    return _probe_result


@pytest.fixture
def lab_ok() -> None:
    """Skip the test unless namespaces and SRv6 uSID are usable."""
    reason = _probe()
    if reason is not None:
        pytest.skip(reason)


@pytest.fixture
def lab_name(lab_ok: None) -> Iterator[str]:
    """A unique lab name; whatever the test did under it is torn down afterwards."""
    name = f"t{os.getpid()}n{next(_counter)}"
    try:
        yield name
    finally:
        down_lab(name)


@pytest.fixture
def make_lab(lab_name: str) -> Callable[..., Lab]:
    """Build a lab under the test's unique name: ``make_lab("planes=2,t0s=2,...")``."""

    def build(spec: str = "planes=2,t0s=2,hosts_per_t0=1,t1s=2", **kwargs: object) -> Lab:
        return Lab.up(spec, lab_name, **kwargs)  # type: ignore[arg-type]

    return build
