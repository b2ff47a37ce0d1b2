"""Failure semantics: retries exhausted, remote access errors, missing receives, bad API use."""

from __future__ import annotations

import pytest

from openmrc.loopback import Faults, Loopback
from openmrc.transport import (
    SGE,
    Access,
    CCProfile,
    EVProfile,
    InvalidArgument,
    InvalidState,
    QPAttr,
    QPEvent,
    QPState,
    RecvWR,
    ResourceExhausted,
    SendWR,
    WCStatus,
    WorkCompletion,
    WROpcode,
)
from tests.compiled import wrong_type_raises

from .helpers import run_transfer, setup_transfer

ALL_PLANES = set(range(16))


def test_retries_exhausted_puts_qp_in_error_and_fails_outstanding_wrs() -> None:
    attr = QPAttr(timeout=3, retry_linear=2, retry_exp=2)
    t = setup_transfer(attr=attr, count=20, imm_every=0)
    # Let a few messages through, then cut every path in both directions.
    t.lb.run(until=20_000_000)
    t.lb.faults_ab.blackhole_planes |= ALL_PLANES
    t.lb.faults_ba.blackhole_planes |= ALL_PLANES
    run_transfer(t, until=10_000_000_000)
    assert t.qa.state is QPState.ERROR
    assert "retries exhausted" in t.qa.error_reason
    assert len(t.send_wcs) == len(t.messages)
    statuses = [wc.status for wc in t.send_wcs]
    ok = [wc for wc in t.send_wcs if wc.ok]
    assert 0 < len(ok) < len(t.messages)
    # Completions are in order: successes first, then one RETRY_EXC_ERR, then flushes.
    first_err = statuses.index(WCStatus.RETRY_EXC_ERR)
    assert all(s is WCStatus.SUCCESS for s in statuses[:first_err])
    assert all(s is WCStatus.WR_FLUSH_ERR for s in statuses[first_err + 1 :])
    # Nothing reported delivered that was not: every successful WRITE is in place.
    for wc in ok:
        offset, length, _ = t.messages[wc.wr_id]
        assert t.dst[offset : offset + length] == t.src[offset : offset + length]
    assert t.qa.stats.timeouts == 4 + 1 or t.qa.stats.timeouts >= 4
    events = []
    while (e := t.lb.a.next_event()) is not None:
        if isinstance(e, QPEvent):
            events.append(e)
    assert events[-1].new is QPState.ERROR
    with pytest.raises(InvalidState, match="needs RTS"):
        t.qa.post_send(SendWR(99, WROpcode.RDMA_WRITE, [], 0, 0))


def test_infinite_retries_never_error() -> None:
    attr = QPAttr(timeout=1, retry_linear=1, retry_exp=25)
    t = setup_transfer(attr=attr, count=3, imm_every=0)
    t.lb.faults_ab.blackhole_planes |= ALL_PLANES
    t.lb.run(until=2_000_000_000)
    assert t.qa.state is QPState.RTS
    assert t.qa.stats.timeouts > 8
    t.lb.faults_ab.blackhole_planes.clear()
    run_transfer(t, until=20_000_000_000)
    assert [wc.ok for wc in t.send_wcs] == [True] * 3


def _one_write(rkey_of, addr_of, length: int = 10_000, access: Access | None = None):
    lb = Loopback()
    qa, qb = lb.connect()
    src = bytearray(b"\xab" * 65536)
    dst = bytearray(65536)
    mra = qa.pd.reg_mr(65536, buffer=src)
    kwargs = {} if access is None else {"access": access}
    mrb = qb.pd.reg_mr(65536, buffer=dst, **kwargs)
    other = qb.pd.reg_mr(4096, buffer=bytearray(4096))
    qa.post_send(
        SendWR(
            1, WROpcode.RDMA_WRITE, [SGE(mra.addr, length, mra.lkey)], addr_of(mrb), rkey_of(mrb)
        )
    )
    # A valid WRITE behind it (to another region): it completes as flushed.
    qa.post_send(
        SendWR(2, WROpcode.RDMA_WRITE, [SGE(mra.addr, 100, mra.lkey)], other.addr, other.rkey)
    )
    wcs: list[WorkCompletion] = []

    def both_completed() -> bool:
        wcs.extend(qa.send_cq.poll(10))
        return len(wcs) >= 2

    lb.run(stop=both_completed)
    return qa, qb, dst, wcs


