"""The context's timer heap: the earliest QP deadline, at O(log QPs) a wake-up."""

from __future__ import annotations

import pytest

from openmrc.loopback import Faults, Loopback
from openmrc.transport import SGE, QueuePair, SendWR, WROpcode
from tests.compiled import interpreted_only


def _brute(ctx_qps: dict[int, QueuePair]) -> int | None:
    times = [t for qp in ctx_qps.values() if (t := qp.get_timer()) is not None]
    return min(times) if times else None


def _post(lb: Loopback, qa: QueuePair, qb: QueuePair, size: int, wr_id: int) -> None:
    src = qa.pd.reg_mr(size, buffer=bytearray(bytes(range(256)) * (size // 256)))
    dst = qb.pd.reg_mr(size, buffer=bytearray(size))
    qa.post_send(
        SendWR(wr_id, WROpcode.RDMA_WRITE, [SGE(src.addr, size, src.lkey)], dst.addr, dst.rkey)
    )


def test_get_timer_is_the_earliest_deadline_of_any_qp_at_every_step() -> None:
    # Loss and reordering make RTOs, tail probes and RACK deadlines come and go.
    faults = Faults(loss=0.05, reorder=0.2, reorder_delay_ps=3_000_000)
    lb = Loopback(faults, Faults(loss=0.05), seed=3)
    pairs = [lb.connect() for _ in range(6)]
    for i, (qa, qb) in enumerate(pairs):
        _post(lb, qa, qb, (i + 1) * 16384, i)
    checked = 0

    def check(_at: int, _direction: str, _pkt: object, _fate: str) -> None:
        nonlocal checked
        for ctx in (lb.a, lb.b):
            assert ctx.get_timer() == _brute(ctx.qps)
        checked += 1

    lb.trace = check
    lb.run(until=200_000_000_000)
    assert checked > 100  # packets seen: enough steps to exercise the heap
    for qa, _ in pairs:
        wcs = qa.send_cq.poll(10)
        assert len(wcs) == 1 and wcs[0].ok
    assert lb.a.get_timer() == _brute(lb.a.qps) is None


@interpreted_only("openmrc.transport.qp")
def test_a_wake_up_reads_only_the_qps_that_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    lb = Loopback(seed=1)
    pairs = [lb.connect() for _ in range(50)]
    qa, qb = pairs[0]
    _post(lb, qa, qb, 65536, 1)
    lb.run(until=3_000_000)  # a few packets out: qa has an RTO armed
    assert lb.a.get_timer() is not None
    reads: list[int] = []
    real = QueuePair.get_timer

    def counting(self: QueuePair) -> int | None:
        reads.append(self.qpn)
        return real(self)

    monkeypatch.setattr(QueuePair, "get_timer", counting)
    lb.a.get_timer()
    assert reads == []  # nothing changed since the last look
    assert lb.a.poll_packet(lb.now) is not None  # qa sends one more packet
    lb.a.get_timer()
    assert reads == [qa.qpn]  # one QP re-read, not fifty


@interpreted_only("openmrc.transport.qp")
def test_handle_timer_runs_due_qps_in_qpn_order_and_only_those(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lb = Loopback(seed=1)
    pairs = [lb.connect() for _ in range(5)]
    for i, (qa, qb) in enumerate(reversed(pairs)):  # post in reverse QPN order
        _post(lb, qa, qb, 4096, i)
    now = 0
    while lb.a.poll_packet(now) is not None:  # sent, never delivered: every RTO is armed,
        now += 1_000_000  # the highest QPN's first
    ran: list[int] = []
    real = QueuePair.handle_timer

    def recording(self: QueuePair, now: int) -> None:
        ran.append(self.qpn)
        real(self, now)

    monkeypatch.setattr(QueuePair, "handle_timer", recording)
    deadline = lb.a.get_timer()
    assert deadline is not None
    lb.a.handle_timer(deadline - 1)
    assert ran == []  # nothing due yet
    due = sorted(qa.qpn for qa, _ in pairs if qa.get_timer() is not None)
    lb.a.handle_timer(max(at for qa, _ in pairs if (at := qa.get_timer()) is not None))
    assert ran == due and len(due) > 1


def test_a_destroyed_qp_leaves_no_deadline() -> None:
    # Its requester still has an RTO armed, but the context no longer has the QP.
    lb = Loopback()
    qa, qb = lb.connect()
    keep_a, _keep_b = lb.connect()
    _post(lb, qa, qb, 16384, 1)
    while lb.a.poll_packet(1000) is not None:
        pass  # sent, and lost: nothing delivers it
    assert qa.get_timer() is not None and lb.a.get_timer() == qa.get_timer()
    lb.a.destroy_qp(qa)
    assert qa.get_timer() is not None  # (the QP alone still has its deadline)
    assert lb.a.get_timer() is None
    assert keep_a.get_timer() is None


@interpreted_only("openmrc.transport.qp")
def test_stale_heap_entries_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    # A deadline that keeps moving earlier leaves its older entries below the top,
    # where get_timer never pops them: the heap is rebuilt from the live ones.
    lb = Loopback(seed=1)
    qa, _ = lb.connect()
    keep, _ = lb.connect()
    ctx = lb.a
    deadlines = {qa.qpn: 0, keep.qpn: 5_000_000}
    monkeypatch.setattr(QueuePair, "get_timer", lambda self: deadlines.get(self.qpn))
    peak = 0
    for k in range(1000):
        deadlines[qa.qpn] = 1_000_000 - k
        qa.mark_timer()
        keep.mark_timer()
        assert ctx.get_timer() == 1_000_000 - k
        peak = max(peak, len(ctx._timer_heap))
        assert len(ctx._timer_heap) <= 2 * 2 + 65
    assert peak > 60  # stale entries piled up before each rebuild
    del deadlines[qa.qpn]
    qa.mark_timer()
    assert ctx.get_timer() == 5_000_000  # the other QP's entry survived the rebuilds


def test_a_qp_is_in_timer_dirty_once() -> None:
    # Marked many times per packet, a QP is re-read once: the list holds it once.
    lb = Loopback(seed=1)
    qa, _ = lb.connect()
    ctx = lb.a
    ctx.get_timer()  # reads and empties the list
    assert ctx.timer_dirty == []
    qa.mark_timer()
    qa.mark_timer()
    qa.wake()
    assert ctx.timer_dirty == [qa]
    ctx.get_timer()
    assert ctx.timer_dirty == [] and not qa.timer_marked
