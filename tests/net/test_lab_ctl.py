"""The node controller of lab endpoints, reached through ``openmrc lab ctl``.

Two endpoints run in one process (h0 and h1 of a small lab, each with its
controller socket ``<state dir>/<lab>/<host>.ctl``); requests go through the
real Unix socket (:func:`ctl_request`) or the CLI (``lab_cli.main``, in a
thread while the loop serves).  No timing assertions.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from openmrc.cli import lab as lab_cli
from openmrc.net.ctl import PROBE_PORT, CtlError, ctl_request, lab_ctl_path
from openmrc.net.driver import Connection, NetEndpoint, driver_attr
from openmrc.net.lab import Lab
from openmrc.transport.ev import ev_plane, make_ev
from openmrc.transport.paths import EVState
from tests.tools import needs_tool

pytestmark = pytest.mark.lab

SPEC = "planes=2,t0s=2,hosts_per_t0=1,t1s=2"
SIZE = 2 << 20

Body = Callable[[Lab, NetEndpoint, NetEndpoint, Connection, Connection], Awaitable[Any]]


#: The unprivileged client of the credentials test.
CHILD = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(PATH)
s.settimeout(3)
try:
    line = s.makefile("rb").readline()
except TimeoutError:
    s.settimeout(None)
    s.sendall(b'{"op": "deny_plane", "plane": 1}\\n')
    line = s.makefile("rb").readline()
sys.stdout.write(line.decode())
"""


def _run(lab: Lab, body: Body) -> Any:
    """h0 and h1 endpoints with a connected QP pair each way; run ``body``."""

    async def main() -> Any:
        h0 = NetEndpoint(netns=lab.host_netns(0), lab=lab, host=0)
        h1 = NetEndpoint(netns=lab.host_netns(1), lab=lab, host=1)
        async with h0, h1:
            ca, cb = h0.create_connection(), h1.create_connection()
            ca.connect(cb.qpn, h1.local_peer)
            # h1's QP gets its own, equal attributes (as 'openmrc serve' builds them
            # from the client's hello): it still counts as using h1's profile 0.
            cb.connect(ca.qpn, h0.local_peer, driver_attr(lab.topology.spec.planes))
            return await body(lab, h0, h1, ca, cb)

    return asyncio.run(main())


async def _ctl(lab: Lab, host: str, **msg: Any) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, lambda: ctl_request(lab.name, host, msg))


async def _write(h0: NetEndpoint, h1: NetEndpoint, ca: Connection) -> None:
    data = bytearray(os.urandom(SIZE))
    src = h0.reg_mr(data)
    dst = h1.reg_mr(bytearray(SIZE))
    for off in range(0, SIZE, 256 << 10):
        ca.post_write(src, off, 256 << 10, dst.remote(), off)
    wr = ca.post_write(src, 0, 1, dst.remote(), 0)
    assert (await asyncio.wait_for(ca.wait_send(wr), 30)).ok
    assert dst.buffer == data


def test_deny_and_allow_a_plane_cover_the_qps_of_the_profile(make_lab: Callable[..., Lab]) -> None:
    async def body(lab: Lab, h0: NetEndpoint, h1: NetEndpoint, ca: Connection, cb: Connection):
        path = lab_ctl_path(lab.name, "h0")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600  # root only
        st = await _ctl(lab, "h1", op="status")
        assert st["profiles"][0]["qps"] == [cb.qpn]  # the equal profile object matched
        r = await _ctl(lab, "h0", op="deny_plane", plane=1)
        assert r["op"] == "deny_plane" and r["denied_planes"] == [1] and r["qps"] == 1
        assert ca.qp.paths is not None and ca.qp.paths.denied_planes == 0b10
        before = dict(h0.tx_by_ev)
        await _write(h0, h1, ca)
        sent = {ev: n - before.get(ev, 0) for ev, n in h0.tx_by_ev.items()}
        assert sum(n for ev, n in sent.items() if ev_plane(ev) == 1) == 0
        assert sum(n for ev, n in sent.items() if ev_plane(ev) == 0) > 0
        # a QP created after the deny is covered too
        late = h0.create_connection()
        late.connect(cb.qpn, h1.local_peer)
        assert late.qp.paths is not None and late.qp.paths.denied_planes == 0b10
        r = await _ctl(lab, "h0", op="allow_plane", plane=1)
        assert r["denied_planes"] == [] and ca.qp.paths.denied_planes == 0
        r = await _ctl(lab, "h1", op="deny_plane", plane=0)
        assert cb.qp.paths is not None and cb.qp.paths.denied_planes == 0b01
        ports = await _ctl(lab, "h1", op="ports")
        assert ports["ports_down"] == 0
        assert [p["denied_in_profiles"] for p in ports["ports"]] == [[0], []]

    _run(make_lab(SPEC), body)


