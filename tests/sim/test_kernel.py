"""The native event kernel (openmrc.sim._kernel) against the pure-Python classes.

Whole scenarios: the same results, byte for byte, with the kernel and with
``OPENMRC_PURE_PYTHON=1`` (each run in a fresh interpreter, as the switch is
read at import).  Unit level: the native Simulator / EgressPort / Switch /
HostEnd next to PySimulator / PyEgressPort / PySwitch / PyHostEnd on the same
inputs, edge cases included.  The native half is skipped when the extension
was not built.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from openmrc.sim import _native
from openmrc.sim.engine import PySimulator
from openmrc.sim.port import (
    PortReport,
    PyEgressPort,
    py_busy_mask,
    py_post_drain,
    py_send_post,
    py_soonest_drain,
)
from openmrc.sim.switch import PyHostEnd, PySwitch, SwitchReport
from openmrc.topology import BLOCK, BLOCK_PREFIX, SwitchInfo
from openmrc.wire.packets import DataPacket, Opcode, SackPacket
from tests.tools import sigint_default

#: Why the extension did not import (for the failure message when it is required).
_KERNEL_ERROR = ""


def _find_kernel() -> ModuleType | None:
    """The extension, also when built but switched off by OPENMRC_PURE_PYTHON=1."""
    global _KERNEL_ERROR
    if _native.kernel is not None:
        return _native.kernel
    try:
        return importlib.import_module("openmrc.sim._kernel")
    except ImportError as exc:
        _KERNEL_ERROR = f"{type(exc).__name__}: {exc}"
        return None


kernel = _find_kernel()

#: ``OPENMRC_REQUIRE_NATIVE=1`` (CI): the native tests fail instead of skipping when
#: the extension is missing (so a build that silently fell back to pure Python shows).
REQUIRE_NATIVE = os.environ.get("OPENMRC_REQUIRE_NATIVE") == "1"


@pytest.fixture
def _kernel_required() -> None:
    if kernel is None:
        pytest.fail(
            f"OPENMRC_REQUIRE_NATIVE=1 but openmrc.sim._kernel does not import ({_KERNEL_ERROR})"
        )


native = (
    pytest.mark.usefixtures("_kernel_required")
    if REQUIRE_NATIVE
    else pytest.mark.skipif(kernel is None, reason="openmrc.sim._kernel is not built")
)


def test_kernel_present_when_required() -> None:
    """With OPENMRC_REQUIRE_NATIVE=1 a missing extension is a failure, not a skip."""
    if not REQUIRE_NATIVE:
        pytest.skip("OPENMRC_REQUIRE_NATIVE is not 1")
    assert kernel is not None, f"openmrc.sim._kernel does not import ({_KERNEL_ERROR})"


def _function_disassembly(library: str, name: str) -> str | None:
    """The x86-64 instructions of function ``name`` in a shared library (objdump), or
    None where objdump or the function's symbol is missing."""
    objdump = shutil.which("objdump")
    if objdump is None:
        return None
    out = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", library], capture_output=True, text=True
    ).stdout
    head = out.find(f"<{name}>:\n")
    if head < 0:
        return None
    end = out.find("\n\n", head)
    return out[head : end if end >= 0 else len(out)]


def sim_run_disassembly() -> str:
    """The native kernel's ``Sim_run`` as x86-64 instructions; skips the test where
    they cannot be read (another machine, no objdump, no symbol)."""
    assert kernel is not None
    if os.uname().machine not in ("x86_64", "AMD64"):
        pytest.skip("the check reads x86-64 instructions")
    body = _function_disassembly(str(kernel.__file__), "Sim_run")
    if body is None:
        pytest.skip("no objdump, or Sim_run has no symbol in this build")
    return body


@native
def test_event_loop_keeps_its_prefetches() -> None:
    """The run loop asks for the next events' lines ahead (the kernel's "prefetching
    the next events").  A compiler may drop a call to a function whose only effect
    is prefetches as dead code; the helpers are forced inline so that the
    prefetches stay in ``Sim_run`` (x86-64 with objdump; skipped elsewhere)."""
    body = sim_run_disassembly()
    assert body.count("prefetch") >= 4, "Sim_run lost its prefetches"


# --------------------------------------------------------------------------------------
# whole scenarios, native against pure Python

#: MRC: an incast (trimming at the last hop, ECN marks), a T0-T1 link going down
#: with packets on it, random loss on another link, two planes.
MRC_SCENARIO = """
seed = 3
[fabric]
planes = 2
t0s = 2
hosts_per_t0 = 4
t1s = 2
[switches]
trimming = true
[workload]
kind = "incast"
senders = [1, 2, 4, 5, 6]
target = 0
size = "192KiB"
[[faults]]
at_us = 4
kind = "link_down"
target = "p1t0x0-p1t1x1"
[[faults]]
at_us = 2
kind = "link_loss"
target = "p0t0x1-p0t1x0"
probability = 0.05
"""

#: RoCE with PFC and DCQCN on one plane: the baseline fabric's Python ports on
#: the (native) simulator.
ROCE_SCENARIO = """
seed = 2
[fabric]
planes = 1
t0s = 2
hosts_per_t0 = 4
t1s = 2
[transport]
name = "roce"
[workload]
kind = "incast"
senders = [1, 2, 4, 5]
target = 0
size = "128KiB"
"""

_RUN = textwrap.dedent(
    """
    import json, sys
    from openmrc.sim import _native
    from openmrc.pipeline.run import load_scenario
    scenario, _ = load_scenario(sys.argv[1], [])
    exp = scenario.build()
    doc = exp.run().as_dict()
    doc.pop("wall_seconds")
    print(json.dumps({"native": _native.NATIVE, "result": doc}, sort_keys=True))
    """
)


