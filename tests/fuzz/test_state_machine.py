"""A Hypothesis state machine over two sans-IO endpoints and a hostile network.

Rules interleave API calls (WRITE and WRITE_WITH_IMM posts), the network
(deliver any in-flight datagram, in any order, drop it, duplicate it),
forged datagrams (garbage, and well-formed packets of every type from a
third party) and timers.  Invariants after every step:

* no byte outside the destination region changes (guard bytes around it);
* a WRITE's send completion, and a WRITE_WITH_IMM's receive completion, only
  for data that is really in place (byte-compared);
* WRITE_WITH_IMM receive completions arrive in posting order;
* a third party cannot fail a QP (no QP in ERROR: retries are infinite, so
  nothing legitimate can end in ERROR here);
* bounded state: what the endpoints emit per step and keep queued is bounded.

``TwoEndpoints`` forges packets only for QP numbers that are not live (and
garbage); ``TwoEndpointsForgingLive`` also forges packets to the live QPs.
MRC 1.0 has no data-path authentication: a SACK forged for a live QP is
indistinguishable from a genuine one and may acknowledge data that never
arrived (docs/security.md, "What openmrc cannot protect against").  So once
a SACK has been forged at a live QP, the "completion only for placed data"
check stands down for that example; every other invariant (above all: the
third party cannot fail the QP) still holds.
"""

from __future__ import annotations

import random

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from openmrc.transport import SGE, Context, QPAttr, RecvWR, SendWR, WROpcode
from openmrc.transport.attrs import EVProfile
from openmrc.transport.errors import MrcError
from openmrc.wire.codec import encode
from openmrc.wire.packets import (
    DataPacket,
    NackPacket,
    NackReason,
    Opcode,
    ProbePacket,
    ProbeReplyPacket,
    SackPacket,
)

REGION = 1 << 16
GUARD = 64
SENTINEL = 0xEE
MAX_WIRE = 3000


def _attr() -> QPAttr:
    return QPAttr(
        ev_profile=EVProfile(planes=2, paths_per_plane=8, ev_count=8, floor=2),
        timeout=7,
        retry_exp=25,  # retry forever: nothing legitimate may end in ERROR
    )


