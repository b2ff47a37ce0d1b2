"""The lab state directory is 0700 and its files 0600 (docs/security.md); no root needed.

The state files name every namespace, link and fault of the labs, and the
control sockets live below the directory.  Checked with a permissive umask
(022), for a directory created here and for one that already existed 0755.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from openmrc.net.control import ControlAddress, lab_control_path, start_control_server
from openmrc.net.lab import Lab, LabPlan, parse_spec


@pytest.fixture
def umask022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("existing", [False, True])
def test_state_dir_and_files_are_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask022: None, existing: bool
) -> None:
    state = tmp_path / "run" / "openmrc-lab"
    if existing:
        state.mkdir(parents=True, mode=0o755)
        state.chmod(0o755)
    monkeypatch.setenv("OPENMRC_LAB_STATE_DIR", str(state))
    lab = Lab(LabPlan(parse_spec("planes=2,t0s=2,hosts_per_t0=1,t1s=2"), "permtest"))
    with lab._locked():
        lab._save("up")
    assert _mode(state) == 0o700
    if not existing:
        assert _mode(state.parent) == 0o700  # created here too
    files = sorted(state.iterdir())
    assert {f.name for f in files} == {"permtest.json", "permtest.lock"}
    for f in files:
        assert _mode(f) == 0o600, f

    async def control_socket() -> int:
        path = lab_control_path("permtest", "h1")

        async def handler(ch: object) -> None:
            return None

        server = await start_control_server(ControlAddress(path=str(path)), handler)
        server.close()
        return _mode(path.parent)

    assert asyncio.run(control_socket()) == 0o700
    assert _mode(state) == 0o700
