"""Structural speed properties of the simulator: cost that must not grow with QPs.

Timings are benchmarks (``benchmarks/sim_speed.py``), not tests; these check
the structure that keeps the cost per packet independent of how many QPs a
host has, and that the engine's collector tuning is undone after a run.
"""

from __future__ import annotations

import gc
import random
from typing import Any

import pytest

from openmrc.baselines.experiment import BaselineExperiment, BaselineHost
from openmrc.sim.engine import GC_THRESHOLD, Simulator
from openmrc.sim.experiment import Experiment, TransportConfig
from openmrc.sim.factory import make_experiment
from openmrc.topology import ClosSpec
from openmrc.workloads import FlowSpec, all_to_all, permutation
from openmrc.workloads.collectives import allreduce, alltoall


def test_host_activity_polls_only_the_flows_that_completed_something(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 8 hosts, 7 flows each of 4 messages: every ACK a host takes used to poll
    # the completion queues of all 7 of its flows.
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=4, t1s=4)
    exp = Experiment(spec, seed=1)
    exp.add_flows(all_to_all(list(range(8)), 64 << 10, message=16 << 10))
    polls = 0
    real = Experiment._drain_completions

    def counting(self: Experiment, flow: object) -> list[str | None]:
        nonlocal polls
        polls += 1
        return real(self, flow)  # type: ignore[arg-type]

    monkeypatch.setattr(Experiment, "_drain_completions", counting)
    result = exp.run()
    assert result.all_ok
    messages = 56 * 4
    # one look per completion at most (plus one per flow at its start)
    assert polls <= messages + 56


def _count_host_hook(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Count the calls of the experiment's host hook ``name`` (set before it is built)."""
    calls = [0]
    real = getattr(Experiment, name)

    def counting(self: Experiment, host: object, now: int) -> None:
        calls[0] += 1
        real(self, host, now)

    monkeypatch.setattr(Experiment, name, counting)
    return calls


def test_data_arrivals_call_the_experiment_only_while_the_sampler_sleeps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No flow is watched at its receiver (no collective waits on it), so a data
    # arrival matters to the experiment only if it wakes the sleeping sampler,
    # and here the second flow's start wakes it after the idle gap: no call at
    # all (there was one per data packet).
    calls = _count_host_hook(monkeypatch, "_data_arrived")
    exp = Experiment(ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2), seed=1)
    exp.add_flows([FlowSpec(0, 3, 256 << 10), FlowSpec(1, 2, 256 << 10, start_ps=2_000_000_000)])
    result = exp.run()
    assert result.all_ok
    assert sum(p.tx_pkts for ports in exp.fabric.host_ports for p in ports) > 100
    assert calls[0] == 0
    # and the sampler did sleep through the gap and wake for the second flow
    assert result.flows[1].goodput_gbps > 0


def test_host_input_calls_the_experiment_only_when_a_send_completed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every ACK and timer a host takes used to call the experiment (an
    # interpreted call), which then found no completion to look at most times.
    calls = _count_host_hook(monkeypatch, "_activity")
    exp = Experiment(ClosSpec(planes=1, t0s=2, hosts_per_t0=4, t1s=4), seed=1)
    exp.add_flows(permutation(8, 256 << 10, random.Random(1), message=64 << 10))
    result = exp.run()
    assert result.all_ok
    completions = 8 * 4
    acks = sum(
        q.requester.stats.rx_sacks for h in exp.hosts for q in h.ctx.qps.values() if q.requester
    )
    assert acks > 4 * completions  # (the calls there were)
    assert calls[0] <= 2 * completions + 8


def test_the_sampler_reads_only_the_flows_that_can_move(monkeypatch: pytest.MonkeyPatch) -> None:
    # a ring all-reduce over 8 ranks: 112 transfers, few of them running at any tick;
    # the sampler used to read every flow at every tick (flows x ticks)
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=4, t1s=4)
    interval = 1_000_000  # 1 us: many ticks
    exp = Experiment(spec, seed=1, sample_interval_ps=interval)
    exp.add_collective(allreduce(8, 1 << 20))
    reads = [0]
    real = Experiment._received_bytes

    def counting(self: Experiment, flow: object) -> int | None:
        reads[0] += 1
        return real(self, flow)  # type: ignore[arg-type]

    monkeypatch.setattr(Experiment, "_received_bytes", counting)
    result = exp.run()
    assert result.all_ok
    sampled = reads[0] - len(result.flows)  # collecting the results reads each once
    # each flow is read at the ticks from its start until the one that sees it full
    bound = sum(
        (f.rx_finish_ps - f.started_ps) // interval + 2
        for f in result.flows
        if f.rx_finish_ps is not None and f.started_ps is not None
    )
    assert sampled <= bound
    ticks = result.sampling["ticks"]
    assert bound < len(result.flows) * ticks // 4  # what reading every flow would cost
    # and every flow's series still has an entry per tick, zeros where it was not read
    every = ticks + result.sampling["skipped"]
    assert all(len(v) == every for v in result.goodput_series.values())


