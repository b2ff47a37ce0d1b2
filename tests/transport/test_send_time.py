"""A data packet's recorded send time when the driver passes its time as an object
(``Context.poll(now, busy, now_o)``, as the simulator's NIC does): the record is the
packet's own timestamp, the driver's time, or with ACK proof on the packet's stamp."""

from __future__ import annotations

import random

from openmrc.transport import SGE, Context, QPAttr, QueuePair, SendWR, WROpcode
from openmrc.transport.txtable import TX_CLASS
from openmrc.wire.packets import DataPacket

MS = 1_000_000_000  # ps


def _pair(proof: bool) -> tuple[Context, QueuePair]:
    a, b = Context(random.Random(1), "a"), Context(random.Random(2), "b")
    qa = a.alloc_pd().create_qp(a.create_cq())
    qb = b.alloc_pd().create_qp(b.create_cq())
    qa.connect(qb.qpn, QPAttr(), peer="b")
    qb.connect(qa.qpn, QPAttr(), peer="a")
    if proof:
        assert qa.requester is not None
        qa.requester.require_ack_proof(random.Random(11))
    length = 16 << 10
    src = qa.pd.reg_mr(length, buffer=bytearray(length))
    dst = qb.pd.reg_mr(length, buffer=bytearray(length))
    wr = SendWR(1, WROpcode.RDMA_WRITE, [SGE(src.addr, length, src.lkey)], dst.addr, dst.rkey)
    qa.post_send(wr)
    return a, qa


def test_the_send_time_recorded_is_the_packets_timestamp_with_the_drivers_time() -> None:
    for proof in (False, True):
        a, qa = _pair(proof)
        req = qa.requester
        assert req is not None
        sent = []
        for k in range(4):
            now = 5 * MS + 1000 * k
            now_o: object = now  # the driver's object for the time
            pkt = a.poll(now, 0, now_o)
            assert isinstance(pkt, DataPacket)
            sent.append(pkt)
            # the record is the packet's timestamp: the time given, or its stamp
            assert TX_CLASS.sent(req.unacked, pkt.psn) == pkt.ts, (proof, k)
            assert (pkt.ts != now) is proof
        assert [p.psn for p in sent] == [0, 1, 2, 3]
