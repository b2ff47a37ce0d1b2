"""The node controller of a lab endpoint, reachable over a privileged Unix socket.

MRC gives every node one privileged controller over its NIC contexts
(:class:`openmrc.transport.controller.Controller`: EV/CC profiles, deny and
allow of EVs and planes, the EV event queue, probes, port status).  A lab
endpoint (``openmrc serve --lab L --host H``, ``openmrc send --lab L --from
H``, any :class:`~openmrc.net.driver.NetEndpoint` made with ``lab=`` and
``host=``) runs one, and :class:`NodeControl` serves it:

* **where**: ``<lab state dir>/<lab>/<host>.ctl`` (``/run/openmrc-lab/L/h1.ctl``),
  beside the data-control socket ``<host>.sock``; mode 0600 and every
  connection's peer credentials (``SO_PEERCRED``) must be root or the
  endpoint's own user: the controller is privileged, not for applications;
* **protocol**: one JSON object per line each way (at most
  :data:`MAX_LINE` bytes); a request ``{"op": ..., ...}`` gets ``{"op": ...,
  ...}`` or ``{"op": "error", "field": F, "message": "F: reason"}``.  Every
  field is checked, unknown keys are refused by name, and no exception
  escapes a handler;
* **ops**: ``status`` (profiles, deny lists, masks, QPs), ``deny_plane`` /
  ``allow_plane`` (``plane``), ``deny_ev`` / ``allow_ev`` (``ev``), all with
  ``profile`` (default 0: the endpoint's profile), ``events`` (``max``,
  optional ``mask`` to set first: the EV event queue with its mask, depth and
  dropped count), ``probe`` (``dest`` host, ``ev``, ``timeout`` seconds: an
  RTT or a timeout), ``ports`` (port status).

**Controller probes** travel the EV's own SRv6 path (the path address
``Lab.path_address(host, dest, ev)``, the EV in the flow label) to UDP port
:data:`PROBE_PORT` on the destination host, where that host's node
controller sends them back along the reverse path of the same EV.  They do
not use the data port: the driver hands the core only datagrams for its live
QPs.  A probe is ``MAGIC, kind (0 probe / 1 reply), probe id (8 bytes), EV
(4 bytes)``; a reply counts only from the host the probe went to.  So the
destination needs a running lab endpoint too; otherwise the probe times out.

Profile 0 is the endpoint's EV profile (and CC profile 0 its CC profile).
The controller matches profiles by value (``match_equal``): ``openmrc serve``
builds each session's QPs from the client's hello, equal to its own profile,
and those QPs count as using profile 0, so a deny covers them, present and
future.  :func:`ctl_request` is the client (``openmrc lab ctl``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import struct
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from openmrc.net.lab import LabError, ensure_state_dir, private_dir, state_dir
from openmrc.transport.controller import Controller, ProbeResult
from openmrc.transport.errors import MrcError
from openmrc.transport.ev import ev_path, ev_plane
from openmrc.transport.paths import EVState

if TYPE_CHECKING:
    from openmrc.net.lab import Lab
    from openmrc.transport import Context, QPAttr


class ControlledEndpoint(Protocol):
    """What :class:`NodeControl` uses of the endpoint it serves
    (:class:`openmrc.net.driver.NetEndpoint`, which starts it): a protocol, so the
    controller does not import the driver built on it."""

    lab: Lab | None
    host: int | None
    ctx: Context
    attr: QPAttr


#: UDP port the node controllers' probe sockets use (send and answer).
PROBE_PORT = 4793
#: Longest request line accepted (bytes).
MAX_LINE = 64 * 1024
#: Concurrent controller connections served; more are refused.
MAX_CLIENTS = 8
#: First bytes of a controller probe datagram.
MAGIC = b"OMRCCTL1"
_PROBE = struct.Struct(">BQI")
PROBE_LEN = len(MAGIC) + _PROBE.size
#: The events an ``events`` request may return at most.
MAX_EVENTS = 1024
#: Longest probe timeout (seconds).
MAX_PROBE_TIMEOUT = 30.0

_STATE_NAMES = {s.name.lower(): s for s in EVState}

#: Keys each op accepts (besides ``op``).
_KEYS: dict[str, set[str]] = {
    "status": set(),
    "deny_plane": {"profile", "plane"},
    "allow_plane": {"profile", "plane"},
    "deny_ev": {"profile", "ev"},
    "allow_ev": {"profile", "ev"},
    "events": {"profile", "mask", "max"},
    "probe": {"dest", "ev", "timeout"},
    "ports": set(),
}


class CtlError(Exception):
    """A request refused: ``field`` names what was wrong."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field


