"""A full-duplex link: two :class:`~openmrc.sim.port.EgressPort` s and the link's state.

A link is *up* when it is administratively up (no link fault, see
:meth:`Link.set_admin`) and neither end switch is down (:meth:`Link.hold`).
State changes apply to both directions at once; impairments (silent, random
loss) can be set per direction.  Listeners registered with :meth:`Link.watch`
hear about up/down changes (a NIC learning that its port lost carrier); silent
failures and losses are, by definition, not announced.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from openmrc.sim.engine import Simulator
    from openmrc.sim.port import EgressPort
    from openmrc.topology import LinkInfo

#: ``listener(link, up, now)``.
LinkListener = Callable[["Link", bool, int], None]


class Link:
    """One link of the topology; ``up_port`` carries a -> b (upwards), ``down_port`` b -> a."""

    __slots__ = ("_holds", "admin_up", "down_port", "info", "listeners", "name", "sim", "up_port")

    def __init__(
        self, sim: Simulator, info: LinkInfo, up_port: EgressPort, down_port: EgressPort
    ) -> None:
        self.sim = sim
        self.info = info
        self.name = info.name
        self.up_port = up_port
        self.down_port = down_port
        up_port.link = self
        down_port.link = self
        self.admin_up = True
        self._holds = 0
        #: who hears of up/down changes (a tuple: most links have none, and the
        #: empty tuple costs nothing per link)
        self.listeners: tuple[LinkListener, ...] = ()

    @property
    def up(self) -> bool:
        """Whether the link carries packets (admin up and no end switch down)."""
        return self.admin_up and self._holds == 0

    @property
    def ports(self) -> tuple[EgressPort, EgressPort]:
        """Both directions: (a -> b, b -> a)."""
        return self.up_port, self.down_port

    def watch(self, listener: LinkListener) -> None:
        """Call ``listener(link, up, now)`` whenever the link goes up or down."""
        self.listeners = (*self.listeners, listener)

    def set_admin(self, up: bool) -> None:
        """Apply (``up=False``) or clear a link fault at ``sim.now``."""
        self.admin_up = bool(up)
        self._refresh()

    def hold(self, down: bool) -> None:
        """An end switch went down (``True``) or came back (``False``)."""
        self._holds += 1 if down else -1
        if self._holds < 0:
            raise RuntimeError(f"link {self.name}: released more holds than taken")
        self._refresh()

    def set_silent(self, silent: bool, direction: str = "both") -> None:
        """Make the link (or one direction: ``"up"``/``"down"``) drop everything unannounced."""
        for port in self._dir(direction):
            port.set_impairment(silent=silent)

    def set_loss(self, probability: float, direction: str = "both") -> None:
        """Lose each packet independently with ``probability`` (both or one direction)."""
        for port in self._dir(direction):
            port.set_impairment(loss=probability)

    def _dir(self, direction: str) -> tuple[EgressPort, ...]:
        if direction == "both":
            return (self.up_port, self.down_port)
        if direction == "up":
            return (self.up_port,)
        if direction == "down":
            return (self.down_port,)
        raise ValueError(f"link {self.name}: direction must be 'both', 'up' or 'down'")

    def _refresh(self) -> None:
        up = self.up
        if up == self.up_port.up:
            return
        self.up_port.set_up(up)
        self.down_port.set_up(up)
        now = self.sim.now
        for listener in self.listeners:
            listener(self, up, now)

    def __repr__(self) -> str:
        return f"Link({self.name}, up={self.up})"
