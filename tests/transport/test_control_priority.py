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