@pytest.mark.parametrize(
    ("case", "rkey_of", "addr_of", "access"),
    [
        ("wrong rkey", lambda mr: mr.rkey ^ 0x5A5A, lambda mr: mr.addr, None),
        ("past the end", lambda mr: mr.rkey, lambda mr: mr.addr + 65_536, None),
        ("before the start", lambda mr: mr.rkey, lambda mr: mr.addr - 20_000, None),
        ("no REMOTE_WRITE", lambda mr: mr.rkey, lambda mr: mr.addr, Access.LOCAL_WRITE),
    ],
)
def test_remote_access_error(case, rkey_of, addr_of, access) -> None:
    qa, qb, dst, wcs = _one_write(rkey_of, addr_of, access=access)
    assert [wc.status for wc in wcs] == [WCStatus.REM_ACCESS_ERR, WCStatus.WR_FLUSH_ERR], case
    assert not any(dst), "a byte was written"
    assert qa.state is QPState.ERROR
    assert qb.stats.rx_access_errors >= 1


def test_write_straddling_the_end_is_refused_packet_by_packet() -> None:
    # Every MRC packet carries its own RETH and is checked on its own: packets
    # inside the region land, the ones outside are NACKed and never written, and
    # the WRITE completes with REM_ACCESS_ERR (its target bytes are undefined,
    # as for any failed verbs WRITE).
    _, qb, dst, wcs = _one_write(lambda mr: mr.rkey, lambda mr: mr.addr + 60_000)
    assert wcs[0].status is WCStatus.REM_ACCESS_ERR
    assert not any(dst[:60_000])
    assert qb.stats.rx_access_errors >= 1


def test_write_imm_without_posted_receive_is_no_resource() -> None:
    lb = Loopback()
    qa, qb = lb.connect()
    mra = qa.pd.reg_mr(4096, buffer=bytearray(4096))
    mrb = qb.pd.reg_mr(4096, buffer=bytearray(4096))
    qa.post_send(
        SendWR(1, WROpcode.RDMA_WRITE_WITH_IMM, [SGE(mra.addr, 8, mra.lkey)], mrb.addr, mrb.rkey, 7)
    )
    wcs: list[WorkCompletion] = []

    def completed() -> bool:
        wcs.extend(qa.send_cq.poll(10))
        return len(wcs) >= 1

    lb.run(stop=completed)
    assert [wc.status for wc in wcs] == [WCStatus.RNR_RETRY_EXC_ERR]
    assert qb.stats.rx_no_resource >= 1


def test_user_error_completes_everything_with_flush() -> None:
    t = setup_transfer(count=5)
    t.qa.modify(QPState.ERROR)
    assert [wc.status for wc in t.qa.send_cq.poll(10)] == [WCStatus.WR_FLUSH_ERR] * 5
    assert len(t.qb.recv_cq) == 0  # the responder is untouched by the requester's error
    t.qb.modify(QPState.ERROR)
    flushed = t.qb.recv_cq.poll(10)
    assert flushed and all(wc.status is WCStatus.WR_FLUSH_ERR for wc in flushed)
    t.qa.modify(QPState.RESET)
    assert t.qa.state is QPState.RESET


# -- API misuse -------------------------------------------------------------------------


@pytest.fixture
def qps():
    lb = Loopback()
    qa, qb = lb.connect()
    mr = qa.pd.reg_mr(8192, buffer=bytearray(8192))
    return lb, qa, qb, mr