def test_run_tunes_the_collector_and_restores_it() -> None:
    before = gc.get_threshold()
    sim = Simulator()
    seen: list[tuple[int, ...]] = []
    sim.schedule(5, lambda: seen.append(gc.get_threshold()))
    sim.run()
    assert seen == [GC_THRESHOLD]
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_an_experiment_reads_its_results_with_the_collector_paused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # after the run the fabric and hosts are the collector's again; reading the
    # results must not set it walking them (a full collection at 8192 hosts)
    exp = Experiment(ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2), seed=1)
    exp.add_flows([FlowSpec(0, 3, 64 << 10)])
    collect = Experiment._collect
    enabled: list[bool] = []

    def watched(self: Experiment, wall: float) -> Any:
        enabled.append(gc.isenabled())
        return collect(self, wall)

    monkeypatch.setattr(Experiment, "_collect", watched)
    was = gc.isenabled()
    try:
        assert exp.run().all_ok
        assert enabled == [False]
        assert gc.isenabled() == was
    finally:
        gc.unfreeze()


def test_adding_flows_opens_qps_with_the_collector_off_and_freezes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a flow's QPs are long-lived objects, millions at 8192 hosts: the collector must
    # not walk them as they are made (engine.setup_gc), and they join the frozen set-up
    exp = Experiment(ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2), seed=1)
    open_qps = Experiment._open_qps_of
    opened: list[tuple[bool, int]] = []

    def watched(self: Experiment, flow: Any, now: int) -> Any:
        opened.append((gc.isenabled(), gc.get_threshold()[0]))
        return open_qps(self, flow, now)

    monkeypatch.setattr(Experiment, "_open_qps_of", watched)

    def add_from_an_event() -> None:  # inside a run: the run's collector settings stay
        exp.add_flow(FlowSpec(2, 1, 4096, start_ps=exp.sim.now))

    was = gc.isenabled()
    gc.enable()
    try:
        frozen = gc.get_freeze_count()
        exp.add_flows([FlowSpec(0, 3, 64 << 10), FlowSpec(1, 2, 64 << 10)])
        assert [o[0] for o in opened] == [False, False]
        assert gc.get_freeze_count() > frozen and gc.isenabled()
        exp.sim.schedule(1_000, add_from_an_event)
        assert exp.run().all_ok
        # in the run: the collector as the run set it (on, at its threshold)
        assert opened[2] == (True, GC_THRESHOLD[0])
    finally:
        gc.unfreeze()
        if not was:
            gc.disable()


# ----- the RoCE baseline's NIC -------------------------------------------------------------
class _FakeSender:
    """What the NIC's timeout bookkeeping reads of a RoCE sender: its QP and deadline."""

    def __init__(self, qp: int) -> None:
        self.qp = qp
        self.when: int | None = None
        self.asked = 0

    def deadline(self) -> int | None:
        return self.when

    def ready(self) -> bool:
        self.asked += 1
        return False


def test_roce_nic_finds_its_timeouts_as_a_scan_of_every_qp_would() -> None:
    # The NIC keeps the senders' deadlines in a heap of lower bounds instead of
    # reading all its QPs per event; a random history of deadlines set, moved
    # later without a note (an ACK's usual move), moved earlier, cleared, QPs
    # retired and timers fired must give the scan's answers at every step.

    exp = make_experiment(
        ClosSpec(planes=1, t0s=2, hosts_per_t0=1, t1s=1), transport=TransportConfig(name="roce")
    )
    host = exp.hosts[0]
    assert isinstance(host, BaselineHost)
    rng = random.Random(5)
    senders = [_FakeSender(qp) for qp in range(1, 41)]
    live = list(senders)
    for sender in senders:
        host.add_sender(sender, 0)  # type: ignore[arg-type]
    now = 0
    for _step in range(3000):
        op = rng.random()
        pick = rng.choice(live) if live else None
        if pick is not None and op < 0.35:
            pick.when = now + rng.randrange(1, 500)  # set, or moved either way
            host.note_timeout(pick)  # type: ignore[arg-type]
        elif pick is not None and op < 0.55 and pick.when is not None:
            pick.when += rng.randrange(1, 300)  # later, as an ACK moves it: no note needed
        elif pick is not None and op < 0.6:
            pick.when = None
        elif pick is not None and op < 0.63:
            live.remove(pick)
            host.retire(pick)  # type: ignore[arg-type]
        else:
            now += rng.randrange(0, 60)
            expect = sorted(
                (s for s in live if s.when is not None and s.when <= now), key=lambda s: s.qp
            )
            due: list[Any] = host.due_senders(now)
            assert due == expect
            for s in due:  # the timer: a new deadline, or none
                s.when = now + rng.randrange(1, 400) if rng.random() < 0.7 else None
                host.note_timeout(s)  # type: ignore[arg-type]
        armed = [s.when for s in live if s.when is not None]
        assert host.next_timeout() == (min(armed) if armed else None)


