"""Faults applied to a running fabric at chosen simulated times, each logged in metrics.

Every method takes ``at_ps``: ``None`` applies the fault immediately (at
``sim.now``), a time schedules it.  Links are given as :class:`Link` objects or
by name (``"h3-p0t0x0"``, ``"p0t0x1-p0t1x2"``); switches by name.

* link down / up (both directions; queued and in-flight packets are lost and
  counted in the ports' ``drops_down``; link listeners are told);
* link flap: down for ``(1 - duty) * period``, then up for ``duty * period``,
  repeated from ``start_ps`` until ``until_ps`` (ends up); or ``count`` times
  down for ``down_ps`` every ``period_ps`` (:meth:`FaultInjector.flap_schedule`);
* silent link (packets vanish, nobody is told, counted as ``lost_silent``);
* random loss on a link (``lost``);
* switch down: every link of the switch goes down, the switch discards;
* switch blackhole: links stay up, the switch silently discards (``discarded``);
* switch up: undoes either;
* NIC port down / up: the host's link in one plane;
* EV loss: a sending host drops each data packet carrying one of the given
  EVs with a probability (the per-EV error injection of the paper's 5.2.4,
  a NIC debug feature): counted in ``ev_dropped``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from openmrc.sim.link import Link

if TYPE_CHECKING:
    from openmrc.sim.fabric import Fabric
    from openmrc.sim.switch import Switch


class FaultInjector:
    """Schedules and applies faults on one :class:`~openmrc.sim.fabric.Fabric`."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        self.sim = fabric.sim
        self.metrics = fabric.metrics
        #: EV -> drop probability for data packets sent on it (:meth:`ev_loss`);
        #: changed in place, never replaced (each SimHost holds this dict).
        self.ev_drop: dict[int, float] = {}
        #: data packets dropped by :meth:`ev_loss`.
        self.ev_dropped = 0
        #: each sending host's generator for per-EV loss (made on its first draw):
        #: one per host, so that the draws do not interleave across hosts in an order
        #: a partitioned run could not reproduce
        self._ev_rngs: dict[int, random.Random] = {}

    def _at(self, at_ps: int | None, fn: Callable[..., None], *args: Any) -> None:
        if at_ps is None:
            fn(*args)
        else:
            self.sim.schedule(at_ps, fn, *args)

    def _link(self, link: Link | str) -> Link | str:
        """The link called ``link``; in a fabric made in part (a rank of a partitioned
        run, :class:`~openmrc.sim.fabric.FabricPart`) the name of a link not made here,
        whose fault is recorded and acts on nothing here (``KeyError``: no such link)."""
        if isinstance(link, Link):
            return link
        got = self.fabric.links.get(link)
        if got is not None:
            return got
        if self.fabric.part is None:
            raise KeyError(link)
        return self.fabric.topology.link(link).name

    def _switch(self, name: str) -> Switch:
        return self.fabric.switches[name]

    # ----- links -----------------------------------------------------------------
    def link_down(self, link: Link | str, at_ps: int | None = None) -> None:
        """Take a link down (both directions)."""
        self._at(at_ps, self._set_link, self._link(link), False, "link_down")

    def link_up(self, link: Link | str, at_ps: int | None = None) -> None:
        """Restore a link taken down by a link fault."""
        self._at(at_ps, self._set_link, self._link(link), True, "link_up")

    def _set_link(self, link: Link | str, up: bool, kind: str) -> None:
        if isinstance(link, Link):
            link.set_admin(up)
        self.metrics.record_fault(kind, _name(link))

    def flap(
        self,
        link: Link | str,
        start_ps: int,
        period_ps: int,
        duty: float,
        until_ps: int,
    ) -> list[int]:
        """Flap a link: each period starts down for ``(1 - duty)`` of it, then up.

        Returns the toggle times (down at even indices, up at odd); the last
        toggle is always "up", at or before ``until_ps``.
        """
        if period_ps <= 0:
            raise ValueError(f"flap: period must be positive, got {period_ps}")
        if not 0.0 < duty < 1.0:
            raise ValueError(
                f"flap: duty (fraction of the period up) must be in (0, 1), got {duty}"
            )
        if until_ps < start_ps:
            raise ValueError(f"flap: until ({until_ps}) is before start ({start_ps})")
        lk = self._link(link)
        down_ps = round(period_ps * (1.0 - duty))
        times: list[int] = []
        t = start_ps
        while t + down_ps <= until_ps:
            self.sim.schedule(t, self._set_link, lk, False, "flap_down")
            self.sim.schedule(t + down_ps, self._set_link, lk, True, "flap_up")
            times += [t, t + down_ps]
            t += period_ps
        return times

    def flap_schedule(
        self, link: Link | str, start_ps: int, period_ps: int, down_ps: int, count: int
    ) -> list[int]:
        """Flap a link ``count`` times: down at ``start_ps + k * period_ps``, up ``down_ps`` later.

        Returns the toggle times (down at even indices, up at odd).
        """
        if period_ps <= 0 or not 0 < down_ps < period_ps:
            raise ValueError(
                f"flap: needs period > 0 and 0 < down time < period, got {period_ps}, {down_ps}"
            )
        if not isinstance(count, int) or count < 1:
            raise ValueError(f"flap: count must be a positive integer, got {count!r}")
        lk = self._link(link)
        times: list[int] = []
        for k in range(count):
            t = start_ps + k * period_ps
            self.sim.schedule(t, self._set_link, lk, False, "flap_down")
            self.sim.schedule(t + down_ps, self._set_link, lk, True, "flap_up")
            times += [t, t + down_ps]
        return times

    def link_silent(
        self,
        link: Link | str,
        silent: bool = True,
        at_ps: int | None = None,
        direction: str = "both",
    ) -> None:
        """Make a link silently drop everything (or stop doing so)."""
        self._at(at_ps, self._set_silent, self._link(link), silent, direction)

    def _set_silent(self, link: Link | str, silent: bool, direction: str) -> None:
        if isinstance(link, Link):
            link.set_silent(silent, direction)
        kind = "link_silent" if silent else "link_silent_clear"
        self.metrics.record_fault(kind, _name(link), direction=direction)

    def link_loss(
        self,
        link: Link | str,
        probability: float,
        at_ps: int | None = None,
        direction: str = "both",
    ) -> None:
        """Lose each packet on a link independently with ``probability`` (0 clears)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"link_loss: probability must be in [0, 1], got {probability}")
        self._at(at_ps, self._set_loss, self._link(link), probability, direction)

    def _set_loss(self, link: Link | str, probability: float, direction: str) -> None:
        if isinstance(link, Link):
            link.set_loss(probability, direction)
        self.metrics.record_fault(
            "link_loss", _name(link), probability=probability, direction=direction
        )

    # ----- switches --------------------------------------------------------------
    def switch_down(self, name: str, at_ps: int | None = None) -> None:
        """Power a switch off: all its links go down, it discards anything left."""
        self._at(at_ps, self._set_switch, self._switch(name), "down")

    def switch_blackhole(self, name: str, at_ps: int | None = None) -> None:
        """Keep a switch's links up but make it silently discard every packet."""
        self._at(at_ps, self._set_switch, self._switch(name), "blackhole")

    def switch_up(self, name: str, at_ps: int | None = None) -> None:
        """Bring a switch back to normal forwarding."""
        self._at(at_ps, self._set_switch, self._switch(name), "up")

    def _set_switch(self, sw: Switch, state: str) -> None:
        old = sw.state
        if old == state:
            return
        links = {port.link for port in sw.ports if port is not None}
        if old == "down":
            for link in links:
                link.hold(False)
        if state == "down":
            for link in links:
                link.hold(True)
        sw.state = state
        sw.forwarding = state == "up"
        self.metrics.record_fault(f"switch_{state}", sw.name, previous=old)

    # ----- NIC ports -------------------------------------------------------------
    def nic_port_down(self, host: int, plane: int, at_ps: int | None = None) -> None:
        """Take host ``host``'s plane-``plane`` NIC port (its link to the T0) down."""
        self._at(at_ps, self._set_nic, host, plane, False)

    def nic_port_up(self, host: int, plane: int, at_ps: int | None = None) -> None:
        """Bring a NIC port back up."""
        self._at(at_ps, self._set_nic, host, plane, True)

    def _set_nic(self, host: int, plane: int, up: bool) -> None:
        link = self._link(self.fabric.topology.host_link(host, plane).name)
        if isinstance(link, Link):
            link.set_admin(up)
        self.metrics.record_fault(
            "nic_port_up" if up else "nic_port_down", _name(link), host=host, plane=plane
        )

    # ----- per-EV loss --------------------------------------------------------------
    def ev_loss(self, evs: list[int], probability: float, at_ps: int | None = None) -> None:
        """Drop data packets carrying any of ``evs`` with ``probability`` (0 ends it)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability: must be in 0..1, got {probability!r}")
        self._at(at_ps, self._set_ev_loss, list(evs), probability)

    def _set_ev_loss(self, evs: list[int], probability: float) -> None:
        for ev in evs:
            if probability > 0:
                self.ev_drop[ev] = probability
            else:
                self.ev_drop.pop(ev, None)
        self.metrics.record_fault(
            "ev_loss", ",".join(f"{ev:#x}" for ev in evs), probability=probability
        )

    def drops(self, ev: int, host: int) -> bool:
        """Whether a data packet on ``ev`` is dropped now (called by the sending ``host``)."""
        p = self.ev_drop.get(ev)
        if p is None:
            return False
        rng = self._ev_rngs.get(host)
        if rng is None:
            rng = self._ev_rngs[host] = random.Random(f"ev-loss:{host}")
        if rng.random() >= p:
            return False
        self.ev_dropped += 1
        return True


def _name(link: Link | str) -> str:
    """A link's name (a fault on a link not made here holds only its name)."""
    return link if isinstance(link, str) else link.name
