"""Type stub of the native event kernel (src/openmrc/sim/_kernel.c).

The classes mirror :class:`openmrc.sim.engine.PySimulator`,
:class:`openmrc.sim.port.PyEgressPort`, :class:`openmrc.sim.switch.PySwitch`
and :class:`openmrc.sim.switch.PyHostEnd`; see those for what each member does.
"""

import random
from collections.abc import Callable, Sequence
from typing import Any

Event = tuple[int, int, Any, tuple[Any, ...]]

class Simulator:
    now: int
    rng: random.Random
    events_run: int
    @property
    def cancelled(self) -> set[int]: ...
    def __init__(self, seed: int = 1) -> None: ...
    def schedule(self, at_ps: int, callback: Callable[..., Any], *args: Any) -> Event: ...
    def after(self, delay_ps: int, callback: Callable[..., Any], *args: Any) -> Event: ...
    def post(self, at_ps: int, callback: Callable[[Any], Any], arg: Any) -> None: ...
    def push(self, at_ps: int, callback: Callable[..., Any], args: tuple[Any, ...]) -> Event: ...
    def cancel(self, event: Event) -> None: ...
    def stop(self) -> None: ...
    def pending(self) -> int: ...
    def pending_callbacks(self) -> list[Event]: ...
    def run(self, until_ps: int | None = None) -> int: ...

class EgressPort:
    sim: Simulator
    name: str
    peer: str
    link: Any
    rx: Callable[[Any, Any, int], None]
    rate_bps: int
    delay: int
    framing: int
    data_limit: int
    prio_limit: int
    kmin: int
    kmax: int
    trim: bool
    lasthop: bool
    ecn: bool
    data_bytes: int
    prio_bytes: int
    busy_until: int
    epoch: int
    tx_pkts: int
    tx_bytes: int
    trims: int
    ecn_marks: int
    drops_full: int
    drops_header: int
    drops_down: int
    lost: int
    lost_silent: int
    max_queue_bytes: int
    @property
    def txev(self) -> tuple[int, int] | None: ...
    @property
    def data(self) -> list[Any]: ...
    @property
    def prio(self) -> list[Any]: ...
    @property
    def up(self) -> bool: ...
    @property
    def silent(self) -> bool: ...
    @property
    def impaired(self) -> bool: ...
    @property
    def loss(self) -> float: ...
    def __init__(
        self,
        sim: Simulator,
        name: str,
        rate_bps: int,
        delay_ps: int,
        rx: Callable[[Any, Any, int], None],
        *,
        data_limit: int,
        prio_limit: int,
        trim: bool = True,
        lasthop: bool = False,
        ecn: bool = False,
        kmin: int = 0,
        kmax: int = 0,
        framing: int = 38,
        peer: str = "",
    ) -> None: ...
    def enqueue(self, pkt: Any) -> None: ...
    def send(self, pkt: Any, now: int | None = None) -> int: ...
    def drain_time(self) -> int: ...
    def serialization_ps(self, nbytes: int) -> int: ...
    def wire_bytes(self, pkt: Any) -> int: ...
    def queued_bytes(self) -> int: ...
    def lost_in_flight(self, pkt: Any) -> None: ...
    def set_up(self, up: bool) -> None: ...
    def set_impairment(self, silent: bool | None = None, loss: float | None = None) -> None: ...

class Switch:
    info: Any
    name: str
    tier: int
    plane: int
    index: int
    usid: int
    ports: list[Any]
    state: str
    match: int
    forwarding: bool
    forwarded: int
    bad_route: int
    discarded: int
    @property
    def table(self) -> dict[int, Any]: ...
    def __init__(self, info: Any, nports: int) -> None: ...
    def install(self, table: dict[int, int]) -> None: ...
    def receive(self, pkt: Any, via: Any, epoch: int) -> None: ...

class HostEnd:
    sim: Simulator
    host: int
    plane: int
    on_receive: Callable[[Any, int, int], None] | None
    received: int
    undelivered: int
    def __init__(self, sim: Simulator, host: int, plane: int) -> None: ...
    def receive(self, pkt: Any, via: Any, epoch: int) -> None: ...

def port_totals(ports: Sequence[Any]) -> tuple[tuple[int, ...], list[int]]: ...
def busy_mask(ports: Sequence[Any], now: int) -> int: ...
def soonest_drain(ports: Sequence[Any], now: int) -> int | None: ...