def test_roce_nic_does_not_scan_its_qps_when_none_has_a_packet_waiting() -> None:
    # A NIC with 200 QPs of which none has a packet to send: kicking it (its port
    # free, then busy) reads none of them; the host counts the waiting QPs itself.
    exp = make_experiment(
        ClosSpec(planes=1, t0s=2, hosts_per_t0=1, t1s=1), transport=TransportConfig(name="roce")
    )
    host = exp.hosts[0]
    assert isinstance(host, BaselineHost)
    senders = [_FakeSender(qp) for qp in range(1, 201)]
    for sender in senders:
        host.add_sender(sender, 0)  # type: ignore[arg-type]
    before = sum(s.asked for s in senders)
    host.kick(0)
    host.ports[0].busy_until = 10**6
    host.kick(1)
    assert sum(s.asked for s in senders) == before


def _count_rx_checks(monkeypatch: pytest.MonkeyPatch, cls: type[Experiment]) -> list[int]:
    """Count the calls of ``cls._rx_complete`` (whether a watched flow has arrived)."""
    checks = [0]
    real = cls._rx_complete

    def counting(self: Experiment, flow: object) -> bool:
        checks[0] += 1
        return real(self, flow)  # type: ignore[arg-type]

    monkeypatch.setattr(cls, "_rx_complete", counting)
    return checks


def test_roce_data_arrival_checks_only_its_own_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    # A data packet can only complete the flow whose QP it reached: the experiment
    # checks that one, not every flow arriving at the host (63 per packet in a
    # 64-rank all-to-all; here 7, with 4 QPs each).

    checks = _count_rx_checks(monkeypatch, BaselineExperiment)
    arrivals = _count_host_hook(monkeypatch, "_data_arrived")
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=4, t1s=4)
    exp = make_experiment(spec, transport=TransportConfig(name="roce", roce={"qps": 4}))
    exp.add_collective(alltoall(8, 8 * (64 << 10)), message=16 << 10)
    result = exp.run()
    assert result.all_ok
    # the host calls the experiment at least once per message placed (four 16 KiB
    # messages per transfer; every packet while the sampler sleeps)
    assert arrivals[0] >= 56 * 4
    assert 0 < checks[0] <= arrivals[0]


def _mrc_alltoall(channels: int, message: int = 16 << 10) -> Experiment:
    """8 MRC hosts in an all-to-all over long-lived connections (NCCL's p2p channels),
    each peer's bytes cut into chunks (one message each): several transfers share each
    connection's QPs."""
    spec = ClosSpec(planes=2, t0s=2, hosts_per_t0=4, t1s=2)
    exp = Experiment(spec, seed=3)
    coll = alltoall(8, 8 * (64 << 10), channels=channels, chunk_bytes=message, slots=2)
    exp.add_collective(coll, message=message)
    return exp


def test_mrc_data_arrival_checks_only_the_flows_on_its_qp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A data packet can only complete a flow on the QP it reached, and only if it
    # placed a message: the experiment checks those flows then (a connection's chunks
    # in flight: at most 2 here), not every flow arriving at the host at every packet
    # (up to 14 here, hundreds in the paper's 64-rank all-to-all).
    checks = _count_rx_checks(monkeypatch, Experiment)
    monkeypatch.setattr(Experiment, "_data_every", lambda self, everywhere: True)
    arrivals = _count_host_hook(monkeypatch, "_data_arrived")
    result = _mrc_alltoall(channels=1).run()
    assert result.all_ok
    assert arrivals[0] >= 56 * 16  # every data packet of the 56 peers' transfers
    # and only at a packet that placed a message (224 of them, 4 per peer), or the
    # first packet on each of the 56 receiving QPs
    assert 0 < checks[0] <= 2 * 224 + 56