def test_unsupported_opcodes_are_refused(qps) -> None:
    _, qa, _, mr = qps
    for bad in ("SEND", "RDMA_READ", 3, None):
        with pytest.raises(InvalidArgument, match="MRC 1.0 has only RDMA_WRITE"):
            qa.post_send(SendWR(1, bad, [SGE(mr.addr, 1, mr.lkey)], 0, 1))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda mr: SendWR(1, WROpcode.RDMA_WRITE, [SGE(mr.addr, 1, 12345)], 0, 1),
            r"sg_list\[0\].lkey",
        ),
        (
            lambda mr: SendWR(1, WROpcode.RDMA_WRITE, [SGE(mr.addr, 9000, mr.lkey)], 0, 1),
            "outside the region",
        ),
        (lambda mr: SendWR(1, WROpcode.RDMA_WRITE, [SGE(mr.addr, -1, mr.lkey)], 0, 1), "length"),
        (lambda mr: SendWR(1, WROpcode.RDMA_WRITE, "nope", 0, 1), "sg_list"),  # type: ignore[arg-type]
        (lambda mr: SendWR(1, WROpcode.RDMA_WRITE, [], -5, 1), "remote_addr"),
        (lambda mr: SendWR(1, WROpcode.RDMA_WRITE, [], 0, 1 << 32), "rkey"),
        (lambda mr: SendWR(1, WROpcode.RDMA_WRITE, [], 0, 1, imm_data=4), "imm_data"),
        (lambda mr: SendWR(1, WROpcode.RDMA_WRITE_WITH_IMM, [], 0, 1), "imm_data"),
        (
            lambda mr: SendWR(1, WROpcode.RDMA_WRITE_WITH_IMM, [], 0, 1, imm_data=1 << 32),
            "imm_data",
        ),
        (lambda mr: "not a wr", "SendWR"),
    ],
)
def test_bad_send_arguments(qps, make, match) -> None:
    _, qa, _, mr = qps
    wr = make(mr)
    if not isinstance(wr, SendWR):  # compiled, post_send's boundary refuses it (TypeError)
        with wrong_type_raises("openmrc.transport.qp", InvalidArgument, match):
            qa.post_send(wr)
        return
    with pytest.raises(InvalidArgument, match=match):
        qa.post_send(wr)


def test_max_wimm_send_bounds_write_imm_in_flight() -> None:
    lb = Loopback()
    qa, _ = lb.connect(QPAttr(max_wimm_send=2))
    for i in range(2):
        qa.post_send(SendWR(i, WROpcode.RDMA_WRITE_WITH_IMM, [], 0, 1, imm_data=i))
    with pytest.raises(ResourceExhausted, match="max_wimm_send"):
        qa.post_send(SendWR(3, WROpcode.RDMA_WRITE_WITH_IMM, [], 0, 1, imm_data=3))


def test_state_machine_table() -> None:
    lb = Loopback()
    pd = lb.a.alloc_pd()
    qp = pd.create_qp(lb.a.create_cq())
    assert qp.state is QPState.RESET
    with pytest.raises(InvalidState, match="cannot go from RESET to RTS"):
        qp.modify(QPState.RTS)
    with pytest.raises(InvalidState, match="needs RTS"):
        qp.post_send(SendWR(1, WROpcode.RDMA_WRITE, [], 0, 1))
    with pytest.raises(InvalidState, match="needs INIT"):
        qp.post_recv(RecvWR(1))
    qp.modify(QPState.INIT)
    qp.post_recv(RecvWR(1))  # receives may be posted before RTR
    with pytest.raises(InvalidArgument, match="remote_qpn"):
        qp.modify(QPState.RTR, remote_qpn=-1)
    qp.modify(QPState.RTR, remote_qpn=5)
    with pytest.raises(InvalidState, match="needs RTS"):
        qp.post_send(SendWR(1, WROpcode.RDMA_WRITE, [], 0, 1))
    qp.modify(QPState.RTS)
    assert qp.responder is not None and qp.responder.recv_queue[0].wr_id == 1


@pytest.mark.parametrize(
    ("attr", "match"),
    [
        (QPAttr(mpr=0), "QPAttr.mpr"),
        (QPAttr(timeout=25), "QPAttr.timeout"),
        (QPAttr(retry_linear=8), "QPAttr.retry_linear"),
        (QPAttr(retry_exp=26), "QPAttr.retry_exp"),
        (QPAttr(mtu=100), "QPAttr.mtu"),
        (QPAttr(ev_profile=EVProfile(planes=0)), "EVProfile.planes"),
        (QPAttr(ev_profile=EVProfile(explicit=[1, 1])), "EVProfile.explicit"),
        (QPAttr(cc_profile=CCProfile(name="cubic")), "unknown congestion control 'cubic'"),
        (QPAttr(cc_profile=CCProfile(link_bps=0)), "CCProfile.link_bps"),
        (QPAttr(cc_profile=CCProfile(params={"gamma": 7})), r"params\['gamma'\]"),
    ],
)
def test_bad_attributes_name_the_field(attr, match) -> None:
    lb = Loopback()
    qp = lb.a.alloc_pd().create_qp(lb.a.create_cq())
    with pytest.raises(InvalidArgument, match=match):
        qp.modify(QPState.INIT, attr=attr)
        qp.modify(QPState.RTR, remote_qpn=1)


