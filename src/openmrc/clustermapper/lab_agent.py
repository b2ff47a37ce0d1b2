"""Fault localisation by self-probes over the lab's real SRv6 fabric (the paper's Clustermapper).

Every lab host sends UDP datagrams *to itself* by source route, in every
plane: to its T0 and back (destination ``fcbb:0:T0(p,a):DOWN(p,d)::``) and
through each T1 of its subset and back
(``fcbb:0:T0(p,a):T1(p,k):T0(p,a):DOWN(p,d)::``).  The lab's static tables
already carry both (a T0 routes its downlink uSIDs to its host ports, a T1 its
T0 uSIDs to its down ports), so no route is added: the datagram climbs,
each switch shifts the uSID carrier, and it comes back to the host as the
host's arrival address ``fcbb:0:DOWN(p,d)::``.  Which probes do not come back
names the broken NIC-T0 link, T0, T0-T1 link or T1, or a lossy NIC-T0 link;
:class:`openmrc.clustermapper.localise.Localiser` (shared with the simulator) decides.
:func:`deny_lossy_planes` then denies a lossy link's plane at its host's
node controller (``openmrc lab localise --deny-lossy``).

:class:`SelfProber` runs every host's prober from one process: one
no-checksum socket per host, created inside the host's namespace and bound
to ``[::]:<any port>``, sending to its own port.  A probe is
``MAGIC + seq (8 bytes) + host (2 bytes)``; a datagram is counted only when
it comes back to the socket of the host that sent it, with a sequence
number still in flight in this round (anything else is ignored).  A send
that fails (``ENETUNREACH`` once an admin-down link flushed the route) is a
lost probe, as on a wire.  ``openmrc lab localise`` prints the result.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from openmrc.clustermapper.localise import Finding, Localiser, self_probe_address
from openmrc.net.lab import Lab
from openmrc.topology import format_address

#: First bytes of every self-probe datagram.
MAGIC = b"OMRCSELF"
_BODY = struct.Struct(">QH")
PROBE_LEN = len(MAGIC) + _BODY.size


@dataclass
class SelfProbeResult:
    """What a run of :meth:`SelfProber.run` found."""

    rounds: int
    probes_sent: int
    probes_back: int
    send_errors: int
    #: the localiser's report rows (kind, element, plane, time_ps, cleared_ps, ...).
    localised: list[dict[str, Any]] = field(default_factory=list)

    def active(self) -> list[dict[str, Any]]:
        """The elements still failing at the end (not cleared)."""
        return [r for r in self.localised if r["cleared_ps"] is None]

    def to_json(self) -> dict[str, Any]:
        """As a JSON-able dict."""
        return {
            "rounds": self.rounds,
            "probes_sent": self.probes_sent,
            "probes_back": self.probes_back,
            "send_errors": self.send_errors,
            "localised": self.localised,
        }


class SelfProber:
    """Self-probes from every host of a lab, in rounds, fed to a :class:`Localiser`.

    ``t0_probes`` / ``t1_probes``: probes per host, plane and target per round;
    ``timeout`` (seconds): how long a round waits for its probes (a probe not
    back by then is lost; the fabric's kernel forwarding takes microseconds,
    so the default is generous).  ``window``/``fail_rate``/``lossy_rate``/
    ``t1_subset``: the :class:`Localiser`'s.
    """

    def __init__(
        self,
        lab: Lab,
        *,
        t0_probes: int = 4,
        t1_probes: int = 2,
        timeout: float = 0.5,
        t1_subset: int | None = None,
        window: int = 8,
        fail_rate: float = 0.9,
        lossy_rate: float = 0.05,
    ) -> None:
        for name, v in (("t0_probes", t0_probes), ("t1_probes", t1_probes)):
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 64:
                raise ValueError(f"{name}: must be an int in 1..64, got {v!r}")
        if not isinstance(timeout, int | float) or not 0 < timeout <= 60:
            raise ValueError(f"timeout: must be in (0, 60] seconds, got {timeout!r}")
        self.lab = lab
        self.topology = lab.topology
        self.t0_probes = t0_probes
        self.t1_probes = t1_probes
        self.timeout = float(timeout)
        self.localiser = Localiser(
            self.topology,
            t1_subset=t1_subset,
            window=window,
            fail_rate=fail_rate,
            lossy_rate=lossy_rate,
        )
        self.probes_sent = 0
        self.probes_back = 0
        self.send_errors = 0
        self._seq = 1
        self._inflight: dict[int, tuple[int, int, int]] = {}
        self._socks: dict[int, socket.socket] = {}
        self._t0 = time.monotonic()

    # -- sockets -----------------------------------------------------------------------
    def open(self) -> None:
        """One socket per host, in its namespace (idempotent)."""
        for h in range(self.topology.spec.hosts):
            if h not in self._socks:
                self._socks[h] = self.lab.udp_socket(h, 0, blocking=False)

    def close(self) -> None:
        """Close every socket."""
        for sock in self._socks.values():
            sock.close()
        self._socks.clear()

    def __enter__(self) -> SelfProber:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- rounds --------------------------------------------------------------------------
    def _now_ps(self) -> int:
        return int((time.monotonic() - self._t0) * 1e12)

    def run_round(self) -> list[Finding]:
        """Send one round of probes from every host, wait for them, localise."""
        self.open()
        loc = self.localiser
        spec = self.topology.spec
        self._inflight.clear()
        for h, sock in self._socks.items():
            port = sock.getsockname()[1]
            for plane in range(spec.planes):
                for k in loc.targets(h, self.t0_probes, self.t1_probes):
                    seq = self._seq
                    self._seq += 1
                    dst = format_address(self_probe_address(self.topology, h, plane, k))
                    loc.sent(h, plane, k)
                    self.probes_sent += 1
                    self._inflight[seq] = (h, plane, k)
                    try:
                        sock.sendto(MAGIC + _BODY.pack(seq, h), (dst, port))
                    except OSError:
                        self.send_errors += 1  # no route (link down): lost, as on a wire
        self._collect()
        return loc.close_round(self._now_ps())

    def _collect(self) -> None:
        deadline = time.monotonic() + self.timeout
        sel = selectors.DefaultSelector()
        try:
            for h, sock in self._socks.items():
                sel.register(sock, selectors.EVENT_READ, h)
            while self._inflight:
                # (at the deadline one last look without waiting: a probe already
                # queued on a socket came back, even if this process was not
                # running to read it, e.g. descheduled on a loaded machine)
                left = deadline - time.monotonic()
                for key, _ in sel.select(max(left, 0.0)):
                    self._drain(key.fileobj, key.data)  # type: ignore[arg-type]
                if left <= 0:
                    break
        finally:
            sel.close()

    def _drain(self, sock: socket.socket, host: int) -> None:
        while True:
            try:
                data = sock.recv(256)
            except BlockingIOError:
                return
            except OSError:
                return
            if len(data) != PROBE_LEN or not data.startswith(MAGIC):
                continue
            seq, h = _BODY.unpack_from(data, len(MAGIC))
            item = self._inflight.get(seq)
            if item is None or h != host or item[0] != host:
                continue
            del self._inflight[seq]
            self.probes_back += 1
            self.localiser.back(*item)

    def run(self, rounds: int = 3) -> SelfProbeResult:
        """Run ``rounds`` rounds and return what was localised."""
        if not isinstance(rounds, int) or isinstance(rounds, bool) or not 1 <= rounds <= 1000:
            raise ValueError(f"rounds: must be an int in 1..1000, got {rounds!r}")
        with self:
            for _ in range(rounds):
                self.run_round()
        return self.result()

    def result(self) -> SelfProbeResult:
        """Counters and the localiser's report so far."""
        return SelfProbeResult(
            self.localiser.rounds,
            self.probes_sent,
            self.probes_back,
            self.send_errors,
            self.localiser.report(),
        )