def test_events_follow_the_mask_and_deny_allow_ev(make_lab: Callable[..., Lab]) -> None:
    async def body(lab: Lab, h0: NetEndpoint, h1: NetEndpoint, ca: Connection, cb: Connection):
        assert ca.qp.paths is not None
        ev = ca.qp.paths.slots[0]
        await _ctl(lab, "h0", op="events")  # empty the queue
        r = await _ctl(lab, "h0", op="deny_ev", ev=ev)
        assert r["denied_evs"] == [ev] and ca.qp.paths.state[ev] is EVState.DENIED
        await asyncio.sleep(0.05)
        got = await _ctl(lab, "h0", op="events")
        assert got["mask_states"] == ["GOOD", "ASSUMED_BAD"]
        assert [e for e in got["events"] if e["new"] == "DENIED"] == []  # masked out
        await _ctl(lab, "h0", op="allow_ev", ev=ev)
        got = await _ctl(lab, "h0", op="events", mask=0b1111)
        assert got["mask"] == 0b1111
        r = await _ctl(lab, "h0", op="deny_ev", ev=ev)
        await _write(h0, h1, ca)
        got = await _ctl(lab, "h0", op="events", max=1024)
        denied = [e for e in got["events"] if e["ev"] == ev and e["new"] == "DENIED"]
        assert len(denied) == 1 and denied[0]["qpn"] == ca.qpn
        assert got["dropped_total"] == 0

    _run(make_lab(SPEC), body)


@needs_tool("nft")
def test_probes_return_an_rtt_or_a_timeout(make_lab: Callable[..., Lab]) -> None:
    async def body(lab: Lab, h0: NetEndpoint, h1: NetEndpoint, ca: Connection, cb: Connection):
        ok = await _ctl(lab, "h0", op="probe", dest="h1", ev=make_ev(1, 0), timeout=5)
        assert ok["op"] == "probe" and not ok["timed_out"] and ok["rtt_us"] > 0
        assert ok["path_address"] == lab.path_address(0, 1, make_ev(1, 0))
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, lab.fail, "p1t1x1", "silent")
        dead = await _ctl(lab, "h0", op="probe", dest=1, ev=make_ev(1, 1), timeout=0.5)
        assert dead["timed_out"] and dead["rtt_us"] is None
        alive = await _ctl(lab, "h0", op="probe", dest=1, ev=make_ev(1, 0), timeout=5)
        assert not alive["timed_out"]  # the other T1 of the plane still answers
        assert h1.node_control is not None and h1.node_control.stats["probes_answered"] >= 2

    _run(make_lab(SPEC), body)