def lab_ctl_path(lab: str, host: str) -> Path:
    """The controller socket of lab host ``host`` (``<state dir>/<lab>/<host>.ctl``)."""
    return state_dir() / lab / f"{host}.ctl"


def _now_ps() -> int:
    return time.monotonic_ns() * 1000


def _int(msg: dict[str, Any], key: str, lo: int, hi: int, default: int | None = None) -> int:
    """``msg[key]`` as an int in ``lo..hi`` (a ``0x`` string too), else :class:`CtlError`."""
    v = msg.get(key, default)
    if v is None:
        raise CtlError(key, "missing")
    if isinstance(v, str):
        try:
            v = int(v, 0)
        except ValueError:
            raise CtlError(key, f"must be an integer, got {v!r}") from None
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise CtlError(key, f"must be an integer in {lo}..{hi}, got {v!r}")
    return v


def parse_mask(text: str) -> int:
    """An event mask from ``good,assumed_bad,...`` state names or an integer (``0x5``)."""
    text = text.strip()
    try:
        mask = int(text, 0)
    except ValueError:
        mask = 0
        for name in filter(None, (n.strip().lower() for n in text.split(","))):
            state = _STATE_NAMES.get(name)
            if state is None:
                raise ValueError(
                    f"mask: {name!r} is not an EV state ({', '.join(_STATE_NAMES)})"
                ) from None
            mask |= 1 << state
    if not 0 <= mask < 1 << len(EVState):
        raise ValueError(f"mask: must be in 0..{(1 << len(EVState)) - 1}, got {mask}")
    return mask


def mask_names(mask: int) -> list[str]:
    """The EV state names an event mask reports."""
    return [s.name for s in EVState if mask >> s & 1]