def test_mrc_data_arrivals_call_the_experiment_only_when_a_message_is_placed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # While the sampler is awake, a data packet that placed no message cannot have
    # completed a flow: the host calls the experiment (an interpreted call) only after
    # a packet that placed one, not after every data packet.
    arrivals = _count_host_hook(monkeypatch, "_data_arrived")
    exp = _mrc_alltoall(channels=1)
    result = exp.run()
    assert result.all_ok
    qps = [q for h in exp.hosts for q in h.ctx.qps.values()]
    data = sum(q.stats.rx_data_packets for q in qps)
    placed = sum(q.stats.rx_messages for q in qps)
    assert placed == 224 and data >= 4 * placed  # 16 KiB messages of 4 packets
    assert 0 < arrivals[0] <= placed
    # (what the hosts compare around a delivery: each context's count of them)
    assert sum(h.ctx.rx_placed for h in exp.hosts) == placed


def test_hosts_call_after_every_data_packet_while_the_sampler_is_not_armed() -> None:
    # A sleeping sampler is woken by any arrival (the first data packet, not the first
    # that places a message): the hosts' filter is off then, and on once it is armed.
    exp = _mrc_alltoall(channels=1)
    hosts = [h for h in exp.hosts if h is not None]
    exp.sampler.armed = False
    exp._host_hooks(everywhere=True)
    assert all(h.on_data is not None and h.data_every for h in hosts)
    exp.sampler.armed = True
    exp._host_hooks(everywhere=False)
    assert all(not h.data_every for h in hosts)
    exp.sampler.armed = False  # (asleep: the last hooks set by the sampler said so)
    exp._host_hooks(everywhere=False)
    assert all(h.data_every for h in hosts)


@pytest.mark.parametrize(("channels", "message"), [(1, 16 << 10), (2, 16 << 10), (2, 4 << 10)])
def test_mrc_flows_complete_when_a_check_of_every_flow_says(
    monkeypatch: pytest.MonkeyPatch, channels: int, message: int
) -> None:
    # The narrowed check finds every completion at the packet a check of every
    # watched flow at every arrival finds it: the same arrival times to the ps.
    # (4 KiB chunks of one message each: every data packet ends a transfer, so a
    # look skipped wrongly shows)
    narrowed = _mrc_alltoall(channels, message).run()
    monkeypatch.setattr(Experiment, "_rx_candidates", lambda self, host, flows: flows)
    # (and after every data packet, not only those that placed a message)
    monkeypatch.setattr(Experiment, "_data_every", lambda self, everywhere: True)
    everything = _mrc_alltoall(channels, message).run()
    assert narrowed.all_ok and everything.all_ok
    got = [f.rx_finish_ps for f in narrowed.flows]
    assert got == [f.rx_finish_ps for f in everything.flows]
    assert all(t is not None for t in got)


def test_roce_nic_never_scans_a_qp_given_no_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # Ring steps of one message on connections of 16 QPs: the 15 QPs a step leaves
    # empty used to stay in the NIC's scan for good (nothing retires a QP never
    # ACKed), thousands per host by the end of a 64-rank ring.
    from openmrc.baselines.roce import RoceSender

    asked: set[int] = set()
    real = RoceSender.ready

    def counting(self: RoceSender) -> bool:
        asked.add(id(self))
        return real(self)

    monkeypatch.setattr(RoceSender, "ready", counting)
    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=4, t1s=4)
    exp = make_experiment(spec, transport=TransportConfig(name="roce", roce={"qps": 16}))
    exp.add_collective(allreduce(8, 8 * 2 * (64 << 10)), message=64 << 10)
    result = exp.run()
    assert result.all_ok
    flows = exp.flows
    empty = [s for f in flows for s in f.senders if not s._segs]  # type: ignore[attr-defined]
    used = [s for f in flows for s in f.senders if s._segs]  # type: ignore[attr-defined]
    assert len(empty) > 4 * len(used) > 0
    assert all(id(s) in asked for s in used)
    assert not any(id(s) in asked for s in empty)


class _PacedSender:
    """A RoCE sender as the NIC's scan reads it: packets left, and a pacer."""

    def __init__(self, qp: int, packets: int, next_tx: int) -> None:
        self.qp = qp
        self.packets = packets
        self.next_tx = next_tx

    def deadline(self) -> int | None:
        return None

    def ready(self) -> bool:
        return self.packets > 0

    def next_send_ps(self, now: int | None = None) -> int:
        return self.next_tx

    def build(self, now: int) -> _PacedSender:
        self.packets -= 1
        return self


