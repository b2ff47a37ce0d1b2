"""Port status in the lab: a lab host link failed is seen by the host's endpoint."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from openmrc.net.driver import NetEndpoint, plane_ports_down
from openmrc.net.lab import Lab

pytestmark = pytest.mark.lab

SPEC = "planes=2,t0s=2,hosts_per_t0=1,t1s=1"


def test_lab_fail_of_a_host_link_drives_port_status(make_lab: Callable[..., Lab]) -> None:
    lab = make_lab(SPEC)
    ns = lab.host_netns(1)
    assert plane_ports_down(ns, 2) == 0
    link = "h1-" + lab.topology.t0_name(1, 1)

    async def main() -> tuple[int, int]:
        ep = NetEndpoint("::", 0, lab=lab, host=1, netns=ns)
        async with ep:
            await asyncio.get_running_loop().run_in_executor(None, lab.fail, link, "down")
            seen_down = await _wait(lambda: ep.ctx.ports_down == 0b10)
            await asyncio.get_running_loop().run_in_executor(None, lab.restore, link)
            seen_up = await _wait(lambda: ep.ctx.ports_down == 0)
            return seen_down, seen_up

    down, up = asyncio.run(main())
    assert down and up


async def _wait(cond: Callable[[], bool], timeout: float = 10.0) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return 1
        await asyncio.sleep(0.05)
    return 0
