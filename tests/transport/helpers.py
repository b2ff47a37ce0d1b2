"""Shared helpers for transport tests: a checked transfer over the loopback harness."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from openmrc.loopback import Faults, Loopback
from openmrc.transport import SGE, QPAttr, QueuePair, RecvWR, SendWR, WorkCompletion, WROpcode


@dataclass
class Transfer:
    """The outcome of :func:`transfer`."""

    lb: Loopback
    qa: QueuePair
    qb: QueuePair
    src: bytearray
    dst: bytearray
    messages: list[tuple[int, int, int | None]]  # (offset, length, imm)
    send_wcs: list[WorkCompletion] = field(default_factory=list)
    recv_wcs: list[WorkCompletion] = field(default_factory=list)


def setup_transfer(
    faults: Faults | None = None,
    *,
    seed: int = 1,
    count: int = 30,
    max_len: int = 70_000,
    imm_every: int = 3,
    wire: bool = False,
    attr: QPAttr | None = None,
    faults_ba: Faults | None = None,
    region: int = 4 << 20,
    delay_ps: int = 2_000_000,
) -> Transfer:
    """Post ``count`` random-sized WRITE/WRITE_IMMs of random bytes from a to b."""
    lb = Loopback(faults, faults_ba, seed=seed, wire=wire, delay_ps=delay_ps)
    qa, qb = lb.connect(attr)
    rng = random.Random(seed * 7919)
    src = bytearray(rng.randbytes(region))
    dst = bytearray(region)
    mra = qa.pd.reg_mr(region, buffer=src)
    mrb = qb.pd.reg_mr(region, buffer=dst)
    messages = []
    offset = 0
    for i in range(count):
        length = rng.randrange(0, max_len)
        if offset + length > region:
            break
        imm = rng.getrandbits(32) if imm_every and i % imm_every == 0 else None
        if imm is not None:
            qb.post_recv(RecvWR(1000 + i))
        opcode = WROpcode.RDMA_WRITE_WITH_IMM if imm is not None else WROpcode.RDMA_WRITE
        qa.post_send(
            SendWR(
                i,
                opcode,
                [SGE(mra.addr + offset, length, mra.lkey)],
                mrb.addr + offset,
                mrb.rkey,
                imm,
            )
        )
        messages.append((offset, length, imm))
        offset += length
    return Transfer(lb, qa, qb, src, dst, messages)


def run_transfer(t: Transfer, until: int | None = None) -> Transfer:
    """Run until every send completed (or ``until``), collecting completions."""

    def done() -> bool:
        t.send_wcs.extend(t.qa.send_cq.poll(1 << 20))
        t.recv_wcs.extend(t.qb.recv_cq.poll(1 << 20))
        return len(t.send_wcs) >= len(t.messages)

    t.lb.run(until=until, stop=done)
    done()
    return t


def assert_exact(t: Transfer) -> None:
    """Every WRITE succeeded, every byte arrived, immediates in message order."""
    assert [wc.wr_id for wc in t.send_wcs] == list(range(len(t.messages)))
    assert all(wc.ok for wc in t.send_wcs), {wc.status for wc in t.send_wcs}
    end = sum(length for _, length, _ in t.messages)
    assert t.dst[:end] == t.src[:end]
    assert not any(t.dst[end:])
    imms = [(imm, length) for _, length, imm in t.messages if imm is not None]
    assert [(wc.imm_data, wc.byte_len) for wc in t.recv_wcs] == imms
    assert all(wc.ok for wc in t.recv_wcs)