class _FreePort:
    """A host port that is always free and records what the NIC gives it."""

    def __init__(self) -> None:
        self.up = True
        self.busy_until = 0
        self.data_bytes = 0
        self.sent: list[_PacedSender] = []

    def enqueue(self, pkt: _PacedSender) -> None:
        self.sent.append(pkt)

    def accept(self, pkt: _PacedSender, via: object) -> None:
        """What the NIC calls for a packet it sends (``via`` None: its own)."""
        self.sent.append(pkt)


class _ListRoundRobin:
    """The NIC's round-robin over a list that holds every QP, the empty ones too."""

    def __init__(self) -> None:
        self.qps: list[_PacedSender | None] = []  # None: a QP given no message
        self.rr = 0

    def kick(self, now: int) -> list[_PacedSender]:
        out: list[_PacedSender] = []
        while True:
            n = len(self.qps)
            chosen = None
            for i in range(n):
                q = self.qps[(self.rr + i) % n]
                if q is not None and q.ready() and q.next_tx <= now:
                    chosen = q
                    self.rr = (self.rr + i + 1) % n
                    break
            if chosen is None:
                return out
            out.append(chosen.build(now))

    def retire(self, snd: _PacedSender) -> None:
        j = self.qps.index(snd)
        del self.qps[j]
        if j < self.rr:
            self.rr -= 1
        self.rr = self.rr % len(self.qps) if self.qps else 0


def test_roce_nic_serves_qps_in_the_order_of_a_list_holding_the_empty_ones() -> None:
    # The QPs given no message are only passed over (BaselineHost.pass_over): a random
    # history of QPs registered, passed over, paced, drained and retired must give the
    # packets in the order of a round-robin over a list that holds the empty QPs.
    exp = make_experiment(
        ClosSpec(planes=1, t0s=2, hosts_per_t0=1, t1s=1), transport=TransportConfig(name="roce")
    )
    host = exp.hosts[0]
    assert isinstance(host, BaselineHost)
    port = _FreePort()
    host.ports = [port]  # type: ignore[list-item]
    model = _ListRoundRobin()
    rng = random.Random(11)
    live: list[_PacedSender] = []
    now = 0
    qp = 0
    for _step in range(4000):
        op = rng.random()
        if op < 0.25:
            qp += 1
            snd = _PacedSender(qp, rng.randrange(1, 4), now + rng.randrange(0, 3))
            host.add_sender(snd, 0)  # type: ignore[arg-type]
            model.qps.append(snd)
            live.append(snd)
        elif op < 0.45:
            host.pass_over(0)
            model.qps.append(None)
        elif op < 0.6 and live:
            done = [s for s in live if not s.packets]
            if done:
                snd = rng.choice(done)
                live.remove(snd)
                host.retire(snd)  # type: ignore[arg-type]
                model.retire(snd)
        elif op < 0.7 and live:
            snd = rng.choice(live)
            snd.packets += rng.randrange(1, 3)
            snd.next_tx = now + rng.randrange(0, 3)
            host.refresh(snd)  # type: ignore[arg-type]
        else:
            now += rng.randrange(0, 2)
            expect = model.kick(now)
            for snd in expect:  # the model drained them: undo, the NIC drains them again
                snd.packets += 1
            port.sent.clear()
            host.kick(now)
            assert [s.qp for s in port.sent] == [s.qp for s in expect]


def test_an_ordinary_run_does_not_import_the_partitioned_runs_module() -> None:
    # make_experiment looks for a requested partitioned run only in a module imported
    # already (whoever requests one imports it): an ordinary run's set-up does not pay
    # for importing it (a fresh interpreter: this one's tests may have imported it)
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).resolve().parents[2] / "src")
    code = (
        "import sys\n"
        "from openmrc.sim.factory import make_experiment\n"
        "from openmrc.topology import ClosSpec\n"
        "from openmrc.workloads import permutation\n"
        "import random\n"
        "exp = make_experiment(ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2))\n"
        "exp.add_flows(permutation(4, 8192, random.Random(1)))\n"
        "assert exp.run().all_ok\n"
        "print(sorted(m for m in ('openmrc.sim.partition', 'ctypes', 'pickle') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert out.stdout.split("\n")[-2] == "[]", out.stdout


def test_a_requested_partitioned_run_still_builds_its_own_experiment() -> None:
    from openmrc.sim import partition

    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=2)
    partition.request(partition.LocalComm())
    try:
        exp = make_experiment(spec)
    finally:
        partition.request(None)
    assert isinstance(exp, partition.PartitionedExperiment)
    assert type(make_experiment(spec)) is Experiment