def format_result(res: SelfProbeResult, lab: Lab) -> str:
    """``openmrc lab localise``'s text: the counts, then one line per element."""
    spec = lab.topology.spec
    lines = [
        f"lab {lab.name}: {res.rounds} rounds of self-probes from {spec.hosts} hosts in "
        f"{spec.planes} planes: {res.probes_sent} sent, {res.probes_back} back"
        + (f", {res.send_errors} could not be sent (no route)" if res.send_errors else "")
    ]
    active = res.active()
    if not active:
        lines.append("nothing localised: every element answers")
    for r in active:
        lines.append(
            f"localised {r['kind']} {r['element']} (plane {r['plane']}) "
            f"at {r['time_ps'] / 1e12:.2f} s"
        )
    for r in res.localised:
        if r["cleared_ps"] is not None:
            lines.append(
                f"cleared {r['kind']} {r['element']} (plane {r['plane']}): failed "
                f"{r['time_ps'] / 1e12:.2f} s - {r['cleared_ps'] / 1e12:.2f} s"
            )
    return "\n".join(lines)


def deny_lossy_planes(lab: Lab, res: SelfProbeResult) -> list[dict[str, Any]]:
    """For each lossy NIC-T0 link still localised, deny its plane at its host's controller.

    MRC itself cannot tell whether loss on a plane is at its own end or the
    far end (paper, section 4): the self-probes can, and the host's
    controller (:mod:`openmrc.net.ctl`, EV profile 0) takes the plane out of
    every QP of that host.  Returns one row per attempt (``ok`` False with the
    message when no endpoint runs on the host or the controller refused).
    """
    from openmrc.net.ctl import CtlError, ctl_request

    out: list[dict[str, Any]] = []
    topo = lab.topology
    for r in res.active():
        if r["kind"] != "lossy_nic_t0_link":
            continue
        host = topo.link(r["element"]).a
        row: dict[str, Any] = {"host": host, "plane": r["plane"], "element": r["element"]}
        try:
            reply = ctl_request(lab.name, host, {"op": "deny_plane", "plane": r["plane"]})
        except CtlError as exc:
            row.update(ok=False, message=str(exc))
        else:
            ok = reply.get("op") == "deny_plane"
            row.update(ok=ok, message="" if ok else str(reply.get("message")))
        out.append(row)
    return out