@pytest.mark.parametrize(
    ("msg", "field"),
    [
        ({"op": "reboot"}, "op"),
        ({"plane": 1}, "op"),
        ({"op": "deny_plane"}, "plane"),
        ({"op": "deny_plane", "plane": "one"}, "plane"),
        ({"op": "deny_plane", "plane": 9}, "plane"),
        ({"op": "deny_plane", "plane": 1, "profile": 7}, "profile"),
        ({"op": "deny_plane", "plane": 1, "colour": "red"}, "colour"),
        ({"op": "allow_plane", "plane": 1}, "plane"),  # not denied
        ({"op": "deny_ev", "ev": -1}, "ev"),
        ({"op": "allow_ev", "ev": 5}, "ev"),
        ({"op": "events", "mask": 99}, "mask"),
        ({"op": "events", "max": 0}, "max"),
        ({"op": "probe", "ev": 0}, "dest"),
        ({"op": "probe", "dest": "h0", "ev": 0}, "dest"),
        ({"op": "probe", "dest": "h9", "ev": 0}, "dest"),
        ({"op": "probe", "dest": "h1", "ev": make_ev(5, 0)}, "ev"),
        ({"op": "probe", "dest": "h1", "ev": 0, "timeout": 0}, "timeout"),
        ({"op": "probe", "dest": [1], "ev": 0}, "dest"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(
    make_lab: Callable[..., Lab], msg: dict[str, Any], field: str
) -> None:
    async def body(lab: Lab, h0: NetEndpoint, h1: NetEndpoint, ca: Connection, cb: Connection):
        r = await _ctl(lab, "h0", **msg)
        assert r["op"] == "error" and r["field"] == field, r
        assert r["message"].startswith(f"{field}: ")
        assert ca.qp.paths is not None and ca.qp.paths.denied_planes == 0
        # the connection and the controller survive: the next request works
        assert (await _ctl(lab, "h0", op="status"))["op"] == "status"

    _run(make_lab(SPEC), body)


def test_garbage_on_the_socket_and_on_the_probe_port(make_lab: Callable[..., Lab]) -> None:
    async def body(lab: Lab, h0: NetEndpoint, h1: NetEndpoint, ca: Connection, cb: Connection):
        path = str(lab_ctl_path(lab.name, "h0"))
        reader, writer = await asyncio.open_unix_connection(path)
        for line in (b"{not json\n", b"[1, 2]\n", b"\xff\xfe\n", b'"op"\n'):
            writer.write(line)
            reply = json.loads(await reader.readline())
            assert reply["op"] == "error" and reply["field"] == "request"
        writer.close()
        # junk and forged replies to the probe port are ignored, answered only to lab hosts
        sock = lab.udp_socket(1, 0, plane=0)
        dst = lab.path_address(1, 0, make_ev(0, 0))
        for junk in (b"", b"x" * 21, b"OMRCCTL1" + bytes(13), b"OMRCCTL1" + b"\x01" + bytes(12)):
            sock.sendto(junk, (dst, PROBE_PORT))
        sock.close()
        await asyncio.sleep(0.2)
        assert h0.node_control is not None and h0.node_control.stats["probe_rx_ignored"] >= 3
        assert (await _ctl(lab, "h0", op="status"))["op"] == "status"

    _run(make_lab(SPEC), body)


def test_lab_ctl_cli(make_lab: Callable[..., Lab], capsys: pytest.CaptureFixture[str]) -> None:
    def cli(*argv: str) -> int:
        return lab_cli.main(["lab", "ctl", "--name", lab.name, *argv])

    async def body(lab: Lab, h0: NetEndpoint, h1: NetEndpoint, ca: Connection, cb: Connection):
        loop = asyncio.get_running_loop()

        async def run(*argv: str) -> tuple[int, str, str]:
            code = await loop.run_in_executor(None, lambda: cli(*argv))
            out, err = capsys.readouterr()
            return code, out, err

        code, out, _ = await run("h0", "deny-plane", "1")
        assert code == 0 and "h0: plane 1 denied in EV profile 0" in out
        assert ca.qp.paths is not None and ca.qp.paths.denied_planes == 0b10
        code, out, _ = await run("h0", "ports")
        assert code == 0 and "plane 1 (plane1): up, denied in profiles [0]" in out
        code, out, _ = await run("h0", "allow-plane", "1")
        assert code == 0 and ca.qp.paths.denied_planes == 0
        code, out, _ = await run("h0", "probe", "h1", "--ev", hex(make_ev(0, 1)))
        assert code == 0 and "probe h0 -> h1 on EV 0x" in out and "rtt" in out
        code, out, _ = await run("h0", "events", "--mask", "good,assumed_bad,denied")
        assert code == 0 and "mask GOOD|ASSUMED_BAD|DENIED" in out
        code, out, _ = await run("h1", "--json", "status")
        assert code == 0 and json.loads(out)["host"] == "h1"
        code, out, _ = await run("h1", "ports", "--json")  # flags after the command too
        assert code == 0 and json.loads(out)["op"] == "ports"
        # errors: one line naming the field, no traceback
        code, _, err = await run("h0", "deny-plane", "7")
        assert code == 1 and err.startswith("openmrc lab: ctl h0: plane: ")
        code, _, err = await run("h0", "deny-ev", "zz")
        assert code == 2 and err.startswith("openmrc lab: ctl EV: ")
        code, _, err = await run("h0", "events", "--mask", "sunny")
        assert code == 2 and err.startswith("openmrc lab: ctl --mask: ")
        code, _, err = await run("h0", "probe", "h1", "--ev", "0", "--timeout", "0")
        assert code == 2 and err.startswith("openmrc lab: ctl --timeout: ")
        assert "Traceback" not in err

    lab = make_lab(SPEC)
    _run(lab, body)
    # no endpoint left: the socket is gone and the CLI says so
    assert not lab_ctl_path(lab.name, "h0").exists()
    assert cli("h0", "status") == 1
    assert "no endpoint with a controller runs on h0" in capsys.readouterr().err
    with pytest.raises(CtlError, match="^host: "):
        ctl_request(lab.name, "h1", {"op": "status"})


def test_only_root_or_the_owner_gets_in_and_one_endpoint_per_host_serves(
    make_lab: Callable[..., Lab],
) -> None:
    import shutil
    import subprocess

    # an interpreter another user may run (the test's venv may sit under /root)
    exe = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if shutil.which(p)), None)
    if exe is None:
        pytest.skip("no system python3 for the unprivileged client")

    async def body(lab: Lab, h0: NetEndpoint, h1: NetEndpoint, ca: Connection, cb: Connection):
        path = lab_ctl_path(lab.name, "h0")
        # even with the file opened up, another user is refused by its credentials
        os.chmod(path, 0o666)
        os.chmod(path.parent, 0o755)
        os.chmod(path.parent.parent, 0o755)  # the state directory (0700: lab.ensure_state_dir)
        # a refused client is told at once; an accepted one hears nothing until it asks
        code = CHILD.replace("PATH", repr(str(path)))
        loop = asyncio.get_running_loop()
        proc = await loop.run_in_executor(
            None,
            lambda: subprocess.run(
                [exe, "-c", code], user=65534, cwd="/", capture_output=True, text=True, timeout=30
            ),
        )
        assert proc.stdout, proc.stderr
        reply = json.loads(proc.stdout)
        assert reply["op"] == "error" and reply["field"] == "peer", proc
        assert ca.qp.paths is not None and ca.qp.paths.denied_planes == 0
        assert h0.node_control is not None and h0.node_control.stats["refused"] == 1
        # a second endpoint on h0 leaves the first one's controller socket alone
        second = NetEndpoint("::", 0, netns=lab.host_netns(0), lab=lab, host=0)
        async with second:
            assert second.node_control is None
            assert (await _ctl(lab, "h0", op="status"))["qps"] == [ca.qpn]
        assert path.exists()

    _run(make_lab(SPEC), body)
