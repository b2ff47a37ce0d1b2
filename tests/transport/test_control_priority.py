"""A NIC sends its control packets (SACKs, NACKs, probes, probe replies) ahead of
every QP's data: an ACK never waits for a turn in the data round robin."""

from __future__ import annotations

from openmrc.loopback import Loopback
from openmrc.transport import SGE, SendWR, WROpcode
from openmrc.wire.packets import DataPacket, ProbePacket


def test_control_of_one_qp_goes_before_data_of_the_others() -> None:
    lb = Loopback(seed=1)
    pairs = [lb.connect() for _ in range(8)]
    for i, (qa, qb) in enumerate(pairs):
        src = qa.pd.reg_mr(65536, buffer=bytearray(65536))
        dst = qb.pd.reg_mr(65536, buffer=bytearray(65536))
        qa.post_send(
            SendWR(i, WROpcode.RDMA_WRITE, [SGE(src.addr, 65536, src.lkey)], dst.addr, dst.rkey)
        )
    ctx = lb.a
    # Every QP has data waiting; the last one also queues an EV probe (as RACK
    # does for an overdue packet).  Before, the probe waited behind a data
    # packet of each of the 7 QPs ahead of it in the round robin.
    first = ctx.poll_packet(0)
    assert first is not None and type(first[1]) is DataPacket
    last_qa = pairs[-1][0]
    assert last_qa.requester is not None
    ev = last_qa.paths.slots[0] if last_qa.paths is not None else 0
    last_qa.queue_control(last_qa.requester.probe(0, reliability=False, ev=ev))
    item = ctx.poll_packet(0)
    assert item is not None
    qp, pkt = item
    assert qp is last_qa and type(pkt) is ProbePacket
    # Then data again, round robin, the probing QP included.
    senders = []
    for _ in range(8):
        item = ctx.poll_packet(0)
        assert item is not None and type(item[1]) is DataPacket
        senders.append(item[0])
    assert len(set(senders)) == 8


def _senders(n: int) -> tuple[Loopback, list]:  # type: ignore[type-arg]
    """``n`` QPs on one context, each with 64 KiB to write."""
    lb = Loopback(seed=1)
    pairs = [lb.connect() for _ in range(n)]
    for i, (qa, qb) in enumerate(pairs):
        src = qa.pd.reg_mr(65536, buffer=bytearray(65536))
        dst = qb.pd.reg_mr(65536, buffer=bytearray(65536))
        qa.post_send(
            SendWR(i, WROpcode.RDMA_WRITE, [SGE(src.addr, 65536, src.lkey)], dst.addr, dst.rkey)
        )
    return lb, [qa for qa, _ in pairs]


def test_waking_a_ready_qp_again_keeps_the_round_robin() -> None:
    lb, qps = _senders(3)
    for _ in range(3):
        qps[0].wake()  # already waiting: it keeps its one turn
        qps[1].queue_control(qps[1].requester.probe(0, reliability=True))
    order = []
    for _ in range(12):
        item = lb.a.poll_packet(0)
        assert item is not None
        if type(item[1]) is DataPacket:
            order.append(qps.index(item[0]))
    assert order == [0, 1, 2] * 3


def test_a_destroyed_qp_is_not_polled() -> None:
    lb, qps = _senders(3)
    gone = qps[1]
    for _ in range(2):  # control queued too: none of it goes out once destroyed
        gone.queue_control(gone.requester.probe(0, reliability=True))
    lb.a.destroy_qp(gone)
    assert gone not in lb.a.ready and gone not in lb.a.control_ready
    sent = set()
    while (item := lb.a.poll_packet(0)) is not None:
        sent.add(item[0])
    assert sent == {qps[0], qps[2]}