def _run(path: Path, pure: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env["OPENMRC_PURE_PYTHON"] = "1" if pure else "0"
    out = subprocess.run(
        [sys.executable, "-c", _RUN, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return doc


@native
@pytest.mark.parametrize("text", [MRC_SCENARIO, ROCE_SCENARIO], ids=["mrc", "roce"])
def test_native_and_pure_results_identical(tmp_path: Path, text: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    fast = _run(path, pure=False)
    slow = _run(path, pure=True)
    assert fast["native"] is True and slow["native"] is False
    result = fast["result"]
    assert result["all_ok"]
    assert json.dumps(result, sort_keys=True) == json.dumps(slow["result"], sort_keys=True)


def test_mrc_scenario_exercises_trims_ecn_faults_and_loss(tmp_path: Path) -> None:
    """The parity scenario above does hit every mechanism it is meant to compare."""
    path = tmp_path / "s.toml"
    path.write_text(MRC_SCENARIO)
    doc = _run(path, pure=False)["result"]
    totals = doc["fabric"]["totals"]
    assert totals["trims"] > 0 and totals["ecn_marks"] > 0
    assert totals["lost"] > 0 and totals["drops_down"] > 0


# --------------------------------------------------------------------------------------
# unit level: both implementations side by side


def _impls() -> list[tuple[str, Any, Any, Any, Any]]:
    out: list[tuple[str, Any, Any, Any, Any]] = [
        ("py", PySimulator, PyEgressPort, PySwitch, PyHostEnd)
    ]
    if kernel is not None:
        # what engine.py / port.py / switch.py select when the kernel is on (built
        # here too, so that the native half runs under OPENMRC_PURE_PYTHON=1 as well)
        class Port(kernel.EgressPort, PortReport):  # type: ignore[name-defined,misc]
            __slots__ = ()

        class Switch(kernel.Switch, SwitchReport):  # type: ignore[name-defined,misc]
            __slots__ = ()

        out.append(("native", kernel.Simulator, Port, Switch, kernel.HostEnd))
    return out


IMPLS = pytest.mark.parametrize("impl", _impls(), ids=lambda i: i[0])


def _route(*usids: int) -> int:
    """An outer address: block, then the uSIDs in order (active first)."""
    addr = BLOCK
    shift = 80
    for u in usids:
        addr |= u << shift
        shift -= 16
    return addr


def _data(psn: int, length: int = 1000, routed: bool = False) -> DataPacket:
    pkt = DataPacket(5, 0, Opcode.WRITE_ONLY, psn, 0, 0, 0, length)
    if routed:
        pkt.route = _route(0xE001, 0xE002)
    return pkt


def _nic_ports(port_cls: Any, sim: Any, n: int) -> list[Any]:
    """A NIC's ``n`` ports h0:0 ... of class ``port_cls`` on ``sim`` (100 Gb/s, 1 ns)."""
    return [
        port_cls(sim, f"h0:{i}", 10**11, 1_000, _Sink(), data_limit=10**5, prio_limit=10**4)
        for i in range(n)
    ]


class _Sink:
    """A host receiver recording (what, plane, now)."""

    def __init__(self) -> None:
        self.got: list[tuple[Any, ...]] = []

    def __call__(self, pkt: Any, plane: int, now: int) -> None:
        flags = tuple(getattr(pkt, f, None) for f in ("trimmed", "trimmed_lasthop", "ecn"))
        self.got.append((getattr(pkt, "psn", None), plane, now, flags, pkt.route))


def _line(
    impl: tuple[str, Any, Any, Any, Any], out_rate: int = 100_000_000_000, **port_kw: Any
) -> tuple[Any, ...]:
    """host -> switch (uSID 0xE001) -> host end: a sim, both ports, the switch, the sink."""
    _, sim_cls, port_cls, switch_cls, end_cls = impl
    sim = sim_cls(7)
    sw = switch_cls(SwitchInfo("t0", 0, 0, 0, 0xE001), 2)
    end = end_cls(sim, 1, 0)
    sink = _Sink()
    end.on_receive = sink
    kw: dict[str, Any] = {"data_limit": 10_000, "prio_limit": 4_000}
    kw.update(port_kw)
    inp = port_cls(
        sim,
        "h0->t0",
        100_000_000_000,
        1_000,
        sw.receive,
        trim=False,
        **(kw | {"data_limit": 10**6}),
    )
    out = port_cls(sim, "t0->h1", out_rate, 2_000, end.receive, lasthop=True, **kw)
    sw.ports[1] = out
    sw.install({0xE002: 1})
    return sim, inp, out, sw, end, sink


def _counters(*objs: Any) -> list[dict[str, int]]:
    return [o.counters() for o in objs]


@IMPLS
def test_cancel_stop_until(impl: tuple[str, Any, Any, Any, Any]) -> None:
    sim = impl[1](1)
    out: list[int] = []
    ev = sim.schedule(10, out.append, 1)
    sim.schedule(20, out.append, 2)
    sim.cancel(ev)
    assert len(sim.cancelled) == 1 and sim.pending() == 2
    assert [e[0] for e in sim.pending_callbacks()] == [20]
    sim.schedule(25, sim.stop)
    sim.schedule(25, out.append, 25)  # same time, after the stop: waits
    sim.schedule(40, out.append, 40)
    assert sim.run(until_ps=30) == 2  # the 20 and the stop (the cancelled one is not counted)
    assert sim.now == 25 and out == [2]
    assert sim.run(until_ps=30) == 1 and sim.now == 30 and out == [2, 25]
    sim.cancel(ev)  # already skipped: harmless
    assert sim.run() == 1 and out == [2, 25, 40] and not sim.cancelled
    assert sim.events_run == 4
    with pytest.raises(ValueError, match="past"):
        sim.schedule(5, out.append, 0)
    with pytest.raises(ValueError, match="negative"):
        sim.after(-1, out.append, 0)


class _Owner:
    """An object events are bound to: notes which entity each of its calls ran for."""

    def __init__(self, sim: Any, log: list[tuple[str, int]]) -> None:
        self.sim = sim
        self.log = log

    def note(self, tag: str) -> None:
        self.log.append((tag, self.sim.cur))

    def call(self, fn: Any) -> None:
        fn()


@IMPLS
def test_post_target_follows_the_objects_registration(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    # The native kernel answers a post bound to the running entity's own object
    # without its table: that answer must change as soon as the object is
    # registered elsewhere.
    sim = impl[1](1)
    log: list[tuple[str, int]] = []
    a, b = _Owner(sim, log), _Owner(sim, log)
    ea, eb = sim.add_entity([a]), sim.add_entity([b])

    def post(obj: _Owner, tag: str, move: Any = None, to: int = 0) -> Any:
        def go() -> None:
            if move is not None:
                sim.set_entity(move, to)
            sim.post(sim.now + 1, obj.note, tag)

        return go

    sim.post(10, a.call, post(a, "own"))  # a's event posts for a
    sim.post(20, a.call, post(a, "moved", a, eb))
    sim.post(30, b.call, post(a, "moved, from b"))
    sim.post(40, b.call, post(a, "back", a, ea))
    sim.post(50, a.call, post(b, "b joins a", b, ea))
    sim.post(60, a.call, post(a, "a still a's"))
    sim.run()
    assert log == [
        ("own", ea),
        ("moved", eb),
        ("moved, from b", eb),
        ("back", ea),
        ("b joins a", ea),
        ("a still a's", ea),
    ]


@IMPLS
def test_post_target_of_a_new_object_and_a_fresh_simulator(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    # an object freed and another made (often at its address): the target is what
    # the table says for the new one (by address, as id() in PySimulator), else the
    # poster's entity; after __init__ nothing is registered any more
    sim = impl[1](1)
    log: list[tuple[str, int]] = []
    gone, b = _Owner(sim, log), _Owner(sim, log)
    ea, eb = sim.add_entity([gone]), sim.add_entity([b])
    sim.post(1, gone.note, "gone")
    sim.run()
    sim.set_entity(gone, eb)
    del gone
    gc.collect()
    c = _Owner(sim, log)
    held = sim.entity_of(c)
    sim.post(sim.now + 5, c.note, "new")  # (posted between runs: by GLOBAL, 0)
    sim.run()
    assert log == [("gone", ea), ("new", 0 if held is None else held)]
    sim.set_entity(c, 0)
    sim.__init__(1)
    sim.place = lambda callback, args: 1
    sim.post(5, c.note, "afresh")
    sim.run()
    assert log[-1] == ("afresh", 1)


@native
def test_post_target_of_a_native_object_at_a_freed_owners_address() -> None:
    # A registered object is freed and a native switch (its entity kept in the
    # object, not the table) is made at its address and given another entity: a
    # post bound to the switch from the freed object's entity runs for the switch's.
    assert kernel is not None
    log: list[tuple[str, int]] = []

    class Sw(kernel.Switch):  # type: ignore[misc,name-defined]
        __slots__ = ()

        def note(self, tag: str) -> None:
            log.append((tag, sim.cur))

    # a plain object of the switch's size, so that the switch may take its address
    words = (Sw.__basicsize__ - object.__basicsize__) // 8
    plain = type("Plain", (), {"__slots__": tuple(f"f{i}" for i in range(words))})
    assert plain.__basicsize__ == Sw.__basicsize__
    for _ in range(50):
        sim = kernel.Simulator(1)
        o = plain()
        addr = id(o)
        ea, eb = sim.add_entity([o]), sim.add_entity([])
        del o
        sw = Sw.__new__(Sw)
        if id(sw) != addr:
            continue
        sim.set_entity(sw, eb)
        sim.cur = ea  # as if an event of ea ran
        sim.post(5, sw.note, "from ea")
        sim.cur = 0
        sim.run()
        assert log == [("from ea", eb)]
        return
    pytest.skip("the allocator never reused the freed address")


@IMPLS
def test_callback_exception_propagates(impl: tuple[str, Any, Any, Any, Any]) -> None:
    sim = impl[1](1)

    def boom() -> None:
        raise KeyError("boom")

    out: list[int] = []
    sim.schedule(1, boom)
    sim.schedule(2, out.append, 2)
    with pytest.raises(KeyError, match="boom"):
        sim.run()
    assert sim.now == 1 and sim.events_run == 1
    sim.run()
    assert out == [2]


def _trace(impl: tuple[str, Any, Any, Any, Any]) -> tuple[Any, ...]:
    """Packets through the line, with a queue, trims, ECN, loss and a down/up."""
    sim, inp, out, sw, end, sink = _line(
        impl, 30_000_000_000, ecn=True, kmin=1_000, kmax=6_000, data_limit=5_000, prio_limit=300
    )
    out.set_impairment(loss=0.2)
    for i in range(30):
        inp.enqueue(_data(i, routed=True))
    ack = SackPacket(5, 0, 0, 0, 0)
    ack.route = _route(0xE001, 0xE002)
    inp.enqueue(ack)
    sim.run(until_ps=2_000_000)
    out.set_up(False)  # flushes out's queue, loses what is on its wire
    sim.schedule(sim.now + 100_000, out.set_up, True)
    for i in range(40, 44):
        sim.schedule(sim.now + 50_000 * (i - 39), inp.enqueue, _data(i, routed=True))
    sim.run()
    return (
        sink.got,
        _counters(inp, out, sw),
        (end.received, end.undelivered, out.epoch, sim.now, sim.events_run, sim.rng.random()),
    )


@native
def test_native_port_switch_host_trace_matches_python() -> None:
    py, nat = _impls()
    a, b = _trace(py), _trace(nat)
    assert a == b
    got, counters, _ = a
    # the trace does exercise what it compares
    assert counters[1]["lost"] > 0 and counters[1]["drops_down"] > 0
    assert counters[1]["ecn_marks"] > 0 and counters[1]["trims"] > 0
    assert counters[1]["drops_header"] > 0 and got


@IMPLS
def test_bad_routes(impl: tuple[str, Any, Any, Any, Any]) -> None:
    sim, inp, _out, sw, _end, sink = _line(impl)
    routes: list[object] = [
        None,  # not an int: TypeError -> bad route
        "x",
        1.5,
        _route(0xE009, 0xE002),  # not this switch's uSID
        _route(0xE001, 0xE00F),  # this switch, no table entry
        -1,
        1 << 200,
        _route(0xE001, 0xE002),  # good
    ]
    for i, r in enumerate(routes):
        pkt = _data(i)
        pkt.route = r
        sim.schedule(i * 1_000_000, inp.enqueue, pkt)
    sim.run()
    assert sw.counters() == {"forwarded": 1, "bad_route": 7, "discarded": 0}
    assert [g[0] for g in sink.got] == [7]
    # the shift happened: the spent address as switch.py computes it
    pkt = _data(9)
    pkt.route = _route(0xE001, 0xE002, 0xE003)
    sw.receive(pkt, inp, inp.epoch)
    assert pkt.route == _route(0xE002, 0xE003)
    assert sw.match == (BLOCK_PREFIX << 16) | 0xE001


@IMPLS
def test_switch_shift_of_a_shared_route(impl: tuple[str, Any, Any, Any, Any]) -> None:
    """The native switch writes the shifted address into a route int only the packet
    holds; a route int also held elsewhere (a route cache, the caller) keeps its value,
    and both packets leave with the same address."""
    _sim, inp, _out, sw, _end, _sink = _line(impl)
    for usids in ((0xE001, 0xE002, 0xE003), (0xE001, 0xE002, 0xE003, 0xE004, 0xE005)):
        shared = _route(*usids)
        a = _data(0)
        a.route = shared
        sw.receive(a, inp, inp.epoch)
        assert shared == _route(*usids)  # unchanged: `shared` refers to it
        b = _data(1)
        b.route = _route(*usids)  # b's alone: rewritten in place by the native switch
        sw.receive(b, inp, inp.epoch)
        assert a.route == b.route == _route(*usids[1:])
        assert a.route is not shared
    assert sw.forwarded == 4


@IMPLS
def test_forwarding_off_and_stale_epoch(impl: tuple[str, Any, Any, Any, Any]) -> None:
    _sim, inp, out, sw, end, sink = _line(impl)
    pkt = _data(0)
    pkt.route = _route(0xE001, 0xE002)
    sw.forwarding = False
    sw.receive(pkt, inp, inp.epoch)
    assert sw.discarded == 1
    sw.forwarding = True
    sw.receive(pkt, inp, inp.epoch + 1)  # sent before a down: lost in flight
    assert inp.drops_down == 1 and sw.forwarded == 0
    end.receive(_data(1), out, out.epoch - 1)
    assert out.drops_down == 1 and end.received == 0
    end.on_receive = None
    end.receive(_data(2), out, out.epoch)
    assert end.undelivered == 1 and not sink.got


@IMPLS
def test_down_port_flushes_and_counts(impl: tuple[str, Any, Any, Any, Any]) -> None:
    sim, inp, _out, _sw, _end, sink = _line(impl)
    for i in range(5):
        inp.enqueue(_data(i, routed=True))
    assert inp.txev is not None and len(inp.data) == 4
    queued = inp.queued_bytes()
    assert queued == 4 * inp.wire_bytes(_data(0))
    assert inp.drain_time() == inp.busy_until + inp.serialization_ps(queued)
    inp.set_up(False)
    assert inp.txev is None and not inp.data and inp.queued_bytes() == 0
    assert inp.drops_down == 4 and inp.epoch == 1 and len(sim.cancelled) == 1
    inp.enqueue(_data(9))  # down: dropped
    assert inp.drops_down == 5
    sim.run()
    assert not sink.got and inp.drops_down == 6  # the one on the wire, lost in flight
    assert not sim.cancelled
    inp.set_up(True)
    assert inp.up and inp.epoch == 1


@native
def test_native_types_reject_bad_input() -> None:
    assert kernel is not None
    sim = kernel.Simulator(1)
    with pytest.raises(ValueError, match="rate must be positive"):
        kernel.EgressPort(sim, "p", 0, 1, print, data_limit=1, prio_limit=1)
    with pytest.raises(ValueError, match="delay must not be negative"):
        kernel.EgressPort(sim, "p", 10, -1, print, data_limit=1, prio_limit=1)
    with pytest.raises(TypeError, match="native Simulator"):
        kernel.EgressPort(PySimulator(1), "p", 10, 1, print, data_limit=1, prio_limit=1)
    port = kernel.EgressPort(sim, "p", 10, 1, print, data_limit=1, prio_limit=1)
    with pytest.raises(ValueError, match="loss probability"):
        port.set_impairment(loss=1.5)
    with pytest.raises(TypeError):
        sim.schedule("soon", print)
    with pytest.raises(TypeError):
        sim.cancel(3)
    sw = kernel.Switch(SwitchInfo("t", 0, 0, 0, 0xE001), 1)
    with pytest.raises(ValueError, match="not wired"):
        sw.install({0xE002: 0})
    with pytest.raises(IndexError):
        sw.install({0xE002: 5})
    with pytest.raises(TypeError):
        sw.receive(_data(0))
    # objects never initialised refuse politely
    bare = kernel.EgressPort.__new__(kernel.EgressPort)
    for call in (lambda: bare.serialization_ps(10), lambda: bare.enqueue(_data(0))):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()
    with pytest.raises(RuntimeError, match="not initialised"):
        kernel.Switch.__new__(kernel.Switch).receive(_data(0), port, 0)
    # a packet without a size: the error comes out of run(), nothing crashes
    sim.schedule(0, port.enqueue, object())
    with pytest.raises(AttributeError):
        sim.run()


@native
def test_selected_classes_follow_the_switch() -> None:
    from openmrc.sim import engine, port, switch

    if _native.NATIVE:
        assert issubclass(engine.Simulator, kernel.Simulator)  # type: ignore[union-attr]
        assert issubclass(port.EgressPort, kernel.EgressPort)  # type: ignore[union-attr]
        assert issubclass(switch.Switch, kernel.Switch)  # type: ignore[union-attr]
        assert issubclass(switch.HostEnd, kernel.HostEnd)  # type: ignore[union-attr]
    else:
        assert engine.Simulator is PySimulator and port.EgressPort is PyEgressPort
        assert switch.Switch is PySwitch and switch.HostEnd is PyHostEnd


_ROUTES = st.one_of(
    st.integers(min_value=-(1 << 130), max_value=1 << 130),
    st.integers(min_value=0, max_value=(1 << 96) - 1).map(lambda low: BLOCK | low),
    st.lists(st.sampled_from([0xE001, 0xE002, 0xE003, 0]), min_size=1, max_size=6).map(
        lambda us: _route(*us)
    ),
    st.sampled_from([None, "r", 1.0, True, b"x"]),
)


@native
@settings(max_examples=300, deadline=None)
@given(routes=st.lists(_ROUTES, min_size=1, max_size=8))
def test_native_switch_routes_like_python(routes: list[object]) -> None:
    """Any route object: the same verdicts, counters and spent addresses as switch.py."""
    py, nat = _impls()
    seen = []
    for impl in (py, nat):
        _sim, inp, out, sw, _end, _sink = _line(impl)
        sw.install({0xE002: 1, 0xE003: 1, 0: 1})
        spent = []
        for r in routes:
            pkt = _data(0)
            pkt.route = r
            sw.receive(pkt, inp, inp.epoch)
            spent.append(pkt.route)
        seen.append((sw.counters(), spent, out.tx_pkts, out.queued_bytes()))
    assert seen[0] == seen[1]


@native
def test_native_busy_mask_and_soonest_drain_match_python() -> None:
    """The NIC's view of its ports: native helpers against port.py's, on both port kinds."""
    assert kernel is not None
    py_impl, nat_impl = _impls()
    for impl in (py_impl, nat_impl):
        sim = impl[1](1)
        ports = _nic_ports(impl[2], sim, 5)
        seen = []
        for step in range(4):
            if step == 1:
                ports[1].enqueue(_data(0))  # serializing
                ports[2].enqueue(_data(1))
                ports[2].enqueue(_data(2))  # serializing and queued
            if step == 2:
                ports[3].set_up(False)
                ports[2].set_up(False)
            if step == 3:
                sim.run(until_ps=sim.now + 200_000)
            now = sim.now
            seen.append(
                (
                    py_busy_mask(ports, now),
                    kernel.busy_mask(ports, now),
                    py_soonest_drain(ports, now),
                    kernel.soonest_drain(ports, now),
                )
            )
        for a, b, c, d in seen:
            assert a == b and c == d
        assert [s[0] for s in seen] == [0, 0b110, 0b1110, 0b1100]
        assert seen[0][2] is None and seen[1][2] is not None
    with pytest.raises(TypeError):
        kernel.busy_mask(5, 0)
    with pytest.raises(AttributeError):
        kernel.soonest_drain([object()], 0)


@native
def test_native_post_drain_matches_python() -> None:
    """The NIC's pump armed in one call: the native post_drain against pyport's, on
    both simulators and port kinds, armed before, at and after the soonest drain, no
    port draining, and a simulator subclass whose post is its own."""
    assert kernel is not None
    impls = _impls()
    for sim_impl in impls:
        for port_impl in impls:
            if sim_impl[0] == "py" and port_impl[0] == "native":
                continue  # (a native port needs the native simulator)
            seen = []
            for fn in (py_post_drain, kernel.post_drain):
                sim = sim_impl[1](1)
                ports = _nic_ports(port_impl[2], sim, 3)
                fired: list[tuple[int, int]] = []

                def pump(at: int, sim: Any = sim, fired: list[tuple[int, int]] = fired) -> None:
                    fired.append((at, sim.now))

                got = [fn(sim, ports, 0, -1, pump)]  # nothing queued: None
                ports[1].enqueue(_data(0))
                ports[2].enqueue(_data(1, 3000))
                soonest = py_soonest_drain(ports, 0)
                assert soonest is not None
                for armed in (-1, soonest + 1, soonest, soonest - 1):
                    got.append(fn(sim, ports, 0, armed, pump))
                ports[1].set_up(False)
                got.append(fn(sim, ports, 0, -1, pump))  # the down port's drain left out
                sim.run()
                seen.append((got, fired, sim.events_run))
            assert seen[0] == seen[1]
            got, fired, _ = seen[0]
            assert got[0] is None and got[1] == got[2] == soonest
            later = got[5]
            assert soonest is not None
            assert got[3] is None and got[4] is None and later is not None and later > soonest
            assert fired == [(soonest, soonest), (soonest, soonest), (later, later)]

    class Logged(kernel.Simulator):  # type: ignore[name-defined,misc]
        def __init__(self, seed: int) -> None:
            super().__init__(seed)
            self.log: list[int] = []

        def post(self, at: int, callback: Any, arg: Any) -> None:
            self.log.append(at)
            super().post(at, callback, arg)

    sim = Logged(1)
    port = kernel.EgressPort(sim, "p", 10**11, 1, print, data_limit=10**6, prio_limit=10**5)
    port.enqueue(_data(0))
    t = kernel.post_drain(sim, [port], 0, -1, print)
    assert t is not None and sim.log == [t]
    with pytest.raises(TypeError):
        kernel.post_drain(sim, [port], 0, -1)
    with pytest.raises(AttributeError):
        kernel.post_drain(sim, [object()], 0, -1, print)


@native
def test_native_send_post_matches_python() -> None:
    """A packet enqueued and the pump armed in one call (send_post) against pyport's,
    on both port kinds, and a native port subclass whose enqueue is its own."""
    assert kernel is not None
    impls = _impls()
    for sim_impl, port_impl in ((impls[0], impls[0]), (impls[1], impls[1]), (impls[1], impls[0])):
        seen = []
        for fn in (py_send_post, kernel.send_post):
            sim = sim_impl[1](1)
            ports = _nic_ports(port_impl[2], sim, 2)
            fired: list[int] = []
            first = fn(ports[0], _data(0, 2000), sim, ports, 0, -1, fired.append)
            assert first is not None
            second = fn(ports[1], _data(1, 500), sim, ports, 0, first, fired.append)
            assert second is not None
            got = [first, second, fn(ports[0], _data(2), sim, ports, 0, second, fired.append)]
            sim.run()
            seen.append((got, fired, [p.tx_pkts for p in ports]))
        assert seen[0] == seen[1]
        (first, second, third), fired, sent = seen[0]
        assert first is not None and second is not None and second < first and third is None
        assert fired == [second, first] and sent == [2, 1]

    class Counted(kernel.EgressPort):  # type: ignore[name-defined,misc]
        calls = 0

        def enqueue(self, pkt: Any) -> None:
            Counted.calls += 1
            super().enqueue(pkt)

    sim = kernel.Simulator(1)
    port = Counted(sim, "p", 10**11, 1, print, data_limit=10**6, prio_limit=10**5)
    assert kernel.send_post(port, _data(0), sim, [port], 0, -1, print) is not None
    assert Counted.calls == 1 and port.tx_pkts == 1 and port.busy_until > 0
    with pytest.raises(TypeError):
        kernel.send_post(port, _data(1), sim, [port], 0, -1)


# --------------------------------------------------------------------------------------
# review findings: regression tests (crash reproducers run in a child interpreter, so a
# regression fails the test instead of killing the test run)


_CHILD_PRELUDE = """
import pytest
from openmrc.sim import _kernel as k
from openmrc.topology import BLOCK, SwitchInfo
from openmrc.wire.packets import DataPacket, Opcode

def data(route=None):
    pkt = DataPacket(5, 0, Opcode.WRITE_ONLY, 0, 0, 0, 0, 1000)
    if route is not None:
        pkt.route = route
    return pkt
"""


def _child(code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the prelude + ``code`` in a fresh interpreter with the kernel on; never raises."""
    env = dict(os.environ)
    env["OPENMRC_PURE_PYTHON"] = "0"
    return subprocess.run(
        [sys.executable, "-X", "dev", "-c", _CHILD_PRELUDE + textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _assert_child_ok(code: str) -> None:
    res = _child(code)
    assert res.returncode == 0, f"child died ({res.returncode}):\n{res.stdout}\n{res.stderr}"
    assert res.stdout.strip().endswith("ok"), res.stdout + res.stderr


@native
def test_uninitialised_targets_raise_instead_of_crashing() -> None:
    """Finding 1: a port wired to a HostEnd / Switch made with __new__ only: no segfault."""
    _assert_child_ok(
        """
        sim = k.Simulator(1)
        end = k.HostEnd.__new__(k.HostEnd)
        p = k.EgressPort(sim, "p", 10**11, 1000, end.receive, data_limit=10**6, prio_limit=10**5)
        p.enqueue(data())
        with pytest.raises(RuntimeError, match="HostEnd: not initialised"):
            sim.run()
        sw = k.Switch.__new__(k.Switch)
        sw.forwarding = True
        q = k.EgressPort(sim, "q", 10**11, 1000, sw.receive, data_limit=10**6, prio_limit=10**5)
        q.enqueue(data(BLOCK | (0xE001 << 80)))
        with pytest.raises(RuntimeError, match="Switch: not initialised"):
            sim.run()
        print("ok")
        """
    )


@native
def test_route_whose_del_reinstalls_the_table_does_not_free_the_egress_port() -> None:
    """Finding 2: the generic route path holds the egress port across Python code."""
    _assert_child_ok(
        """
        sim = k.Simulator(1)
        sw = k.Switch(SwitchInfo("t0", 0, 0, 0, 0xE001), 2)
        got = []
        out = k.EgressPort(
            sim, "out", 10**11, 1000, lambda *a: got.append(a), data_limit=10**6, prio_limit=10**5
        )
        sw.ports[1] = out
        sw.install({0xE002: 1})
        sw.ports[1] = None
        del out  # the table is now the only owner of the port

        class Route(int):  # not an exact int: the generic path
            def __del__(self):
                sw.install({})  # drops the old table, and with it the port

        pkt = data(Route(BLOCK | (0xE001 << 80) | (0xE002 << 64)))
        inp = k.EgressPort(sim, "in", 10**11, 1000, sw.receive, data_limit=10**6, prio_limit=10**5)
        inp.enqueue(pkt)
        del pkt
        sim.run()
        assert sw.forwarded == 1 and len(got) == 1, (sw.forwarded, got)
        print("ok")
        """
    )


@native
def test_times_beyond_int64_raise_overflow_not_wrap() -> None:
    """Finding 3: natively times are int64; a sum past it raises instead of wrapping."""
    assert kernel is not None
    sim = kernel.Simulator(1)
    seen: list[int] = []
    sim.schedule(5, lambda: None)
    sim.run()
    with pytest.raises(OverflowError, match="64 bits"):
        sim.after(2**63 - 1, seen.append, 1)
    assert sim.pending() == 0
    sim.after(2**63 - 6, lambda: seen.append(sim.now))  # exactly the largest time: fine
    sim.run()
    assert seen == [2**63 - 1]
    sim = kernel.Simulator(1)
    port = kernel.EgressPort(sim, "p", 1, 1000, print, data_limit=10**6, prio_limit=10**5)
    with pytest.raises(OverflowError, match="64 bits"):
        port.serialization_ps(2**62)
    sim.schedule(2**63 - 10, port.enqueue, _data(0))
    with pytest.raises(OverflowError, match="64 bits"):
        sim.run()
    assert sim.pending() == 0  # no arrival at a wrapped (negative) time


@IMPLS
def test_link_down_from_inside_the_running_tx_event_leaves_no_stale_cancel(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    """Finding 5: set_up(False) while the port's own tx-free event runs cancels nothing."""
    ports: list[Any] = []

    class Rng:
        calls = 0

        def random(self) -> float:
            self.calls += 1
            if self.calls == 2:  # the draw for the packet the tx-free event sends
                ports[0].set_up(False)
            return 0.9

    rng = Rng()

    class Sim(impl[1]):  # type: ignore[misc,valid-type]
        __slots__ = ()

        def rng_for(self, name: str) -> Any:  # the port's own generator: the stub
            return rng

    sim = Sim(1)
    port = impl[2](sim, "p", 10**11, 1000, _Sink(), data_limit=10**6, prio_limit=10**5)
    ports.append(port)
    port.set_impairment(loss=0.5)
    port.enqueue(_data(0))  # straight onto the wire (draw 1)
    port.enqueue(_data(1))  # queued: the tx-free event sends it (draw 2 takes the link down)
    sim.run()
    assert not port.up and port.txev is None
    assert not sim.cancelled and sim.pending() == 0


@native
def test_ctrl_c_interrupts_an_all_native_run() -> None:
    """Finding 9: SIGINT during a run of native events only raises KeyboardInterrupt."""
    code = (
        _CHILD_PRELUDE
        + """
import sys
# a uSID-0 switch routing to a port back into itself: a packet circles forever, every
# event native (arrival at the switch, enqueue, tx-free)
sim = k.Simulator(1)
sw = k.Switch(SwitchInfo("loop", 0, 0, 0, 0), 1)
port = k.EgressPort(sim, "loop", 10**11, 1000, sw.receive, data_limit=10**6, prio_limit=10**5)
sw.ports[0] = port
sw.install({0: 0})
port.enqueue(data(BLOCK))
print("running", flush=True)
try:
    sim.run()
except KeyboardInterrupt:
    print("interrupted", sim.events_run > 0, flush=True)
"""
    )
    env = dict(os.environ)
    env["OPENMRC_PURE_PYTHON"] = "0"
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "running"
        time.sleep(0.5)
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert out.strip() == "interrupted True"


@IMPLS
def test_handle_names_its_own_event_when_a_collection_schedules(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    """Finding 12: a __del__ run by the collector inside schedule() cannot steal its seq."""
    sim = impl[1](1)
    ran: list[object] = []
    kept: list[Any] = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            kept.append(sim.schedule(5, ran.append, "del"))

    handles = []
    threshold = gc.get_threshold()
    try:
        for th in (1, 2, 3):
            gc.set_threshold(th)
            for i in range(1000):
                Cycle()
                # garbage of varying size shifts where the collections fall
                _junk: list[list[int]] = [[] for _ in range(i % 5)]
                handles.append(sim.schedule(5, ran.append, i))
    finally:
        gc.set_threshold(*threshold)
        gc.collect()
    by_seq = {ev[1]: ev[3] for ev in sim.pending_callbacks()}
    assert all(by_seq.get(h[1]) is h[3] for h in handles)
    assert len({h[1] for h in handles + kept}) == len(handles) + len(kept)


_NO_INT128_CHECK = """
import importlib.util, random, sys
spec = importlib.util.spec_from_file_location("openmrc.sim._kernel", sys.argv[1])
k = importlib.util.module_from_spec(spec)
spec.loader.exec_module(k)
sys.modules["openmrc.sim._kernel"] = k
from openmrc.sim import _native
assert _native.kernel is k
from openmrc.sim.engine import PySimulator
from openmrc.sim.port import PyEgressPort
from openmrc.sim.switch import PySwitch
from openmrc.topology import BLOCK, SwitchInfo
from openmrc.wire.packets import DataPacket, Opcode

rnd = random.Random(1)
routes = [0, -1, (1 << 128) - 1, 1 << 128, BLOCK, BLOCK | (0xE001 << 80) | (0xE002 << 64)]
routes += [rnd.getrandbits(rnd.choice([64, 96, 127, 128, 129])) for _ in range(500)]
routes += [BLOCK | (0xE001 << 80) | rnd.getrandbits(80) for _ in range(500)]
seen = []
for sw_cls, port_cls, sim_cls in ((PySwitch, PyEgressPort, PySimulator),
                                  (k.Switch, k.EgressPort, k.Simulator)):
    sim = sim_cls(1)
    sw = sw_cls(SwitchInfo("t0", 0, 0, 0, 0xE001), 2)
    out = port_cls(sim, "o", 10**11, 1000, print, data_limit=10**12, prio_limit=10**12)
    sw.ports[1] = out
    sw.install({0xE002: 1, 0xE003: 1, 0: 1})
    spent = []
    for r in routes:
        pkt = DataPacket(5, 0, Opcode.WRITE_ONLY, 0, 0, 0, 0, 100)
        pkt.route = r
        sw.receive(pkt, out, out.epoch)
        spent.append(pkt.route)
    odd = port_cls(sim, "odd", 999_999_937, 1, print, data_limit=1, prio_limit=1)
    sers = [odd.serialization_ps(n) for n in (0, 1, -7, 1500, 2**30, 2**40, -(2**40))]
    seen.append((sw.forwarded, sw.bad_route, spent, out.tx_pkts, sers))
assert seen[0] == seen[1]
print("ok")
"""


@native
def test_fallbacks_without_int128_match_python(tmp_path: Path) -> None:
    """Finding 7: built without __int128 (as on MSVC / 32-bit), routes and times are exact."""
    import sysconfig

    cc = (sysconfig.get_config_var("CC") or "cc").split()
    src = Path(__file__).parents[2] / "src" / "openmrc" / "sim" / "_kernel.c"
    so = tmp_path / ("_kernel" + str(sysconfig.get_config_var("EXT_SUFFIX")))
    if shutil.which(cc[0]) is None:
        pytest.skip(f"no C compiler ({cc[0]}) here")
    # any use of __int128 left in the source is now a compile error
    include = f"-I{sysconfig.get_paths()['include']}"
    flags = ["-shared", "-fPIC", "-O1", "-DOPENMRC_NO_INT128", "-D__int128=no_int128_here"]
    build = subprocess.run(
        [*cc, *flags, include, str(src), "-o", str(so)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    env = dict(os.environ)
    env["OPENMRC_PURE_PYTHON"] = "0"
    res = subprocess.run(
        [sys.executable, "-c", _NO_INT128_CHECK, str(so)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr


@IMPLS
def test_float_and_huge_times(impl: tuple[str, Any, Any, Any, Any]) -> None:
    """Finding 6: whole-ps floats work natively as in Python; until past int64 sets now."""
    sim = impl[1](1)
    seen: list[int] = []
    sim.schedule(1e3, lambda: seen.append(sim.now))
    sim.after(2e3, lambda: seen.append(sim.now))
    sim.run(until_ps=1.5e6)
    assert seen == [1000, 2000] and sim.now == 1_500_000
    sim.run(until_ps=2**70)
    assert sim.now == 2**70
    with pytest.raises(ValueError, match="past"):
        sim.schedule(5, print)
    sim.now = 10
    sim.run(until_ps=2**64)
    assert sim.now == 2**64
    if impl[0] == "native":  # the native kernel's documented limits
        with pytest.raises(TypeError, match="whole number"):
            sim.schedule(1.5, print)
        with pytest.raises(OverflowError, match="64 bits"):
            impl[1](1).schedule(2**63, print)


@native
def test_busy_mask_and_soonest_drain_take_any_sequence_and_overrides() -> None:
    """Finding 8: more than 64 ports, tuples, and a subclass's drain_time, as in Python."""
    assert kernel is not None
    sim = kernel.Simulator(1)
    ports = [
        kernel.EgressPort(sim, f"p{i}", 10**11, 1, print, data_limit=10**6, prio_limit=10**5)
        for i in range(70)
    ]
    for i in (3, 64, 69):
        ports[i].enqueue(_data(i))
    ports[66].set_up(False)
    want = (1 << 3) | (1 << 64) | (1 << 66) | (1 << 69)
    assert py_busy_mask(ports, 0) == want
    assert kernel.busy_mask(ports, 0) == want and kernel.busy_mask(tuple(ports), 0) == want
    assert kernel.soonest_drain(tuple(ports), 0) == py_soonest_drain(ports, 0)

    class Late(kernel.EgressPort):  # type: ignore[name-defined,misc]
        def drain_time(self) -> int:
            return 10**9

    late = Late(sim, "late", 10**11, 1, print, data_limit=10**6, prio_limit=10**5)
    assert kernel.soonest_drain([late], 0) == py_soonest_drain([late], 0) == 10**9


@IMPLS
def test_init_again_resets_the_simulator_and_a_failed_port_init_changes_nothing(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    """Finding 11: __init__ gives a fresh simulator; a port __init__ that fails writes nothing."""
    sim = impl[1](1)
    sim.schedule(10, print, "never")
    sim.cancel(sim.schedule(20, print, "never"))
    sim.run(until_ps=5)
    sim.__init__(2)  # type: ignore[misc]
    assert (sim.now, sim.pending(), len(sim.cancelled), sim.events_run) == (0, 0, 0, 0)
    assert sim.rng.random() == impl[1](2).rng.random()
    port = impl[2](sim, "p", 10**11, 1, print, data_limit=1000, prio_limit=100)
    if impl[0] == "py":
        return  # (the Python port makes no such promise)
    with pytest.raises(TypeError):
        port.__init__(sim, "q", 10**11, 1, print, data_limit=5, prio_limit=5, kmin="x")
    assert (port.name, port.data_limit, port.prio_limit) == ("p", 1000, 100)


@IMPLS
def test_packet_class_changed_after_use_is_read_anew(impl: tuple[str, Any, Any, Any, Any]) -> None:
    """The native kernel caches how to read ``size`` / ``route`` per packet class; a
    class changed after packets of it went through is read the new way."""
    sim, inp, _out, sw, _end, sink = _line(impl)

    class Odd(DataPacket):
        pass

    def send(psn: int) -> None:
        pkt = Odd(5, 0, Opcode.WRITE_ONLY, psn, 0, 0, 0, 1000)
        pkt.route = _route(0xE001, 0xE002)
        inp.enqueue(pkt)
        sim.run()

    send(0)
    first = inp.tx_bytes
    assert [g[0] for g in sink.got] == [0] and sw.counters()["forwarded"] == 1
    # a setter that ignores writes: interpreted, DataPacket.__init__ assigns size
    # through the property (compiled, it writes its own field and never calls it)
    Odd.size = property(lambda self: 4321, lambda self, v: None)  # type: ignore[assignment]
    routes: list[int] = []
    Odd.route = property(  # type: ignore[assignment]
        lambda self: _route(0xE001, 0xE00F), lambda self, v: routes.append(v)
    )
    send(1)
    framing = first - _data(0).size  # what the port adds to pkt.size per packet
    assert inp.tx_bytes - first == 4321 + framing
    # the new route (no table entry for 0xE00F) was read: a bad route, not forwarded
    assert sw.counters()["bad_route"] == 1 and sw.counters()["forwarded"] == 1


@IMPLS
def test_queued_packet_leaves_with_the_wire_bytes_it_was_queued_with(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    """A port takes off its queue's count, and sends, the wire bytes it counted at enqueue
    (after a trim: the trimmed size), not what ``pkt.size`` says at dequeue."""
    sim, _inp, out, _sw, _end, sink = _line(impl)
    pkts = [_data(i, routed=True) for i in range(16)]
    for pkt in pkts:  # the first goes on the wire, then the data queue fills, the rest trimmed
        out.enqueue(pkt)
    n_data, n_trim = len(out.data), len(out.prio)
    assert n_trim == out.trims >= 2 and n_data >= 2 and 1 + n_data + n_trim == 16
    full, trimmed = out.wire_bytes(pkts[1]), out.wire_bytes(pkts[-1])
    assert trimmed < full
    assert out.data_bytes == n_data * full and out.prio_bytes == n_trim * trimmed
    for pkt in pkts[1:]:  # changed while queued: the port keeps what it counted
        pkt.size += 100
    sim.run()
    assert out.data_bytes == 0 and out.prio_bytes == 0
    assert out.tx_bytes == (1 + n_data) * full + n_trim * trimmed and len(sink.got) == 16


@IMPLS
def test_ports_give_back_every_reference_to_a_packet(impl: tuple[str, Any, Any, Any, Any]) -> None:
    """Each reference a port takes to a packet (sent at once, queued, trimmed, on the wire,
    lost on an impaired link) is given back: after the run every packet's reference count
    is what it was before it was sent."""
    sim, inp, out, _sw, _end, sink = _line(impl, out_rate=10**10)  # out slower: it trims
    out.set_impairment(loss=0.5)
    pkts = [_data(i, routed=True) for i in range(40)]
    before = [sys.getrefcount(p) for p in pkts]
    for pkt in pkts:  # the first goes on the wire at once, the rest wait in the queue
        inp.enqueue(pkt)
    del pkt
    sim.run()
    assert out.lost > 0 and out.trims > 0 and len(sink.got) == 40 - out.lost
    assert [sys.getrefcount(p) for p in pkts] == before


@IMPLS
def test_post_calls_with_one_argument_in_order_and_can_be_cancelled(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    """``post`` (a one-argument call without a handle) runs in sequence order with
    ``schedule``d calls, is listed by ``pending_callbacks`` as ``(t, seq, fn, (arg,))``,
    and that handle cancels it."""
    sim = impl[1](1)
    out: list[object] = []
    sim.schedule(10, out.append, "a")
    assert sim.post(10, out.append, "b") is None
    sim.schedule(10, out.append, "c")
    sim.post(5, out.append, ("t", "u"))  # a tuple is one argument, not unpacked
    sim.post(30, out.append, "cancelled")
    sim.post(40, out.append, None)
    pending = sorted(sim.pending_callbacks())
    assert [(e[0], e[3]) for e in pending] == [
        (5, (("t", "u"),)),
        (10, ("a",)),
        (10, ("b",)),
        (10, ("c",)),
        (30, ("cancelled",)),
        (40, (None,)),
    ]
    assert pending[2][2] == out.append and pending[1][1] < pending[2][1] < pending[3][1]
    sim.cancel(pending[4])
    assert sim.run() == 5
    assert out == [("t", "u"), "a", "b", "c", None] and not sim.cancelled
    with pytest.raises(ValueError, match="past"):
        sim.post(39, out.append, 0)


@native
def test_soonest_drain_sees_a_drain_time_added_to_a_port_class_after_use() -> None:
    """The native soonest_drain remembers a port class that keeps the native
    drain_time; a drain_time given to that class later is called."""
    assert kernel is not None
    sim = kernel.Simulator(1)

    class Plain(kernel.EgressPort):  # type: ignore[name-defined,misc]
        pass

    port = Plain(sim, "p", 10**11, 1, print, data_limit=10**6, prio_limit=10**5)
    port.enqueue(_data(0))
    native = kernel.soonest_drain([port], 0)
    assert native is not None and native == py_soonest_drain([port], 0)
    Plain.drain_time = lambda self: 10**9  # type: ignore[method-assign]
    assert kernel.soonest_drain([port], 0) == py_soonest_drain([port], 0) == 10**9


@IMPLS
def test_arrivals_after_many_link_flaps_keep_their_epoch(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    """A port's epoch past what the native event keeps inline (2**17): arrivals still
    carry the epoch they were sent in, to a Python receiver and to a native switch."""
    _, sim_cls, port_cls, _sw, _end = impl
    flaps = (1 << 17) + 3
    got: list[tuple[int, int]] = []
    sim = sim_cls(1)
    port = port_cls(
        sim,
        "p",
        10**11,
        1_000,
        lambda pkt, via, epoch: got.append((pkt.psn, epoch)),
        data_limit=10**6,
        prio_limit=10**5,
    )
    for _ in range(flaps):
        port.set_up(False)
        port.set_up(True)
    assert port.epoch == flaps
    port.enqueue(_data(1))
    sim.run()
    port.enqueue(_data(2))
    port.set_up(False)  # in flight when the link goes down: stale on arrival
    port.set_up(True)
    sim.run()
    assert got == [(1, flaps), (2, flaps)] and port.epoch == flaps + 1

    sim, inp, _out, sw, _end, sink = _line(impl)
    for _ in range(flaps):
        inp.set_up(False)
        inp.set_up(True)
    inp.enqueue(_data(3, routed=True))
    sim.run()
    inp.enqueue(_data(4, routed=True))
    inp.set_up(False)
    inp.set_up(True)
    sim.run()
    assert [g[0] for g in sink.got] == [3]
    assert sw.counters()["forwarded"] == 1 and inp.drops_down == 1


@native
def test_native_serialization_time_matches_python_on_both_sides_of_64_bits() -> None:
    """ceil(bytes * 8e12 / rate) natively (64-bit when the product fits, 128-bit when
    not) equals port.py's exact integer expression, negatives and odd rates included."""
    assert kernel is not None
    py_sim, nat_sim = PySimulator(1), kernel.Simulator(1)
    sizes = [0, 1, -1, -7, 38, 1500, 4134, 2**30 + 3, 2**40 - 1, -(2**40), 2**44 + 5, 2**50]
    for rate in (1, 3, 100_000_000_000, 999_999_937, 400_000_000_000, 2**61 - 1):
        kw: dict[str, Any] = {"data_limit": 1, "prio_limit": 1}
        py = PyEgressPort(py_sim, "p", rate, 1, print, **kw)
        nat = kernel.EgressPort(nat_sim, "p", rate, 1, print, **kw)
        for n in sizes:
            want = py.serialization_ps(n)
            if -(2**63) <= want < 2**63:
                assert nat.serialization_ps(n) == want, (rate, n)
            else:
                with pytest.raises(OverflowError):
                    nat.serialization_ps(n)


@native
def test_native_int_arguments_read_exactly_at_digit_boundaries() -> None:
    """The kernel reads a small int (up to two 30-bit digits) from its digits and a
    larger one through CPython: both give the int's value, whatever its sign, up to
    int64's ends; beyond them an OverflowError."""
    assert kernel is not None
    sim = kernel.Simulator(1)
    # 8e12 b/s: one byte serialises in one ps, so serialization_ps(n) echoes n
    port = kernel.EgressPort(sim, "p", 8_000_000_000_000, 1, print, data_limit=1, prio_limit=1)
    edges = [0, 1, 2**15, 2**30 - 1, 2**30, 2**30 + 1, 2**45 + 3, 2**60 - 1, 2**60, 2**62]
    for n in [*edges, 2**63 - 1, *(-e for e in edges), -(2**63)]:
        assert port.serialization_ps(n) == n, n
    for n in (2**63, -(2**63) - 1, 2**90):
        with pytest.raises(OverflowError, match="64 bits"):
            port.serialization_ps(n)


@IMPLS
def test_arrivals_on_one_link_run_in_time_order_and_are_all_pending(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    """A port's arrivals in flight are all pending (``pending()`` counts them), and
    an arrival due before those already scheduled (the link went down and up during
    a long transmission, so a short packet sent next overtakes it) still runs first."""
    _, sim_cls, port_cls, _sw, _end = impl
    sim = sim_cls(1)
    got: list[tuple[int, int, int]] = []
    port = port_cls(
        sim,
        "p",
        10**11,
        10_000_000,  # 10 us: every packet below is in flight at once
        lambda pkt, via, epoch: got.append((sim.now, pkt.psn, epoch)),
        data_limit=10**7,
        prio_limit=10**5,
    )
    for psn in range(5):
        port.enqueue(_data(psn))
    sim.run(until_ps=2_000_000)
    assert sim.pending() == 5  # five arrivals, nothing else
    port.enqueue(_data(5, length=60_000))  # about 4.8 us on the wire
    sim.run(until_ps=3_000_000)
    port.set_up(False)  # mid-transmission: the long packet arrives stale at 17.8 us
    port.set_up(True)
    port.enqueue(_data(6))
    port.enqueue(_data(7))
    assert sim.pending() == 8
    sim.run()
    assert [(psn, epoch) for _, psn, epoch in got] == [
        (0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (6, 1), (7, 1), (5, 0)
    ]  # fmt: skip
    assert [t for t, _, _ in got] == sorted(t for t, _, _ in got)
    assert sim.pending() == 0


@IMPLS
def test_arrivals_queued_on_a_link_go_with_a_reset_or_collected_simulator(
    impl: tuple[str, Any, Any, Any, Any],
) -> None:
    """A port's arrivals in flight are dropped with the rest when the simulator is
    initialised again (none runs, none is counted) and freed with a collected
    simulator and port."""
    _, sim_cls, port_cls, _sw, _end = impl
    for again in (True, False):
        sim = sim_cls(1)
        got: list[int] = []
        port = port_cls(
            sim, "p", 10**11, 10_000_000, lambda pkt, via, epoch, got=got: got.append(pkt.psn),
            data_limit=10**7, prio_limit=10**5,
        )  # fmt: skip
        for psn in range(4):
            port.enqueue(_data(psn))
        sim.run(until_ps=1_000_000)
        assert sim.pending() == 4
        if again:
            sim.__init__(1)
            assert sim.pending() == 0
            port.enqueue(_data(9))
            sim.run()
            assert got == [9] and sim.pending() == 0
        else:
            del sim, port
            gc.collect()
            assert got == []