class TwoEndpoints(RuleBasedStateMachine):
    """A and B connected; A WRITEs into B's region; the network is hostile."""

    forge_live = False

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = Context(random.Random(1)), Context(random.Random(2))
        self.qa = self.a.alloc_pd().create_qp(self.a.create_cq())
        self.qb = self.b.alloc_pd().create_qp(self.b.create_cq())
        self.qa.connect(self.qb.qpn, _attr(), peer="b")
        self.qb.connect(self.qa.qpn, _attr(), peer="a")
        self.data = random.Random(3).randbytes(REGION)
        self.src = self.qa.pd.reg_mr(REGION, buffer=bytearray(self.data))
        self.backing = bytearray([SENTINEL]) * (REGION + 2 * GUARD)
        self.view = memoryview(self.backing)[GUARD : GUARD + REGION]
        self.view[:] = bytes(REGION)
        self.dst = self.qb.pd.reg_mr(REGION, buffer=self.view)
        self.now = 1_000_000
        self.ab: list[bytes] = []
        self.ba: list[bytes] = []
        self.next_off = 0
        self.wrs: dict[int, tuple[int, int, int | None]] = {}  # wr_id -> (off, len, imm)
        self.imms_posted: list[int] = []
        self.imms_done: list[int] = []
        self.done_ranges: list[tuple[int, int]] = []
        self.last_emitted = 0
        #: a SACK was forged at a live QP: acknowledgements can no longer be trusted
        self.forged_ack = False

    # -- API -----------------------------------------------------------------------
    @precondition(lambda self: self.next_off < REGION and len(self.wrs) < 200)
    @rule(length=st.integers(1, 9000), imm=st.booleans())
    def post_write(self, length: int, imm: bool) -> None:
        length = min(length, REGION - self.next_off)
        wr_id = len(self.wrs) + 1
        imm_val = len(self.imms_posted) + 100 if imm else None
        try:
            if imm:
                self.qb.post_recv(RecvWR(wr_id=wr_id))
            op = WROpcode.RDMA_WRITE_WITH_IMM if imm else WROpcode.RDMA_WRITE
            self.qa.post_send(
                SendWR(wr_id, op, [SGE(self.src.addr + self.next_off, length, self.src.lkey)],
                       self.dst.addr + self.next_off, self.dst.rkey, imm_data=imm_val)
            )  # fmt: skip
        except MrcError:
            return
        self.wrs[wr_id] = (self.next_off, length, imm_val)
        if imm_val is not None:
            self.imms_posted.append(imm_val)
        self.next_off += length

    # -- the network ---------------------------------------------------------------
    @rule()
    def pump(self) -> None:
        """Everything both ends want to send now goes on the wire."""
        emitted = 0
        for ctx, wire in ((self.a, self.ab), (self.b, self.ba)):
            for d in ctx.datagrams_to_send(self.now):
                emitted += 1
                wire.append(d.data)
        self.last_emitted = emitted
        del self.ab[:-MAX_WIRE], self.ba[:-MAX_WIRE]

    @rule(data=st.data(), to_b=st.booleans(), keep=st.sampled_from(["deliver", "dup", "drop"]))
    def network(self, data: st.DataObject, to_b: bool, keep: str) -> None:
        wire = self.ab if to_b else self.ba
        if not wire:
            return
        i = data.draw(st.integers(0, len(wire) - 1))
        dg = wire[i] if keep == "dup" else wire.pop(i)
        if keep != "drop":
            (self.b if to_b else self.a).receive_datagram(dg, self.now)

    @rule(n=st.integers(1, 50))
    def deliver_in_order(self, n: int) -> None:
        for _ in range(n):
            if self.ab:
                self.b.receive_datagram(self.ab.pop(0), self.now)
            if self.ba:
                self.a.receive_datagram(self.ba.pop(0), self.now)

    @rule(advance=st.integers(1, 400_000_000))
    def tick(self, advance: int) -> None:
        self.now += advance
        for ctx in (self.a, self.b):
            at = ctx.get_timer()
            if at is not None and at <= self.now:
                ctx.handle_timer(self.now)

    # -- a third party -------------------------------------------------------------
    @rule(data=st.binary(max_size=200), to_b=st.booleans())
    def forge_garbage(self, data: bytes, to_b: bool) -> None:
        (self.b if to_b else self.a).receive_datagram(data, self.now)

    @rule(
        kind=st.integers(0, 4),
        to_b=st.booleans(),
        qpn=st.integers(1, (1 << 24) - 1),
        psn=st.integers(0, 3000),
        ev=st.integers(0, (1 << 32) - 1),
        reason=st.sampled_from(list(NackReason)),
        rkey=st.integers(0, (1 << 32) - 1),
    )
    def forge_packet(
        self, kind: int, to_b: bool, qpn: int, psn: int, ev: int, reason: NackReason, rkey: int
    ) -> None:
        target = self.b if to_b else self.a
        live = (self.qb if to_b else self.qa).qpn
        if self.forge_live:
            qpn = live
        elif qpn == live:
            qpn = live + 1
        if kind == 0:
            addr = self.dst.addr + psn * 16 if rkey % 2 else rkey
            pkt = encode(DataPacket(qpn, ev, Opcode.WRITE_ONLY, psn, 0, addr, rkey, 16, b"X" * 16))
        elif kind == 1:
            pkt = encode(SackPacket(qpn, ev, psn, psn + 1, rkey | (rkey << 32)))
            self.forged_ack = self.forged_ack or qpn == live
        elif kind == 2:
            pkt = encode(NackPacket(qpn, ev, reason, psn, max(psn - 1, 0)))
        elif kind == 3:
            pkt = encode(ProbePacket(qpn, ev, psn, 0, reliability=bool(rkey % 2)))
        else:
            pkt = encode(ProbeReplyPacket(qpn, ev, psn, 0))
        target.receive_datagram(pkt, self.now)

    # -- invariants ----------------------------------------------------------------
    @invariant()
    def no_byte_outside_the_region(self) -> None:
        b = self.backing
        assert b[:GUARD].count(SENTINEL) == GUARD and b[-GUARD:].count(SENTINEL) == GUARD

    @invariant()
    def completions_only_for_placed_data_and_in_order(self) -> None:
        for wc in self.qa.send_cq.poll(1 << 10):
            if wc.ok and not self.forged_ack:
                off, length, _ = self.wrs[wc.wr_id]
                assert bytes(self.view[off : off + length]) == self.data[off : off + length]
                self.done_ranges.append((off, length))
        for wc in self.qb.recv_cq.poll(1 << 10):
            if not wc.ok:
                continue
            self.imms_done.append(wc.imm_data)  # type: ignore[arg-type]
            assert self.imms_done == self.imms_posted[: len(self.imms_done)], "out of order"
            # that message and every earlier one are in place
            off, length, _ = next(v for v in self.wrs.values() if v[2] == wc.imm_data)
            assert bytes(self.view[: off + length]) == self.data[: off + length]

    @invariant()
    def no_qp_failed(self) -> None:
        assert self.qa.state.value != "ERROR" and self.qb.state.value != "ERROR"

    @invariant()
    def bounded(self) -> None:
        assert self.last_emitted <= 4000
        assert len(self.a.events) + len(self.b.events) <= 100_000
        self.a.events.clear()
        self.b.events.clear()


TwoEndpoints.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_two_endpoints_on_a_hostile_network = TwoEndpoints.TestCase


class TwoEndpointsForgingLive(TwoEndpoints):
    """The same, but the third party aims its packets at the live QPs."""

    forge_live = True


TwoEndpointsForgingLive.TestCase.settings = settings(
    max_examples=25,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_a_third_party_aiming_at_live_qps_cannot_fail_them() -> None:
    TwoEndpointsForgingLive.TestCase("runTest").runTest()