class NodeControl:
    """A lab endpoint's controller and the server of its ``.ctl`` socket."""

    def __init__(self, ep: ControlledEndpoint) -> None:
        if ep.lab is None or ep.host is None:
            raise ValueError("ep: a NodeControl needs a lab endpoint (lab= and host=)")
        self.ep = ep
        self.lab = ep.lab
        self.host: int = ep.host
        self.node = self.lab.host_node(ep.host)
        ctx = ep.ctx
        existing = ctx.controller
        if isinstance(existing, Controller):
            self.controller = existing
        else:
            self.controller = Controller([ctx], match_equal=True)
            self.controller.create_ev_profile(0, ep.attr.ev_profile)
            self.controller.set_ev_profile_online(0)
            self.controller.create_cc_profile(0, ep.attr.cc_profile)
            self.controller.set_cc_profile_online(0)
        self.path = lab_ctl_path(self.lab.name, self.node)
        topo = self.lab.topology
        #: the lab host addresses (normalised) -> host index: who may answer probes.
        self._hosts_by_addr = {
            ipaddress.IPv6Address(self.lab.host_address(h, p)).packed: h
            for h in range(topo.spec.hosts)
            for p in range(topo.spec.planes)
        }
        self._sock: socket.socket | None = None
        self._server: asyncio.AbstractServer | None = None
        self._serve_task: asyncio.Task[None] | None = None
        self._probe_sock: socket.socket | None = None
        self._probe_error = ""
        self._waiters: dict[int, asyncio.Future[ProbeResult]] = {}
        self._probe_dest: dict[int, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._clients = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        #: counters: requests served, refused connections, probe datagrams.
        self.stats = {
            "requests": 0,
            "errors": 0,
            "refused": 0,
            "probes_answered": 0,
            "probe_rx_ignored": 0,
        }

    # -- lifecycle -----------------------------------------------------------------------
    def start(self) -> bool:
        """Listen on the ``.ctl`` socket and open the probe socket (in the running loop).

        Returns False (and serves nothing) when another live endpoint of this
        host already holds the socket.
        """
        loop = asyncio.get_running_loop()
        self._loop = loop
        path = self.path
        ensure_state_dir()
        private_dir(path.parent)
        if path.exists():
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.settimeout(0.5)
                probe.connect(str(path))
                return False  # a live controller of another endpoint on this host
            except OSError:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # stale
            finally:
                probe.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old = os.umask(0o177)
            try:
                sock.bind(str(path))
            finally:
                os.umask(old)
            os.chmod(path, 0o600)
            sock.listen(MAX_CLIENTS)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        self._serve_task = loop.create_task(self._serve(sock))
        try:
            self._probe_sock = self.lab.udp_socket(
                self.host, PROBE_PORT, blocking=False, flow_labels=True
            )
            loop.add_reader(self._probe_sock.fileno(), self._on_probe_readable)
        except OSError as exc:
            self._probe_error = f"cannot bind UDP port {PROBE_PORT}: {exc.strerror or exc}"
        return True

    async def _serve(self, sock: socket.socket) -> None:
        server = await asyncio.start_unix_server(self._on_client, sock=sock, limit=MAX_LINE)
        if self._sock is None:  # closed meanwhile
            server.close()
        else:
            self._server = server

    def close(self) -> None:
        """Stop serving: close the sockets, remove the socket file, fail pending probes."""
        if self._serve_task is not None and not self._serve_task.done():
            self._serve_task.cancel()
        self._serve_task = None
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
            with contextlib.suppress(OSError):
                os.rmdir(self.path.parent)
        if self._probe_sock is not None:
            if self._loop is not None:
                with contextlib.suppress(Exception):
                    self._loop.remove_reader(self._probe_sock.fileno())
            self._probe_sock.close()
            self._probe_sock = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for fut in self._waiters.values():
            if not fut.done():
                fut.cancel()
        self._waiters.clear()

    # -- the socket ----------------------------------------------------------------------
    def _peer_allowed(self, writer: asyncio.StreamWriter) -> bool:
        sock = writer.get_extra_info("socket")
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", creds)
        except (OSError, AttributeError, struct.error):
            return False  # cannot tell who it is: refuse
        return uid in (0, os.geteuid())

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self._clients >= MAX_CLIENTS or not self._peer_allowed(writer):
                self.stats["refused"] += 1
                writer.write(
                    _line({"op": "error", "field": "peer", "message": "peer: not allowed"})
                )
                return
            self._clients += 1
            try:
                while True:
                    try:
                        line = await reader.readline()
                    except (ValueError, asyncio.LimitOverrunError):
                        writer.write(
                            _line(
                                {
                                    "op": "error",
                                    "field": "request",
                                    "message": f"request: longer than {MAX_LINE} bytes",
                                }
                            )
                        )
                        return
                    if not line:
                        return
                    reply = await self.handle_line(line)
                    writer.write(_line(reply))
                    await writer.drain()
            finally:
                self._clients -= 1
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def handle_line(self, line: bytes) -> dict[str, Any]:
        """One request line -> its reply (never raises)."""
        try:
            msg = json.loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            return self._error(CtlError("request", f"not JSON: {exc}"))
        return await self.handle(msg)

    async def handle(self, msg: Any) -> dict[str, Any]:
        """One request -> its reply; errors name the field (never raises)."""
        self.stats["requests"] += 1
        try:
            if not isinstance(msg, dict):
                raise CtlError("request", "must be a JSON object")
            op = msg.get("op")
            if not isinstance(op, str) or op not in _KEYS:
                raise CtlError("op", f"must be one of {', '.join(_KEYS)}, got {op!r}")
            extra = sorted(set(msg) - _KEYS[op] - {"op"})
            if extra:
                raise CtlError(extra[0], f"unknown for op {op!r}")
            if op == "probe":
                return await self._probe(msg)
            return getattr(self, f"_op_{op}")(msg)
        except CtlError as exc:
            return self._error(exc)
        except MrcError as exc:
            text = str(exc)
            field = text.split(":", 1)[0] if ":" in text else "request"
            return self._error(CtlError(field, text.split(":", 1)[-1].strip()))
        except Exception as exc:  # no exception escapes a handler
            return self._error(CtlError("request", f"failed: {type(exc).__name__}: {exc}"))

    def _error(self, exc: CtlError) -> dict[str, Any]:
        self.stats["errors"] += 1
        return {"op": "error", "field": exc.field, "message": str(exc)}

    # -- ops -------------------------------------------------------------------------------
    def _profile(self, msg: dict[str, Any]) -> int:
        pid = _int(msg, "profile", 0, (1 << 32) - 1, default=0)
        if pid not in self.controller.ev_profile_ids():
            raise CtlError("profile", f"no EV profile {pid} on {self.node}")
        return pid

    def _op_status(self, msg: dict[str, Any]) -> dict[str, Any]:
        ctl = self.controller
        profiles = []
        for pid in ctl.ev_profile_ids():
            evs, planes = ctl.denied(pid)
            profiles.append(
                {
                    "profile": pid,
                    "state": ctl.ev_profile_state(pid).value,
                    "denied_planes": [p for p in range(16) if planes >> p & 1],
                    "denied_evs": sorted(evs),
                    "event_mask": ctl.event_mask(pid),
                    "qps": [qp.qpn for qp in ctl.qps_using(pid)],
                }
            )
        return {
            "op": "status",
            "lab": self.lab.name,
            "host": self.node,
            "profiles": profiles,
            "qps": sorted(self.ep.ctx.qps),
            "events_queued": ctl.queued_events(),
            "events_dropped": ctl.events_dropped,
            "probes": self._probe_error or "ok",
        }

    def _plane_op(self, msg: dict[str, Any], deny: bool) -> dict[str, Any]:
        pid = self._profile(msg)
        plane = _int(msg, "plane", 0, 15)
        ctl = self.controller
        ctl.check_plane(pid, plane)
        (ctl.deny_plane if deny else ctl.allow_plane)(pid, plane, _now_ps())
        _, planes = ctl.denied(pid)
        return {
            "op": msg["op"],
            "profile": pid,
            "plane": plane,
            "denied_planes": [p for p in range(16) if planes >> p & 1],
            "qps": len(ctl.qps_using(pid)),
        }

    def _op_deny_plane(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self._plane_op(msg, True)

    def _op_allow_plane(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self._plane_op(msg, False)

    def _ev_op(self, msg: dict[str, Any], deny: bool) -> dict[str, Any]:
        pid = self._profile(msg)
        ev = _int(msg, "ev", 0, 0xFFFFFFFF)
        ctl = self.controller
        (ctl.deny_ev if deny else ctl.allow_ev)(pid, ev, _now_ps())
        evs, _ = ctl.denied(pid)
        return {
            "op": msg["op"],
            "profile": pid,
            "ev": ev,
            "denied_evs": sorted(evs),
            "qps": len(ctl.qps_using(pid)),
        }

    def _op_deny_ev(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self._ev_op(msg, True)

    def _op_allow_ev(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self._ev_op(msg, False)

    def _op_events(self, msg: dict[str, Any]) -> dict[str, Any]:
        pid = self._profile(msg)
        limit = _int(msg, "max", 1, MAX_EVENTS, default=256)
        ctl = self.controller
        if "mask" in msg:
            ctl.set_event_mask(pid, _int(msg, "mask", 0, (1 << len(EVState)) - 1))
        events = [
            {
                "profile": e.profile_id,
                "time_ps": e.event.time,
                "qpn": e.event.qpn,
                "ev": e.event.ev,
                "plane": ev_plane(e.event.ev),
                "path": ev_path(e.event.ev),
                "old": e.event.old.name,
                "new": e.event.new.name,
                "reason": e.event.reason,
                "dropped_before": e.dropped,
            }
            for e in ctl.poll_events(limit)
        ]
        return {
            "op": "events",
            "profile": pid,
            "mask": ctl.event_mask(pid),
            "mask_states": mask_names(ctl.event_mask(pid)),
            "depth": ctl.event_depth,
            "events": events,
            "still_queued": ctl.queued_events(),
            "dropped_total": ctl.events_dropped,
        }

    def _op_ports(self, msg: dict[str, Any]) -> dict[str, Any]:
        ctl = self.controller
        down = ctl.port_status(self.ep.ctx)
        planes = self.lab.topology.spec.planes
        denied = {pid: ctl.denied(pid)[1] for pid in ctl.ev_profile_ids()}
        return {
            "op": "ports",
            "ports_down": down,
            "ports": [
                {
                    "plane": p,
                    "interface": self.lab.host_ifname(p),
                    "up": not down >> p & 1,
                    "denied_in_profiles": [pid for pid, m in denied.items() if m >> p & 1],
                }
                for p in range(planes)
            ],
        }

    # -- probes ----------------------------------------------------------------------------
    async def _probe(self, msg: dict[str, Any]) -> dict[str, Any]:
        topo = self.lab.topology
        dest_raw = msg.get("dest")
        if dest_raw is None:
            raise CtlError("dest", "missing")
        try:
            if isinstance(dest_raw, bool) or not isinstance(dest_raw, int | str):
                raise ValueError(f"must be a host name or index, got {dest_raw!r}")
            dest = self.lab.host_index(dest_raw)
        except (LabError, ValueError) as exc:
            raise CtlError("dest", str(exc).split(": ", 1)[-1]) from None
        if dest == self.host:
            raise CtlError("dest", f"{self.node} is this host (probe another host)")
        ev = _int(msg, "ev", 0, 0xFFFFFFFF)
        if ev_plane(ev) >= topo.spec.planes:
            raise CtlError(
                "ev", f"{ev:#x} is in plane {ev_plane(ev)}; the lab has {topo.spec.planes} planes"
            )
        timeout = msg.get("timeout", 1.0)
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not 0 < timeout <= MAX_PROBE_TIMEOUT
        ):
            raise CtlError("timeout", f"must be in (0, {MAX_PROBE_TIMEOUT:g}] s, got {timeout!r}")
        if self._probe_sock is None:
            raise CtlError("probe", self._probe_error or "the probe socket is closed")
        loop = asyncio.get_running_loop()
        pid = self.controller.probe(dest, ev, _now_ps(), int(timeout * 1e12))
        fut: asyncio.Future[ProbeResult] = loop.create_future()
        self._waiters[pid] = fut
        self._probe_dest[pid] = dest
        self._send_probes()
        try:
            res = await fut
        finally:
            self._waiters.pop(pid, None)
            self._probe_dest.pop(pid, None)
        return {
            "op": "probe",
            "probe_id": res.probe_id,
            "dest": self.lab.host_node(dest),
            "ev": ev,
            "plane": ev_plane(ev),
            "path": ev_path(ev),
            "path_address": self.lab.path_address(self.host, dest, ev),
            "rtt_us": None if res.rtt_ps is None else res.rtt_ps / 1e6,
            "timed_out": res.rtt_ps is None,
        }

    def _send_probes(self) -> None:
        sock = self._probe_sock
        for req in self.controller.probes_to_send():
            if sock is None:
                continue
            addr = self.lab.path_address(self.host, req.dest, req.ev)
            data = MAGIC + _PROBE.pack(0, req.probe_id, req.ev)
            with contextlib.suppress(OSError):  # no route: it times out
                sock.sendto(data, (addr, PROBE_PORT, req.ev & 0xFFFFF, 0))
        self._arm_timer()

    def _arm_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        at = self.controller.get_timer()
        if at is None or self._loop is None:
            return
        delay = max((at - _now_ps()) / 1e12, 0.0)
        self._timer = self._loop.call_later(delay + 0.001, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.controller.handle_timer(_now_ps())
        self._dispatch()
        self._arm_timer()

    def _dispatch(self) -> None:
        for res in self.controller.poll_probe_results():
            fut = self._waiters.get(res.probe_id)
            if fut is not None and not fut.done():
                fut.set_result(res)

    def _on_probe_readable(self) -> None:
        sock = self._probe_sock
        if sock is None:
            return
        for _ in range(64):
            try:
                data, src = sock.recvfrom(256)
            except BlockingIOError:
                break
            except OSError:
                break
            self._on_probe_datagram(data, src)
        self._dispatch()
        self._arm_timer()

    def _on_probe_datagram(self, data: bytes, src: tuple[Any, ...]) -> None:
        """Answer a probe from a lab host, or take a reply to one of ours; ignore the rest."""
        if len(data) != PROBE_LEN or not data.startswith(MAGIC):
            self.stats["probe_rx_ignored"] += 1
            return
        kind, probe_id, ev = _PROBE.unpack_from(data, len(MAGIC))
        try:
            src_host = self._hosts_by_addr.get(ipaddress.IPv6Address(src[0].split("%")[0]).packed)
        except ValueError:
            src_host = None
        topo = self.lab.topology
        if src_host is None or src_host == self.host or ev_plane(ev) >= topo.spec.planes:
            self.stats["probe_rx_ignored"] += 1
            return
        if kind == 0:
            back = MAGIC + _PROBE.pack(1, probe_id, ev)
            addr = self.lab.path_address(self.host, src_host, ev)
            with contextlib.suppress(OSError):
                self._probe_sock.sendto(back, (addr, src[1], ev & 0xFFFFF, 0))  # type: ignore[union-attr]
                self.stats["probes_answered"] += 1
        elif kind == 1 and self._probe_dest.get(probe_id) == src_host:
            self.controller.on_probe_reply(probe_id, _now_ps())
        else:
            self.stats["probe_rx_ignored"] += 1


def _line(msg: dict[str, Any]) -> bytes:
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


def start_node_control(ep: ControlledEndpoint) -> NodeControl | None:
    """Start the controller socket of a lab endpoint (None if another endpoint of the
    host already serves it, or it cannot be created)."""
    try:
        nc = NodeControl(ep)
        return nc if nc.start() else None
    except (OSError, MrcError, ValueError):
        return None


def ctl_request(lab: str, host: str, msg: dict[str, Any], timeout: float = 10.0) -> dict[str, Any]:
    """Send one request to lab host ``host``'s controller and return the reply.

    Raises :class:`CtlError` (field ``host``) when no endpoint with a
    controller runs there, or the reply does not come within ``timeout``.
    """
    path = lab_ctl_path(lab, host)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise CtlError(
                "host",
                f"no endpoint with a controller runs on {host} in lab {lab} "
                f"(start 'openmrc serve --lab {lab} --host {host}' there; {path} is missing)",
            ) from None
        sock.sendall(_line(msg))
        buf = b""
        while not buf.endswith(b"\n"):
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                raise CtlError(
                    "host", f"{host}'s controller did not answer within {timeout} s"
                ) from None
            if not chunk:
                raise CtlError("host", f"{host}'s controller closed the connection")
            buf += chunk
            if len(buf) > 16 * MAX_LINE:
                raise CtlError("host", "reply too long")
        reply = json.loads(buf)
        if not isinstance(reply, dict):
            raise CtlError("host", "the reply is not a JSON object")
        return reply
    finally:
        sock.close()