def test_memory_region_arguments() -> None:
    lb = Loopback()
    pd = lb.a.alloc_pd()
    with pytest.raises(InvalidArgument, match="length"):
        pd.reg_mr(0)
    with pytest.raises(InvalidArgument, match="buffer: holds 10 bytes"):
        pd.reg_mr(11, buffer=bytearray(10))
    with pytest.raises(InvalidArgument, match="read-only"):
        pd.reg_mr(4, buffer=memoryview(b"abcd"))
    mr = pd.reg_mr(64)
    pd.dereg_mr(mr)
    with pytest.raises(InvalidArgument, match="not a registered"):
        pd.dereg_mr(mr)


def test_faults_validation() -> None:
    with pytest.raises(InvalidArgument, match="Faults.loss"):
        Loopback(Faults(loss=1.5))


def test_attributes_are_staged_over_init_rtr_rts() -> None:
    lb = Loopback()
    qp = lb.a.alloc_pd().create_qp(lb.a.create_cq())
    with pytest.raises(InvalidState, match="QPAttr.mpr_send: set when moving to RTS, not INIT"):
        qp.modify(QPState.INIT, mpr_send=4)
    with pytest.raises(InvalidArgument, match="QPAttr.bogus: no such attribute"):
        qp.modify(QPState.INIT, bogus=1)
    assert qp.state is QPState.RESET  # a refused modify changes nothing
    qp.modify(QPState.INIT, cc_profile=CCProfile(name="fixed"))
    with pytest.raises(InvalidState, match="QPAttr.cc_profile: set when moving to INIT, not RTR"):
        qp.modify(QPState.RTR, remote_qpn=1, cc_profile=CCProfile())
    with pytest.raises(InvalidState, match="QPAttr.timeout: set when moving to RTS, not RTR"):
        qp.modify(QPState.RTR, remote_qpn=1, timeout=3)
    with pytest.raises(InvalidArgument, match="QPAttr.mpr_recv"):
        qp.modify(QPState.RTR, remote_qpn=1, mpr_recv=0)
    with pytest.raises(InvalidArgument, match="attr: a whole QPAttr is given at INIT"):
        qp.modify(QPState.RTR, attr=QPAttr(), remote_qpn=1)
    assert qp.state is QPState.INIT
    qp.modify(QPState.RTR, remote_qpn=1, mpr_recv=2, max_wimm_recv=3)
    with pytest.raises(InvalidState, match="QPAttr.max_wimm_recv: set when moving to RTR, not RTS"):
        qp.modify(QPState.RTS, max_wimm_recv=4)
    qp.modify(QPState.RTS, mpr_send=8, max_wimm_send=2, timeout=5, retry_exp=0)
    assert qp.cc is not None and qp.requester is not None and qp.responder is not None
    assert qp.cc.name == "fixed"
    assert qp.responder.window == 256 and qp.responder.max_wimm == 3
    assert qp.requester.window_psns == 1024 and qp.requester.timeout_ps == 1_024_000 << 5
    assert qp.requester.max_retries == 7
    qp.modify(QPState.RTS, timeout=9, retry_exp=25)  # RTS -> RTS: the send side again
    assert qp.requester.timeout_ps == 1_024_000 << 9 and qp.requester.max_retries is None
    for i in range(2):
        qp.post_send(SendWR(i, WROpcode.RDMA_WRITE_WITH_IMM, [], 0, 1, imm_data=i))
    with pytest.raises(ResourceExhausted, match="max_wimm_send"):
        qp.post_send(SendWR(3, WROpcode.RDMA_WRITE_WITH_IMM, [], 0, 1, imm_data=3))


def test_send_and_receive_windows_are_separate() -> None:
    lb = Loopback()
    qa, _qb = lb.connect(QPAttr(mpr_send=4, mpr_recv=1, max_wimm_send=5, max_wimm_recv=7))
    assert qa.requester is not None and qa.responder is not None
    assert qa.requester.window_psns == 512 and qa.responder.window == 128
    assert qa.responder.max_wimm == 7
    with pytest.raises(InvalidArgument, match="QPAttr.mpr_send"):
        QPAttr(mpr_send=513).validate()
