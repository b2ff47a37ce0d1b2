"""Training jobs: flow level against packet level, and how long the bundled iterations take.

Cases (``--case``, repeatable; default ``agreement``):

* ``agreement`` - every small job both models can run (the 8-GPU calibration
  job of tests/pipeline/test_training.py, scenarios/training/chakra-8.toml and
  aicb-16.toml; ``--big`` adds gpt-1b-64.toml), MRC and RoCE, without and with
  a T0-T1 link failure, per seed (``--seeds``, default 1-2): step time at
  packet level and at flow level, and every kind of transfer's mean duration
  in both (docs/training.md publishes the tables);
* ``roce-seeds`` - RoCE without and with the fault on the same jobs over
  ``--seeds`` (the ECMP draws differ between the models, so RoCE is compared
  as a mean over seeds): per seed and the means;
* ``packet-noise`` - the packet level against itself: RoCE without and with the
  fault on the same jobs, per seed, run again ``--flips`` times (default 8) on the
  same paths and timeouts (``BaselineExperiment.replay_qp_draws``) with only the
  switches' RED/ECN coin flips redrawn (``Experiment.reseed_ports``): the packet
  step's mean, spread and range per seed, and the flow level on the packet's draws
  against the seed's run and against that mean;
* ``roce-64`` - scenarios/training/gpt-1b-64.toml with RoCE and its own failure at
  packet and flow level per seed, and the flow level on the packet run's ECMP
  draws, with the packet run's QPs on the dead link (minutes per seed);
* ``dcqcn`` - ``n`` RoCE QPs of one size through one T0-T1 link: the share of
  the link they used at packet level and at flow level (n = 1, 2, 4, 8; 1 to
  16 MiB);
* ``dcqcn-series`` - two RoCE QPs that start together through one 100 Gb/s
  T0-T1 link, 512 KiB and 16 MiB each: one QP's goodput per 10 us at packet
  level (``results.json``'s goodput series) and in the flow level's DCQCN
  trajectory (openmrc.flow.dcqcn), and both end times;
* ``dcqcn-arrivals`` - RoCE QPs that reach one congested T0-T1 link at different
  times or from one NIC (a QP arriving in the others' DCQCN stall, after their
  recovery, eight arriving 12 us apart, two NICs of four QPs each, two pairs
  80 us apart): each QP's end at packet level and at flow level, and the
  difference;
* ``campaign-check`` - a campaign's flow-level iterations re-run at packet level
  (openmrc.pipeline.campaign_check): the job of ``--job`` (default: gpt-1b-64.toml's
  64 GPUs and fabric with a smaller GPT, 4 layers of hidden 1024, 2 micro-batches
  of 1,024 tokens, so that a packet iteration takes seconds) for 3 s of campaign time, a T0-T1 link of plane 0 failing 1 s in
  (inside an iteration) and repaired 2 s in, RoCE's routing converging in 200 us;
  every iteration the campaign simulated (each state's steady one and every one
  the failure or the repair falls into), MRC and RoCE, per seed: flow step,
  packet step, the difference;
* ``packet-64`` - scenarios/training/gpt-1b-64.toml at packet level with MRC
  (the issue's budget: under 10 minutes);
* ``flow-1024`` / ``flow-1024-roce`` - scenarios/training/gpt3-175b-1024.toml
  at flow level with MRC / RoCE (budget: under 1 minute for the iteration);
* ``flow-moe`` / ``flow-moe-roce`` - scenarios/training/moe-ep-128.toml at flow
  level;
* ``flow-8192`` / ``flow-32768`` / ``flow-131072`` (and ``flow-scale --gpus N``) -
  scenarios/training/gpt3-175b-1024.toml widened by DP to N GPUs (TP 8, PP 8, DP
  N / 64, 32 micro-batches per replica, its T1 link failure) on the paper's switch
  radix (two tiers of 512-port switches: 256 hosts per T0, 256 T1s, N / 256 T0s
  per plane, 8 planes), one iteration at flow level, MRC and RoCE (``--transport``:
  one), each in a process of its own: step time, CPU seconds (all, and the model's
  run alone) and the process's peak resident memory (the goal at 131,072 GPUs:
  5 CPU minutes and 16 GB each).  The job is folded (openmrc.flow.fold: the DP
  blocks a fault touches and ``--fold N`` blocks either side; ``--fold -1``: every
  replica);
* ``flow-moe-8192`` / ``flow-moe-32768`` / ``flow-moe-131072`` (``flow-scale --moe``) -
  the same with scenarios/training/moe-ep-128.toml placed packed (TP 8, PP 2, EP 8
  across servers, 8 micro-batches per replica, its T1 link failure); ``--micro N``:
  N micro-batches per replica instead (a shorter iteration of the same shape);
* ``fold-check`` - the GPT-like (``--moe``: MoE) job widened to ``--gpus`` on
  ``--hpt`` hosts per T0 (default 32), run whole and folded: both steps and how far
  apart every kept task starts and ends (MRC: 0 ps).
* ``campaign-plan`` - scenarios/training/campaign-131072.toml (folded) for
  ``--hours`` (default 24) per seed of ``--seeds``, not simulated: the failures,
  states, iterations the campaign would simulate and the blocks their folds keep
  (what a day of the whole cluster costs, in blocks simulated), the replicas those
  blocks run with ``campaign.fold_replicas``, in blocks' worth (``replicas_run_*``), and
  the runs and blocks with ``campaign.fold_groups`` (``fold_groups_*``); MRC, and
  RoCE's with its restarts estimated (a host link down: the job restarts);
* ``campaign-profile`` - one folded iteration of that campaign (``--transport``,
  default RoCE; the failure-free state: 2 blocks, 4,096 GPUs) under cProfile: the
  campaign's set-up, the folded model's build, its run, and where the run's time
  goes (the run loop's callees, each with what it takes when the loop calls it; the
  DCQCN trajectories and the ECMP draws inside them).  Run it on the pure-Python
  sources: a compiled flow level is one opaque call to cProfile;
* ``campaign-restart-cost`` - what a RoCE restart's iteration costs and how much of
  it comes after the failure: that campaign on 2,048 GPUs (the results' 2,048-GPU
  day: 64 T0s of 32 hosts, DP 32), folded, a host's NIC port failing at 10, 50 and
  90 % of the step: CPU s of the whole run (the flow level runs until the last dead
  QP's retries are out: ``gives_up_s``), of the same run stopped at the failure, and
  stopped at its first QP error (``FluidModel.run(stop_at_error=True)``:
  ``first_error_s``), with the three runs' events;

``--ring-messages`` runs the flow level with ``FluidModel.ring_messages`` (RoCE's
ring steps as messages of their own, shared per message at a NIC port as the
packet level's round-robin over QPs does; off by default).  ``--ring-weights`` runs
it with ``FluidModel.ring_weights`` (RoCE's ring hop flows weighted by their messages
ready, weighted max-min; off by default).

Each case prints JSON lines (step times, wall and CPU seconds); ``--out FILE``
also writes them all to one JSON file.  Not a test: it takes minutes.

    python benchmarks/training.py --case agreement --seeds 1-2
    python benchmarks/training.py --case flow-1024 --case packet-64 --out timing.json
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import hashlib
import itertools
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openmrc.pipeline.jobrun import packet_rows, run_flow  # noqa: E402
from openmrc.pipeline.scenario import parse, read_data  # noqa: E402
from openmrc.workloads.jobs.config import parse_jobs  # noqa: E402
from openmrc.workloads.jobs.examples import CALIBRATION_SCENARIO  # noqa: E402

SMALL: dict[str, Any] = CALIBRATION_SCENARIO


def _scenario_data(name: str) -> tuple[dict[str, Any], Path]:
    p = ROOT / "scenarios" / "training" / name
    return read_data(p), p.parent


def packet_step(data: dict[str, Any], base: Path | None) -> tuple[float | None, float]:
    """Step time (us) of the scenario's first job at packet level, and wall seconds."""
    d = copy.deepcopy(data)
    d.setdefault("run", {})["mode"] = "packet"
    sc = parse(d, base_dir=base)
    t = time.perf_counter()
    exp = sc.build()
    res = exp.run()
    rows = packet_rows(sc.spec, sc.jobs, sc.job_state, res)
    return rows[0]["step_time_us"], time.perf_counter() - t


def flow_step(data: dict[str, Any], base: Path | None) -> tuple[float | None, float]:
    """Step time (us) of the scenario's first job at flow level, and wall seconds."""
    d = copy.deepcopy(data)
    d.setdefault("run", {})["mode"] = "flow"
    sc = parse(d, base_dir=base)
    _res, rows, wall = run_flow(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults)
    return rows[0]["step_time_us"], wall


def _per_collective(
    graph: Any, packet: tuple[list[Any], list[Any]], flow: tuple[list[Any], list[Any]]
) -> dict[str, dict[str, float]]:
    """Mean duration (us) of every kind of transfer (kind, ranks, bytes) in both models."""
    acc: dict[str, list[float]] = {}
    for i, t in enumerate(graph.tasks):
        if t.kind == "compute":
            continue
        ps, pe = packet[0][i], packet[1][i]
        fs, fe = flow[0][i], flow[1][i]
        if None in (ps, pe, fs, fe):
            continue
        key = f"{t.kind} n={len(t.ranks)} {t.size} B"
        a = acc.setdefault(key, [0, 0.0, 0.0])
        a[0] += 1
        a[1] += (pe - ps) / 1e6
        a[2] += (fe - fs) / 1e6
    return {
        k: {
            "count": c,
            "packet_us": round(p / c, 3),
            "flow_us": round(f / c, 3),
            "diff_pct": round(100 * (f - p) / p, 2) if p else 0.0,
        }
        for k, (c, p, f) in sorted(acc.items())
    }


def packet_draws(exp: Any, seed: int) -> Any:
    """The packet run's ECMP draws as the flow level's ``path_hash``: for every RoCE QP,
    the 64-bit hash its source T0 computes from its 5-tuple (the UDP source port the
    packet run drew for the connection's QP), keyed by (src, dst, QP index).  One job
    per scenario here: the flow level's connection is the job, the packet level's the
    job and host pair, so (src, dst, QP) names the same QP in both."""
    from openmrc.flow.model import ecmp_hash

    fab, spec = exp.fabric, exp.spec
    table: dict[tuple[int, int, int], int] = {}
    for flow in exp.flows:
        for i, snd in enumerate(getattr(flow, "senders", [])):
            sw = fab.switches[fab.topology.t0_name(i % spec.planes, snd.src // spec.hosts_per_t0)]
            table[(snd.src, snd.dst, i)] = sw.ecmp_index(snd.src, snd.dst, snd.sport, 1 << 64)

    def path_hash(src: int, dst: int, conn: str, qp: int) -> int:
        h = table.get((src, dst, qp))
        return ecmp_hash(seed, src, dst, conn, qp) if h is None else h

    return path_hash


def packet_ack_draws(exp: Any, seed: int) -> Any:
    """The packet run's reverse-path draws as the flow level's ``ack_hash``: for every
    RoCE QP, the 64-bit hash its receiver's T0 computes from its ACKs' 5-tuple (the
    receiver, the sender, the QP's UDP source port), keyed as :func:`packet_draws`."""
    from openmrc.flow.model import ecmp_hash

    fab, spec = exp.fabric, exp.spec
    table: dict[tuple[int, int, int], int] = {}
    for flow in exp.flows:
        for i, snd in enumerate(getattr(flow, "senders", [])):
            sw = fab.switches[fab.topology.t0_name(i % spec.planes, snd.dst // spec.hosts_per_t0)]
            table[(snd.src, snd.dst, i)] = sw.ecmp_index(snd.dst, snd.src, snd.sport, 1 << 64)

    def ack_hash(src: int, dst: int, conn: str, qp: int) -> int:
        h = table.get((src, dst, qp))
        return ecmp_hash(seed, dst, src, conn + "/ack", qp) if h is None else h

    return ack_hash


def packet_rto_draws(exp: Any) -> Any:
    """The packet run's first adaptive timeouts as the flow level's ``rto_draw``: every
    RoCE QP of every message draws its own (``RoceSender.rto_init``), keyed by (src,
    dst, the job's task, the message's step in the task's transfers between those
    hosts, QP index).  A message's task is in its flow's name (``#task:``,
    openmrc.workloads.jobs.lower); a ring's transfers between two hosts are its steps,
    in order.  One job per scenario here, so the flow level's transfer is the task."""
    table: dict[tuple[int, int, int, int, int], int] = {}
    seen: dict[tuple[int, int, int], int] = {}
    for flow in exp.flows:
        spec = flow.spec
        task = int(spec.name.split("#", 1)[1].split(":", 1)[0])
        step = seen.get((task, spec.src, spec.dst), 0)
        seen[(task, spec.src, spec.dst)] = step + 1
        for i, snd in enumerate(getattr(flow, "senders", [])):
            table[(spec.src, spec.dst, task, step, i)] = snd.rto_init

    def rto_draw(src: int, dst: int, transfer: int, step: int, qp: int) -> int | None:
        return table.get((src, dst, transfer, step, qp))

    return rto_draw


def _packet_run(
    d: dict[str, Any],
    base: Path | None,
    draws: dict[tuple[Any, ...], int] | None = None,
    port_seed: int | None = None,
) -> tuple[Any, Any, Any, Any, float]:
    """Scenario data ``d`` at packet level: (scenario, experiment, result, the first
    job's task (starts, ends), wall seconds of build and run).  ``draws``: the QPs'
    random choices of an earlier run to make again (RoCE / IB); ``port_seed``: the
    seed of the ports' coin flips instead of the scenario's."""
    from openmrc.baselines.experiment import BaselineExperiment
    from openmrc.pipeline.jobrun import packet_times

    d.setdefault("run", {})["mode"] = "packet"
    sc = parse(d, base_dir=base)
    t = time.perf_counter()
    exp = sc.build()
    if draws is not None:
        assert isinstance(exp, BaselineExperiment)  # draws are a RoCE/IB run's
        exp.replay_qp_draws(draws)
    if port_seed is not None:
        exp.reseed_ports(port_seed)
    res = exp.run()
    wall = time.perf_counter() - t
    (pkt,) = packet_times(sc.jobs, sc.job_state, res)
    return sc, exp, res, pkt, wall


def _flow_on_draws(d: dict[str, Any], base: Path | None, exp: Any) -> float | None:
    """The step (us) of scenario data ``d`` at flow level on the ECMP paths the packet
    run ``exp`` drew, forward and reverse, and its QPs' first adaptive timeouts
    (:func:`packet_draws`, :func:`packet_ack_draws`, :func:`packet_rto_draws`)."""
    from openmrc.pipeline.jobrun import fluid_model

    d.setdefault("run", {})["mode"] = "flow"
    sc = parse(d, base_dir=base)
    model = fluid_model(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults)
    model.path_hash = packet_draws(exp, sc.seed)
    model.ack_hash = packet_ack_draws(exp, sc.seed)
    model.rto_draw = packet_rto_draws(exp)
    return _step_us(model.run().jobs[0].end)


def compare_one(
    data: dict[str, Any], base: Path | None, transport: str, fault: bool, seed: int
) -> dict[str, Any]:
    """One job, transport, fault and seed at packet and at flow level: step and collectives."""
    from openmrc.pipeline.jobrun import fluid_model

    d = copy.deepcopy(data)
    d["seed"] = seed
    d["transport"] = {**d.get("transport", {}), "name": transport}
    if transport == "roce":
        # a convergence the packet run can afford (the default is 200 ms)
        d["transport"]["baseline_fabric"] = {"convergence_delay_ps": 200_000_000}
    d["faults"] = [{"at_us": 100, "kind": "link_down", "target": "p0t0x0-p0t1x0"}] if fault else []
    sc, exp, _res, pkt, pw = _packet_run(d, base)
    d["run"]["mode"] = "flow"
    sc = parse(d, base_dir=base)
    t = time.perf_counter()
    fr = fluid_model(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults).run()
    fw = time.perf_counter() - t
    flw = (fr.jobs[0].start, fr.jobs[0].end)
    p_us, f_us = _step_us(pkt[1]), _step_us(flw[1])
    row: dict[str, Any] = {}
    if transport == "roce":
        # the same job at flow level on the packet run's ECMP paths
        d_us = _flow_on_draws(d, base, exp)
        row = {
            "flow_packet_draws_step_us": d_us,
            "draws_diff_pct": None
            if not p_us or d_us is None
            else round(100 * (d_us - p_us) / p_us, 2),
        }
    return {
        "transport": transport,
        "fault": fault,
        "seed": seed,
        "packet_step_us": p_us,
        "flow_step_us": f_us,
        "diff_pct": None if not p_us or f_us is None else round(100 * (f_us - p_us) / p_us, 2),
        **row,
        "collectives": _per_collective(sc.jobs[0].graph, pkt, flw),
        "packet_wall_s": round(pw, 2),
        "flow_wall_s": round(fw, 3),
    }


def _step_us(ends: list[Any]) -> float | None:
    """A job's step (us) from its tasks' ends (None if a task never ended)."""
    if not ends or None in ends:
        return None
    return round(max(ends) / 1e6, 3)


def _small_jobs(big: bool) -> list[tuple[str, dict[str, Any], Path | None]]:
    cases: list[tuple[str, dict[str, Any], Path | None]] = [("small-8", SMALL, None)]
    for name in ("chakra-8.toml", "aicb-16.toml") + (("gpt-1b-64.toml",) if big else ()):
        data, base = _scenario_data(name)
        cases.append((name, data, base))
    return cases


def agreement(
    seeds: list[int],
    big: bool,
    out: list[dict[str, Any]],
    only: str | None = None,
    transports: tuple[str, ...] = ("mrc", "roce"),
    faults: tuple[bool, ...] = (False, True),
) -> None:
    """Packet vs flow on every job both run (or the one named ``only``), MRC and RoCE,
    with and without a link failure, per seed: step times and every kind of
    collective's mean duration."""
    for label, data, base in _small_jobs(big):
        if only is not None and label != only:
            continue
        for transport in transports:
            for fault in faults:
                for seed in seeds:
                    row = {"case": "agreement", "job": label}
                    row.update(compare_one(data, base, transport, fault, seed))
                    print(json.dumps(row), flush=True)
                    out.append(row)


def roce_64(seeds: list[int], out: list[dict[str, Any]]) -> None:
    """scenarios/training/gpt-1b-64.toml with RoCE and its own failure (30 ms in, routing
    converging 200 ms later) per seed: the packet step (compiled: about 17 minutes a
    run here), the flow step, the flow step on the packet run's ECMP draws, and the
    packet run's QPs whose data path crossed the dead link (ECMP's pick at their
    source T0 before convergence) and rewound (a NAK or a timeout)."""
    from openmrc.pipeline.jobrun import fluid_model

    data, base = _scenario_data("gpt-1b-64.toml")
    for seed in seeds:
        d = copy.deepcopy(data)
        d["seed"] = seed
        d["transport"] = {**d.get("transport", {}), "name": "roce"}
        sc, exp, res, pkt, wall = _packet_run(d, base)
        spec, fab = sc.spec, exp.fabric
        hpt = spec.hosts_per_t0
        dead = []
        for flow, fr in zip(exp.flows, res.flows, strict=True):
            for i, snd in enumerate(getattr(flow, "senders", [])):
                a, b = snd.src // hpt, snd.dst // hpt
                if i % spec.planes or a == b or 0 not in (a, b) or not snd.rewinds:
                    continue
                sw = fab.switches[fab.topology.t0_name(0, a)]
                if sw.ecmp_index(snd.src, snd.dst, snd.sport, spec.t1s) == 0:
                    dead.append(
                        {
                            "flow": fr.name,
                            "qp": i,
                            "start_us": round((fr.started_ps or fr.start_ps) / 1e6, 1),
                            "rx_us": round((fr.rx_finish_ps or 0) / 1e6, 1),
                            "timeouts": snd.timeouts,
                            "rewinds": snd.rewinds,
                            "first_rto_us": round(snd.rto_init / 1e6, 1),
                        }
                    )
        d["run"]["mode"] = "flow"
        sc = parse(d, base_dir=base)
        flow_us = _step_us(
            fluid_model(sc.spec, sc.transport, seed, sc.jobs, sc.faults).run().jobs[0].end
        )
        draws_us = _flow_on_draws(d, base, exp)
        row = {
            "case": "roce-64",
            "seed": seed,
            "packet_step_us": _step_us(pkt[1]),
            "flow_step_us": flow_us,
            "flow_packet_draws_step_us": draws_us,
            "packet_wall_s": round(wall, 1),
            "dead_data_qps": dead,
        }
        print(json.dumps(row), flush=True)
        out.append(row)


def _roce_seed_data(data: dict[str, Any], seed: int, fault: bool) -> dict[str, Any]:
    """A job's scenario data with RoCE at ``seed``, with or without the T0-T1 link
    failure at 100 us (routing converging 200 us later)."""
    d = copy.deepcopy(data)
    d["seed"] = seed
    d["transport"] = {"name": "roce"}
    if fault:
        d["transport"]["baseline_fabric"] = {"convergence_delay_ps": 200_000_000}
        d["faults"] = [{"at_us": 100, "kind": "link_down", "target": "p0t0x0-p0t1x0"}]
    return d


def _roce_cases() -> list[tuple[str, dict[str, Any], Path | None]]:
    """The jobs the RoCE seed comparisons run: the test job, chakra-8 and aicb-16."""
    cases: list[tuple[str, dict[str, Any], Path | None]] = [("small-8", SMALL, None)]
    for name in ("chakra-8.toml", "aicb-16.toml"):
        data, base = _scenario_data(name)
        cases.append((name, data, base))
    return cases


def roce_seeds(seeds: range = range(1, 7)) -> None:
    """RoCE without and with the link failure: packet and flow step per seed, the flow
    step on the packet run's ECMP draws, and their means."""
    for (label, data, base), fault in itertools.product(_roce_cases(), (False, True)):
        packet: list[float | None] = []
        flow: list[float | None] = []
        draws: list[float | None] = []
        for seed in seeds:
            d = _roce_seed_data(data, seed, fault)
            _sc, exp, _res, pkt, _wall = _packet_run(d, base)
            packet.append(_step_us(pkt[1]))
            flow.append(flow_step(d, base)[0])
            # the flow level on this packet run's ECMP draws
            draws.append(_flow_on_draws(d, base, exp))
        pm = sum(p for p in packet if p) / len(packet)
        fm = sum(f for f in flow if f) / len(flow)
        dm = sum(x for x in draws if x) / len(draws)
        print(
            json.dumps(
                {
                    "case": label,
                    "fault": fault,
                    "seeds": list(seeds),
                    "packet_step_us": packet,
                    "flow_step_us": flow,
                    "packet_mean_us": round(pm, 1),
                    "flow_mean_us": round(fm, 1),
                    "diff_pct": round(100 * (fm - pm) / pm, 2),
                    "flow_packet_draws_step_us": draws,
                    "flow_packet_draws_mean_us": round(dm, 1),
                    "draws_diff_pct": round(100 * (dm - pm) / pm, 2),
                }
            ),
            flush=True,
        )


def packet_noise(seeds: list[int], flips: int, out: list[dict[str, Any]]) -> None:
    """The packet level against itself, per RoCE job, fault and seed: the seed's run,
    then ``flips`` runs on its paths and timeouts (its QPs' draws replayed) with the
    ports' coin flips seeded ``seed * 1000 + k`` (k = 1, 2, ...); the steps, their
    mean, standard deviation and range, and the flow level on the packet's draws
    against the seed's run and against the mean.  Every run's draws are checked to
    be the seed run's."""
    for (label, data, base), fault in itertools.product(_roce_cases(), (False, True)):
        for seed in seeds:
            d = _roce_seed_data(data, seed, fault)
            _sc, exp, _res, pkt, _w = _packet_run(d, base)
            draws = exp.qp_draws()
            steps = [_step_us(pkt[1])]
            for k in range(1, flips + 1):
                _sc, e, _res, p, _w = _packet_run(d, base, draws, seed * 1000 + k)
                if e.qp_draws() != draws:
                    raise RuntimeError(f"{label} seed {seed}: run {k} drew beyond the replay")
                steps.append(_step_us(p[1]))
            flow = _flow_on_draws(d, base, exp)
            vals = [x for x in steps if x is not None]
            mean, sd = statistics.fmean(vals), statistics.pstdev(vals)
            row = {
                "case": "packet-noise",
                "job": label,
                "fault": fault,
                "seed": seed,
                "packet_steps_us": steps,
                "packet_mean_us": round(mean, 1),
                "packet_sd_pct": round(100 * sd / mean, 2),
                "packet_range_pct": [
                    round(100 * (min(vals) - mean) / mean, 1),
                    round(100 * (max(vals) - mean) / mean, 1),
                ],
                "flow_packet_draws_step_us": flow,
                "vs_seed_run_pct": None
                if flow is None or steps[0] is None
                else round(100 * (flow - steps[0]) / steps[0], 2),
                "vs_mean_pct": None if flow is None else round(100 * (flow - mean) / mean, 2),
            }
            print(json.dumps(row), flush=True)
            out.append(row)


def _packet_ends(spec: Any, qps: list[tuple[int, int, int]]) -> list[float]:
    """RoCE QPs at packet level, each (sending host ``h`` to host ``h + hosts / 2``,
    bytes, start in us): each one's arrival (ps)."""
    from openmrc.sim.experiment import TransportConfig
    from openmrc.sim.factory import make_experiment
    from openmrc.workloads import FlowSpec

    half = spec.hosts // 2
    exp = make_experiment(spec, transport=TransportConfig(name="roce"))
    exp.add_flows(
        [FlowSpec(h, half + h, size, start_ps=at * 1_000_000) for h, size, at in qps],
        watch=True,
    )
    return [float(f.rx_finish_ps or 0) for f in exp.run().flows]


def _flow_ends(spec: Any, qps: list[tuple[int, int, int]]) -> list[float]:
    """The same QPs (as :func:`_packet_ends`) at flow level: each one's end (ps); a QP
    that starts later waits for a compute span of its host."""
    from openmrc.flow.model import FluidJob, FluidModel
    from openmrc.workloads.jobs.graph import JobGraph, Task

    half = spec.hosts // 2
    g = JobGraph("qps", spec.hosts, gpus_per_server=1)
    p2p: list[int] = []
    for h, size, at in qps:
        deps: tuple[int, ...] = ()
        if at:
            g.add(Task("compute", (h,), dur_ps=at * 1_000_000))
            deps = (len(g.tasks) - 1,)
        g.add(Task("p2p", (h, half + h), deps=deps, size=size))
        p2p.append(len(g.tasks) - 1)
    model = FluidModel(spec, "roce", gpus_per_server=1)
    model.add_job(FluidJob(g, list(range(spec.hosts))))
    ends = model.run().jobs[0].end
    return [ends[i] or 0.0 for i in p2p]


def dcqcn() -> None:
    """n RoCE QPs through one link: the share of the link they used, packet and flow level."""
    from openmrc.topology import ClosSpec

    for size in (1 << 20, 4 << 20, 16 << 20):
        used: dict[str, dict[int, float]] = {"packet": {}, "flow": {}}
        for n in (1, 2, 4, 8):
            spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=8, t1s=1)
            qps = [(i, size, 0) for i in range(n)]
            end, fend = max(_packet_ends(spec, qps)), max(_flow_ends(spec, qps))
            for mode, t in (("packet", end), ("flow", fend)):
                used[mode][n] = round(n * size * 8 / (spec.fabric_gbps * 1e9) / (t / 1e12), 3)
        print(json.dumps({"case": "dcqcn", "size": size, "link_share_used": used}), flush=True)


def dcqcn_series() -> None:
    """Two RoCE QPs into one link: one QP's goodput in time, packet level and the flow
    level's DCQCN trajectory (the evidence for openmrc.flow.dcqcn)."""
    from openmrc.baselines.roce import DcqcnConfig
    from openmrc.flow.dcqcn import STEP_PS, cnp_delay_ps, dcqcn_trajectory
    from openmrc.flow.model import FluidModel
    from openmrc.sim.experiment import TransportConfig
    from openmrc.sim.factory import make_experiment
    from openmrc.topology import ClosSpec
    from openmrc.workloads import FlowSpec

    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=2, t1s=1)
    model = FluidModel(spec, "roce", gpus_per_server=1)
    wire = 100e9
    cums = dcqcn_trajectory(
        2,
        wire,
        wire,
        wire,
        cnp_delay_ps(spec),
        round(4096 / model.payload_share),
        dataclasses.astuple(DcqcnConfig()),
    )
    k = 10_000_000 // STEP_PS  # points per 10 us
    share = model.payload_share
    flow_series = [
        round((cums[i + k] - cums[i]) * share * 8 / 10e-6 / 1e9, 1)
        for i in range(0, min(len(cums) - k, 60 * k), k)
    ]
    for size in (512 << 10, 16 << 20):
        exp = make_experiment(spec, transport=TransportConfig(name="roce"))
        exp.add_flows([FlowSpec(i, 2 + i, size) for i in range(2)], watch=True)
        res = exp.run()
        series = next(iter(res.goodput_series.values()))
        print(
            json.dumps(
                {
                    "case": "dcqcn-series",
                    "size": size,
                    "packet_end_us": [round((f.rx_finish_ps or 0) / 1e6, 1) for f in res.flows],
                    "flow_end_us": round(
                        _pair_flow_end(spec, size) / 1e6,
                        1,
                    ),
                    "packet_gbps_per_10us": [round(x, 1) for x in series[:60]],
                    "flow_gbps_per_10us": flow_series,
                }
            ),
            flush=True,
        )


#: dcqcn-arrivals: per arrangement, each QP's (sending host, bytes, start in us); host h
#: sends to host 8 + h, so every QP crosses the one T0-T1 link
_M = 1 << 20
ARRIVALS: dict[str, list[tuple[int, int, int]]] = {
    "one in the stall": [(0, 4 * _M, 0), (1, 4 * _M, 0), (2, _M // 2, 150)],
    "two after the recovery": [(0, 4 * _M, 0), (1, 4 * _M, 0), (2, 4 * _M, 450), (3, 4 * _M, 450)],
    "eight 12 us apart": [(i, 2 * _M, 12 * i) for i in range(8)],
    "two NICs of four QPs": [(0, 11 * _M // 2, 0)] * 4 + [(1, 11 * _M // 2, 0)] * 4,
    "two pairs 80 us apart": [(0, _M // 2, 0), (1, _M // 2, 0), (2, _M // 2, 80), (3, _M // 2, 80)],
}


def dcqcn_arrivals() -> None:
    """RoCE QPs reaching one congested link at different times or from one NIC: each
    QP's end (us) at packet level and at flow level (``ARRIVALS``)."""
    from openmrc.topology import ClosSpec

    spec = ClosSpec(planes=1, t0s=2, hosts_per_t0=8, t1s=1)
    for name, qps in ARRIVALS.items():
        packet = [round(t / 1e6, 1) for t in _packet_ends(spec, qps)]
        flow = [round(t / 1e6, 1) for t in _flow_ends(spec, qps)]
        print(
            json.dumps(
                {
                    "case": "dcqcn-arrivals",
                    "arrangement": name,
                    "qps": [{"host": h, "bytes": size, "start_us": at} for h, size, at in qps],
                    "packet_end_us": packet,
                    "flow_end_us": flow,
                    "diff_pct": [
                        round(100 * (f - p) / p, 1) for p, f in zip(packet, flow, strict=True)
                    ],
                }
            ),
            flush=True,
        )


def _pair_flow_end(spec: Any, size: int) -> float:
    """Two RoCE QPs (hosts 0, 1 to 2, 3) at flow level: when the later ends (ps)."""
    return max(_flow_ends(spec, [(0, size, 0), (1, size, 0)]))


def _timed(case: str, name: str, transport: str, mode: str) -> dict[str, Any]:
    """One bundled scenario's iteration: step time, wall and CPU seconds."""
    data, base = _scenario_data(name)
    d = copy.deepcopy(data)
    d["transport"] = {**d.get("transport", {}), "name": transport}
    t, c = time.perf_counter(), time.process_time()
    if mode == "flow":
        step, run_s = flow_step(d, base)
    else:
        step, run_s = packet_step(d, base)
    return {
        "case": case,
        "scenario": name,
        "transport": transport,
        "mode": mode,
        "step_us": step,
        "run_s": round(run_s, 1),
        "total_wall_s": round(time.perf_counter() - t, 1),
        "cpu_s": round(time.process_time() - c, 1),
    }


TIMED = {
    "packet-64": ("gpt-1b-64.toml", "mrc", "packet"),
    "flow-1024": ("gpt3-175b-1024.toml", "mrc", "flow"),
    "flow-1024-roce": ("gpt3-175b-1024.toml", "roce", "flow"),
    "flow-moe": ("moe-ep-128.toml", "mrc", "flow"),
    "flow-moe-roce": ("moe-ep-128.toml", "roce", "flow"),
}


#: the DP-widened cases: GPUs, and whether the MoE job
SCALED = {
    "flow-8192": (8192, False),
    "flow-32768": (32768, False),
    "flow-131072": (131072, False),
    "flow-moe-8192": (8192, True),
    "flow-moe-32768": (32768, True),
    "flow-moe-131072": (131072, True),
}


def scaled_data(gpus: int, moe: bool = False, micro: int = 0) -> tuple[dict[str, Any], Path]:
    """gpt3-175b-1024.toml (``moe``: moe-ep-128.toml, placed packed) widened by DP to
    ``gpus`` GPUs on the paper's switch radix, its micro-batches per replica kept
    (``micro`` > 0: that many instead)."""
    if gpus % 256 or gpus < 256:
        raise SystemExit(f"--gpus: {gpus} is not a multiple of 256 (one T0's hosts)")
    data, base = _scenario_data("moe-ep-128.toml" if moe else "gpt3-175b-1024.toml")
    d = copy.deepcopy(data)
    job = d["job"]
    per_replica = micro or job["model"]["global_batch"] // job["parallel"]["dp"]
    d["fabric"].update(t0s=gpus // 256, hosts_per_t0=256, t1s=256)
    dp = gpus // (job["parallel"]["tp"] * job["parallel"]["pp"])
    job["parallel"]["dp"] = dp
    job["model"]["global_batch"] = per_replica * dp
    job["placement"] = "packed"
    return d, base


def scaled_one(
    gpus: int, transport: str, fold: int = 1, moe: bool = False, micro: int = 0
) -> dict[str, Any]:
    """One iteration of the widened job with one transport, in this process.

    ``fold`` >= 0: folded (openmrc.flow.fold) with that margin, when the job folds;
    -1: every replica simulated."""
    import openmrc.flow.model as fm
    from openmrc.flow.fold import plan_fold
    from openmrc.pipeline.jobrun import fluid_model, ideal_step_ps, job_row
    from openmrc.topology import ClosSpec

    data, base = scaled_data(gpus, moe, micro)
    per_replica = data["job"]["model"]["global_batch"] // data["job"]["parallel"]["dp"]
    data["transport"] = {**data.get("transport", {}), "name": transport}
    data.setdefault("run", {})["mode"] = "flow"
    model_cpu = [0.0]
    reuse: list[Any] = [None, None]  # the model's reuse_component and reuse_budget

    def timed_run(model: Any) -> Any:
        """model.run(), its CPU seconds added to model_cpu (FluidModel may be compiled:
        its methods cannot be wrapped in place)."""
        reuse[0] = getattr(model, "reuse_component", None)
        b = getattr(model, "reuse_budget", None)
        reuse[1] = b if b is None or math.isfinite(b) else "inf"
        c = time.process_time()
        try:
            return model.run()
        finally:
            model_cpu[0] += time.process_time() - c

    c = time.process_time()
    plan = None
    if fold >= 0:
        fab, par = data["fabric"], data["job"]["parallel"]
        spec = ClosSpec(
            planes=fab["planes"],
            t0s=fab["t0s"],
            hosts_per_t0=fab["hosts_per_t0"],
            t1s=fab["t1s"],
            host_gbps=fab["host_gbps"],
            fabric_gbps=fab["fabric_gbps"],
        )
        whole = fm.FluidModel(spec)
        faults = [
            fm.FluidFault(int(f["at_us"] * 1_000_000), f["kind"], f["target"])
            for f in data.get("faults", [])
        ]
        parts = [whole.parts(f) for f in faults]
        plan = plan_fold(spec, par["tp"], par["pp"], par["dp"], parts, fold, par.get("ep", 1))
    if plan is None:
        sc = parse(data, base_dir=base)
        res = timed_run(fluid_model(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults))
        job = sc.jobs[0]
        row = job_row(job, res.jobs[0].start, res.jobs[0].end, ideal_step_ps(sc.spec, job))
    else:
        data["fabric"]["t0s"] = plan.spec.t0s
        data["job"]["parallel"]["dp"] = plan.dp
        data["job"]["model"]["global_batch"] = per_replica * plan.dp
        data.pop("faults", None)
        sc = parse(data, base_dir=base)
        model = fluid_model(sc.spec, sc.transport, sc.seed, sc.jobs, [])
        for f in plan.faults(whole, faults):
            model.add_fault(f)
        model.jobs[0].ring_ranks = plan.graph(model.jobs[0].graph, parse_jobs(data)[0].spec)
        plan.hashes(model)
        res = timed_run(model)
        job = sc.jobs[0]
        row = job_row(job, res.jobs[0].start, res.jobs[0].end, ideal_step_ps(sc.spec, job))
    return {
        "gpus": gpus,
        "job": "moe" if moe else "gpt",
        "transport": transport,
        "folded": None
        if plan is None
        else {"blocks": list(plan.blocks), "of": plan.full_blocks, "gpus": plan.spec.hosts},
        "step_us": row["step_time_us"],
        "cpu_s": round(time.process_time() - c, 1),
        "model_cpu_s": round(model_cpu[0], 1),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "events": res.events,
        "recomputes": res.recomputes,
        # the refills' work: flows filled, and the component walks and the flows they reached
        "refilled": res.refilled,
        "walks": getattr(res, "walks", None),
        "walked": getattr(res, "walked", None),
        "reuse": reuse[0],
        "reuse_budget": reuse[1],
        "task_times_sha256_16": task_times_hash(res.jobs[0].start, res.jobs[0].end),
    }


def task_times_hash(start: list[float | None], end: list[float | None]) -> str:
    """Every task's start and end (ps, as the run gives them) hashed: two runs with the
    same hash gave the same times to the last bit."""
    text = json.dumps([[repr(t) for t in start], [repr(t) for t in end]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fold_check(
    gpus: int,
    transport: str,
    margin: int,
    hpt: int = 32,
    moe: bool = False,
    narrow: int | None = None,
) -> dict[str, Any]:
    """gpt3-175b-1024.toml (``moe``: moe-ep-128.toml, placed packed) widened by DP to
    ``gpus`` GPUs on ``hpt`` hosts per T0, every replica simulated and folded
    (openmrc.flow.fold, ``margin``): the step of each, and how far apart every task
    the folded run keeps starts and ends in the two (ps), with their CPU seconds.
    ``narrow``: the kept blocks run representative replicas, that many kept either
    side of each one set apart (openmrc.flow.fold.narrow_replicas; MRC)."""
    import numpy as np

    from openmrc.flow.fold import plan_fold
    from openmrc.pipeline.jobrun import fluid_model

    data, base = _scenario_data("moe-ep-128.toml" if moe else "gpt3-175b-1024.toml")
    d = copy.deepcopy(data)
    par = d["job"]["parallel"]
    per_replica = d["job"]["model"]["global_batch"] // par["dp"]
    tp, pp, ep = par["tp"], par["pp"], par.get("ep", 1)
    dp = gpus // (tp * pp)
    d["fabric"].update(t0s=gpus // hpt, hosts_per_t0=hpt)
    d["job"]["placement"] = "packed"
    par["dp"] = dp
    d["job"]["model"]["global_batch"] = per_replica * dp
    d["transport"] = {**d.get("transport", {}), "name": transport}
    c = time.process_time()
    sc = parse(copy.deepcopy(d), base_dir=base)
    whole = fluid_model(sc.spec, sc.transport, sc.seed, sc.jobs, sc.faults)
    full = whole.run()
    full_cpu = time.process_time() - c

    def key(t: Any, n: int) -> tuple[Any, ...]:
        """A task's name across the two runs (``n``: its run's DP): a ring by its
        label, TP index, stage and group (dense, or which expert ring)."""
        if t.phase in ("dp", "zero"):
            t0, rest = t.ranks[0] % tp, t.ranks[0] // tp
            return (t.kind, t.label, t0, rest // n, -1 if len(t.ranks) == n else rest % n % ep)
        return (t.kind, t.label, t.ranks)

    g = sc.jobs[0].graph
    index = {key(t, dp): i for i, t in enumerate(g.tasks)}
    parts = [whole.parts(f) for f in whole._faults]
    plan = plan_fold(sc.spec, tp, pp, dp, parts, margin, ep, narrow)
    if plan is None:
        raise SystemExit(f"fold-check: {gpus} GPUs on {hpt} hosts per T0 do not fold")
    c = time.process_time()
    d["fabric"]["t0s"] = plan.spec.t0s
    d["fabric"]["hosts_per_t0"] = plan.spec.hosts_per_t0
    par["dp"] = plan.dp
    d["job"]["model"]["global_batch"] = per_replica * plan.dp
    d.pop("faults", None)
    sf = parse(d, base_dir=base)
    jobs = sf.jobs
    if plan.offsets:  # the blocks' replicas placed as the fold runs them
        jobs = [dataclasses.replace(jobs[0], hosts=plan.hosts())]
    model = fluid_model(plan.spec, sf.transport, sf.seed, jobs, [])
    for f in plan.faults(whole, whole._faults):
        model.add_fault(f)
    model.jobs[0].ring_ranks = plan.graph(model.jobs[0].graph, parse_jobs(d)[0].spec)
    plan.hashes(model)
    if plan.offsets:
        model.host_weight = np.array(plan.host_weights(), dtype=float)
    folded = model.run()
    fold_cpu = time.process_time() - c
    fs, fe = full.jobs[0].start, full.jobs[0].end
    worst = 0.0
    n = 0
    diffs: list[tuple[float, str]] = []
    got = folded.jobs[0]
    for t, s0, e0 in zip(model.jobs[0].graph.tasks, got.start, got.end, strict=True):
        if t.phase in ("dp", "zero"):
            i = index[key(t, plan.dp)]
        else:
            i = index[(t.kind, t.label, tuple(plan.rank(r) for r in t.ranks))]
        for a, b in ((s0, fs[i]), (e0, fe[i])):
            if a is None or b is None:
                worst = math.inf if a is not b else worst
            else:
                worst = max(worst, abs(a - b))
                if abs(a - b) > 1.0:
                    diffs.append((min(a, b), f"{t.label} {t.ranks[:2]} {a} {b}"))
        n += 1
    step = [max(e for e in x.jobs[0].end if e is not None) / 1e9 for x in (full, folded)]
    return {
        "case": "fold-check",
        "job": "moe" if moe else "gpt",
        "gpus": gpus,
        "transport": transport,
        "margin": margin,
        "blocks": list(plan.blocks),
        "replicas": None if not plan.offsets else [list(plan.offsets), list(plan.weights)],
        "of": plan.full_blocks,
        "step_ms": [round(x, 6) for x in step],
        "tasks_compared": n,
        "max_task_diff_ps": worst,
        "first_diffs": [x for _b, x in sorted(diffs)[:4]],
        "cpu_s": [round(full_cpu, 1), round(fold_cpu, 1)],
    }


def scaled(
    case: str,
    gpus: int,
    transports: list[str],
    fold: int = 1,
    moe: bool = False,
    micro: int = 0,
    refill: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The widened job with each transport, each in a fresh process (its own peak memory);
    ``refill``: the --reuse / --reuse-budget arguments to pass on."""
    rows = []
    for tr in transports:
        cmd = [sys.executable, __file__, "--case", "flow-scale", "--gpus", str(gpus)]
        cmd += ["--fold", str(fold), "--micro", str(micro)] + (["--moe"] if moe else [])
        cmd += refill or []
        got = subprocess.run(
            [*cmd, "--transport", tr, "--in-process"], capture_output=True, text=True
        )
        if got.returncode:
            raise SystemExit(f"{case} {tr}: {got.stderr.strip().splitlines()[-1:]}")
        row = {"case": case, **json.loads(got.stdout.strip().splitlines()[-1])}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def ring_weights() -> None:
    """Every flow-level model of this run weights RoCE's ring hop flows by their messages
    ready (``FluidModel.ring_weights``), as :func:`ring_messages` wraps the model."""
    import openmrc.pipeline.jobrun as jobrun

    make = jobrun.fluid_model

    def fluid_model(*args: Any, **kw: Any) -> Any:
        model = make(*args, **kw)
        model.ring_weights = True
        return model

    jobrun.fluid_model = fluid_model  # type: ignore[assignment]


def refill_reuse(reuse: str | None, budget: float | None) -> None:
    """Every flow-level model of this run reuses the kept sets of flows at its refills
    (``reuse`` "on") or walks at every refill ("off"), each kept set refilling at most
    ``budget`` times its flows (``FluidModel.reuse_component``, ``.reuse_budget``): to
    pair the refill's settings on one build.  None: the model's default."""
    import openmrc.pipeline.jobrun as jobrun

    make = jobrun.fluid_model

    def fluid_model(*args: Any, **kw: Any) -> Any:
        model = make(*args, **kw)
        if reuse is not None:
            model.reuse_component = reuse == "on"
        if budget is not None:
            model.reuse_budget = budget
        return model

    jobrun.fluid_model = fluid_model  # type: ignore[assignment]


def ring_messages() -> None:
    """Every flow-level model of this run sends RoCE's ring steps as messages of their own
    (``FluidModel.ring_messages``): ``openmrc.pipeline.jobrun.fluid_model``, which ``run_flow``
    and the cases here call, is wrapped to set it."""
    import openmrc.pipeline.jobrun as jobrun

    make = jobrun.fluid_model

    def fluid_model(*args: Any, **kw: Any) -> Any:
        model = make(*args, **kw)
        model.ring_messages = model.transport != "mrc"
        return model

    jobrun.fluid_model = fluid_model  # type: ignore[assignment]


#: campaign-check: the campaign around the job (no drawn failures; one T0-T1 link down
#: 1 s in, half a microsecond into an iteration, up 2 s in; RoCE's routing converging
#: in 200 us, a convergence the packet runs can afford)
CAMPAIGN_CHECK_SETS = [
    "run.mode=flow",
    "failures.link_per_hour=0",
    "failures.optic_per_hour=0",
    "failures.switch_per_hour=0",
    "failures.nic_port_per_hour=0",
    'faults=[{at_us=1000000.5, kind="link_down", target="p0t0x0-p0t1x0"}, '
    '{at_us=2000000.25, kind="link_up", target="p0t0x0-p0t1x0"}]',
    "transport.baseline_fabric.convergence_delay_ps=200000000",
]

#: campaign-check's default job: gpt-1b-64.toml's placement and fabric, a smaller model
CAMPAIGN_CHECK_MODEL = [
    "job.model.layers=4",
    "job.model.hidden=1024",
    "job.model.heads=8",
    "job.model.vocab=32000",
    "job.model.seq_len=1024",
    "job.model.global_batch=8",
]


def campaign_check(
    seeds: list[int],
    job: str | None,
    transports: tuple[str, ...],
    out: list[dict[str, Any]],
    extra: list[str] | None = None,
) -> None:
    """A small campaign's flow-level iterations at packet level (module doc), per seed;
    ``extra``: more ``--set`` overrides (e.g. a wider job)."""
    from openmrc.pipeline import campaign as cp
    from openmrc.pipeline.campaign_check import check

    name = job or "gpt-1b-64.toml"
    small = [] if job else CAMPAIGN_CHECK_MODEL
    for seed in seeds:
        setup = cp.load(
            str(ROOT / "scenarios" / "training" / name),
            [*CAMPAIGN_CHECK_SETS, *small, *(extra or []), f"seed={seed}"],
            hours=3.0 / 3600,
            transports=list(transports),
        )
        for r in check(setup):
            row = {"case": "campaign-check", "job": name, **r}
            print(json.dumps(row), flush=True)
            out.append(row)


#: campaign-plan, RoCE: what a QP whose host link died takes to run out of retries
#: (NCCL's 4.3 s ACK timeout, 7 retries; measured at 34.4 s on the bundled campaigns)
ROCE_GIVE_UP_PS = 34_400_000_000_000
#: campaign-plan: the job's failure-free steps, ps (docs/results/campaign.md)
PLAN_STEP_PS = {"mrc": 3_654_832_829_394, "roce": 3_656_112_000_000}


def _run_kind(changes: Any) -> str:
    """What a simulated iteration is: ``state`` (nothing changes in it), ``down`` (a part
    fails in it), ``up`` (only repairs); :func:`_dry_run` calls a RoCE one whose QP
    errors ``restart``."""
    if not changes:
        return "state"
    return "up" if all(up for _at, up, parts in changes if parts) else "down"


def _dry_run(
    setup: Any, hours: float, groups: bool = False, transport: str = "mrc"
) -> tuple[Any, list[int], list[float], list[str]]:
    """A folded campaign of ``setup`` in which every simulated iteration takes the
    bundled job's failure-free step and records the blocks its fold keeps (``groups``:
    as ``campaign.fold_groups`` runs it, group by group); (its measurements, the
    blocks kept per flow-level run, the replicas those blocks run in blocks' worth:
    ``campaign.fold_replicas`` runs representatives for MRC, every replica for RoCE;
    and each run's kind, :func:`_run_kind`).  RoCE: an iteration in which a host link
    goes down never ends (its QP on that plane has no other path; it gives up
    :data:`ROCE_GIVE_UP_PS` after the failure) and the job restarts, as a RoCE
    campaign has it (docs/campaign.md); any other iteration takes the step."""
    from openmrc.pipeline import campaign as cp

    fj = setup.folds[transport]
    blocks = fj.dp // (fj.spec.hosts_per_t0 // fj.tp)
    kept: list[int] = []
    worth: list[float] = []
    kinds: list[str] = []
    per_block = fj.spec.hosts_per_t0 // fj.tp
    step = PLAN_STEP_PS[transport]

    def simulate(self: Any, view: Any, changes: Any, lead: int) -> tuple[int | None, int]:
        every = set(view)
        for _at, _up, parts in changes:
            every |= set(parts)
        plan = fj.plan(frozenset(every))
        kept.append(blocks if plan is None else len(plan.blocks))
        worth.append(blocks if plan is None else plan.dp / per_block)
        self.out.simulated += 1
        dies = [at for at, up, parts in changes if not up and any(e[0] == "h" for e in parts)]
        if transport == "roce" and dies:
            kinds.append("restart")
            return None, min(dies) - lead + ROCE_GIVE_UP_PS
        kinds.append(_run_kind(changes))
        return step, step

    dry = type("Dry", (cp.Campaign,), {"_run_model": simulate})
    c = dry(
        transport,
        fj.whole_model,
        setup.failures,
        hours,
        setup.config.checkpoint_s,
        setup.config.restart_s,
        folded=fj.folded,
        probe=fj.fabric_model(),
        groups=fj.groups if groups else None,
    )
    return c.run(), kept, worth, kinds


def _by_kind(kinds: list[str], worth: list[float]) -> dict[str, list[float]]:
    """Per run kind: [runs, replicas run in blocks' worth]."""
    out: dict[str, list[float]] = {}
    for k, w in zip(kinds, worth, strict=True):
        row = out.setdefault(k, [0, 0.0])
        row[0] += 1
        row[1] = round(row[1] + w, 1)
    return dict(sorted(out.items()))


def campaign_plan(seeds: list[int], hours: float) -> list[dict[str, Any]]:
    """What the bundled whole-cluster campaign (scenarios/training/campaign-131072.toml,
    folded) would simulate, per seed, without simulating it (:func:`_dry_run`: MRC's
    steps there move by under half a percent, so the timeline is the real one within
    those shifts): the failures, states, iterations simulated and the blocks of 64
    their folds keep, per kind of run (``runs_by_kind``: a state's iteration, one a
    failure falls into, one only repairs fall into, RoCE's one whose QP errors and
    restarts the job: [runs, blocks' worth]).  A day
    costs about the blocks kept in all times the CPU per block a measured campaign
    gives.  A second row per seed plans RoCE (every replica of a kept block run; its
    restarts as :func:`_dry_run` has them: an estimate of its timeline), exact and
    with ``campaign.fold_groups``."""
    from openmrc.pipeline import campaign as cp

    rows = []
    for seed in seeds:
        setup = cp.load(
            str(ROOT / "scenarios" / "training" / "campaign-131072.toml"),
            hours=hours,
            seed=seed,
            transports=["mrc", "roce"],
        )
        out, kept, worth, kinds = _dry_run(setup, hours)
        g_out, g_kept, g_worth, _ = _dry_run(setup, hours, groups=True)
        row = {
            "case": "campaign-plan",
            "transport": "mrc",
            "seed": seed,
            "hours": hours,
            "failures": len(setup.failures),
            "states": len(out.states),
            "iterations_simulated": out.simulated,
            "blocks_kept_sum": sum(kept),
            "blocks_kept_mean": round(sum(kept) / len(kept), 2),
            "blocks_kept_max": max(kept),
            "replicas_run_blocks": round(sum(worth), 1),
            "replicas_run_max_blocks": round(max(worth), 2),
            "runs_by_kind": _by_kind(kinds, worth),
            "fold_groups_runs": g_out.simulated,
            "fold_groups_blocks_kept_sum": sum(g_kept),
            "fold_groups_blocks_kept_max": max(g_kept),
            "fold_groups_replicas_run_blocks": round(sum(g_worth), 1),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
        r_out, r_kept, r_worth, r_kinds = _dry_run(setup, hours, transport="roce")
        rg_out, rg_kept, rg_worth, rg_kinds = _dry_run(setup, hours, True, "roce")
        row = {
            "case": "campaign-plan",
            "transport": "roce",
            "seed": seed,
            "hours": hours,
            "failures": len(setup.failures),
            "states": len(r_out.states),
            "iterations_simulated": r_out.simulated,
            "restarts": len(r_out.restarts),
            "blocks_kept_sum": sum(r_kept),
            "blocks_kept_max": max(r_kept),
            "runs_by_kind": _by_kind(r_kinds, r_worth),
            "fold_groups_runs": rg_out.simulated,
            "fold_groups_blocks_kept_sum": sum(rg_kept),
            "fold_groups_blocks_kept_max": max(rg_kept),
            "fold_groups_runs_by_kind": _by_kind(rg_kinds, rg_worth),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _seeds(text: str) -> list[int]:
    a, _, b = text.partition("-")
    return list(range(int(a), int(b or a) + 1))


#: campaign-profile: what the run loop's callees are grouped under (by function name)
PROFILE_GROUPS = {
    "_fill": "fill (max-min rates)",
    "maxmin": "fill (max-min rates)",
    "entries": "fill (max-min rates)",
    "merge": "flows in and out of the arrays",
    "index": "flows in and out of the arrays",
    "unindex": "flows in and out of the arrays",
    "component": "what a change reaches (component)",
    "_route": "routes (QP draws, cached per model)",
    "__init__": "flow objects made",
    "_dcqcn_factor": "DCQCN",
}


#: campaign-restart-cost: the whole-cluster campaign's job on 2,048 GPUs (docs/results)
RESTART_COST_SET = [
    "fabric.t0s=64",
    "fabric.hosts_per_t0=32",
    "fabric.t1s=32",
    "job.parallel.dp=32",
    "job.model.global_batch=1024",
]


def campaign_restart_cost() -> list[dict[str, Any]]:
    """RoCE restart iterations' cost (module doc, ``campaign-restart-cost``): per failure
    offset, the CPU s of the folded iteration run to its end and stopped at the failure,
    beside the failure-free iteration's."""
    from openmrc.flow.model import FluidFault
    from openmrc.pipeline import campaign as cp

    setup = cp.load(
        str(ROOT / "scenarios" / "training" / "campaign-131072.toml"),
        RESTART_COST_SET,
        hours=1.0,
        seed=2,
        transports=["roce"],
    )
    fj = setup.folds["roce"]

    def built(parts: list[tuple[Any, ...]]) -> tuple[Any, Any]:
        got = fj.folded(frozenset(parts))
        assert got is not None
        return got

    c = time.process_time()
    res = built([])[0].run()
    healthy = time.process_time() - c
    step = max(e for e in res.jobs[0].end if e is not None)
    part = ("h", 5 * fj.spec.hosts_per_t0 + 3, 0)  # a host of block 5, plane 0
    rows = []
    for frac in (0.1, 0.5, 0.9):
        at = round(step * frac)
        cpu: dict[str, float] = {}
        events: dict[str, int] = {}
        for until, stop in ((None, False), (at, False), (None, True)):
            model, to_fold = built([part])
            e = to_fold(part)
            model.add_fault(FluidFault(at, "nic_port_down", "", e[1], e[2]))
            c = time.process_time()
            r = model.run(until, stop_at_error=stop)
            how = "to_error" if stop else "to_failure" if until else "whole"
            cpu[how] = time.process_time() - c
            events[how] = r.events
            if until is None and not stop:
                end_s, ended = r.end_ps / 1e12, all(x is not None for x in r.jobs[0].end)
                err = r.error_ps
            if stop:
                assert r.end_ps == err, (r.end_ps, err)  # stopped where the whole run erred
        row = {
            "case": "campaign-restart-cost",
            "gpus": fj.gpus,
            "failure_free_cpu_s": round(healthy, 2),
            "failure_free_step_ms": round(step / 1e9, 6),
            "failure_at_share_of_step": frac,
            "iteration_ends": ended,
            "gives_up_s": round(end_s, 6),
            "first_error_s": None if err is None else round(err / 1e12, 6),
            "cpu_s_whole_run": round(cpu["whole"], 2),
            "cpu_s_to_failure": round(cpu["to_failure"], 2),
            "cpu_s_to_first_error": round(cpu["to_error"], 2),
            "events": [events["whole"], events["to_failure"], events["to_error"]],
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def _profile_groups(st: Any) -> tuple[dict[str, float], dict[str, float], int]:
    """A profiled flow-level run's time (``pstats.Stats`` ``st``) by group of the run
    loop's callees, as shares of the run; the shares of the DCQCN trajectories, ECMP
    draws and new routes within them; the flows made."""

    raw: dict[Any, Any] = st.stats
    loop = next(k for k in raw if k[2] == "_run" and k[0].endswith("model.py"))
    total = raw[loop][3]
    groups: dict[str, float] = {"run loop itself": raw[loop][2]}
    for func, (_cc, _nc, _tt, _ct, callers) in raw.items():
        if loop in callers:
            name = PROFILE_GROUPS.get(func[2], "numpy and other calls in the loop")
            groups[name] = groups.get(name, 0.0) + callers[loop][3]
    inside = {
        "DCQCN trajectories": sum(v[3] for k, v in raw.items() if k[2] == "dcqcn_share"),
        "ECMP draws (ecmp_hash)": sum(v[3] for k, v in raw.items() if k[2] == "ecmp_hash"),
        "new routes (_route_new)": sum(v[3] for k, v in raw.items() if k[2] == "_route_new"),
    }
    # the flow objects: the model's __init__ called most (once per flow made)
    inits = [v[1] for k, v in raw.items() if k[2] == "__init__" and k[0].endswith("model.py")]
    flows = max(inits, default=0)
    return (
        {k: round(v / total, 4) for k, v in sorted(groups.items())},
        {k: round(v / total, 4) for k, v in inside.items()},
        flows,
    )


def campaign_profile(transport: str) -> dict[str, Any]:
    """One folded failure-free iteration of scenarios/training/campaign-131072.toml under
    cProfile (module doc, ``campaign-profile``): CPU seconds of the campaign's set-up,
    the folded model's build and its run, and the run's time by group of callees of
    the run loop (PROFILE_GROUPS; ``run loop itself``: its own time), with the DCQCN
    trajectories and ECMP draws within them."""
    import cProfile
    import pstats

    from openmrc.flow import model as fm
    from openmrc.pipeline import campaign as cp

    c0 = time.process_time()
    setup = cp.load(
        str(ROOT / "scenarios" / "training" / "campaign-131072.toml"),
        hours=1.0,
        seed=1,
        transports=[transport],
    )
    fj = setup.folds[transport]
    c1 = time.process_time()
    got = fj.folded(frozenset())
    assert got is not None
    model, _ = got
    c2 = time.process_time()
    prof = cProfile.Profile()
    prof.enable()
    res = model.run()
    prof.disable()
    c3 = time.process_time()
    shares, inside, flows = _profile_groups(pstats.Stats(prof))
    return {
        "case": "campaign-profile",
        "transport": transport,
        "compiled": not str(fm.__file__).endswith(".py"),
        "gpus": fj.tp * fj.pp * 2 * (fj.spec.hosts_per_t0 // fj.tp),
        "step_ms": round(max(e for e in res.jobs[0].end if e is not None) / 1e9, 6),
        "setup_cpu_s": round(c1 - c0, 2),
        "build_cpu_s": round(c2 - c1, 2),
        "run_cpu_s_profiled": round(c3 - c2, 2),
        "flows_made": flows,
        "events": res.events,
        "share_of_run": shares,
        "inside_share_of_run": inside,
        "peak_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--case",
        action="append",
        choices=[
            "agreement",
            "roce-seeds",
            "packet-noise",
            "roce-64",
            "campaign-check",
            "dcqcn",
            "dcqcn-series",
            "dcqcn-arrivals",
            *TIMED,
            "flow-scale",
            *SCALED,
            "fold-check",
            "campaign-plan",
            "campaign-profile",
            "campaign-restart-cost",
        ],
    )
    ap.add_argument("--gpus", type=int, default=1024, help="flow-scale: GPUs (default 1024)")
    ap.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument(
        "--moe", action="store_true", help="flow-scale, fold-check: the MoE job (moe-ep-128)"
    )
    ap.add_argument("--hours", type=float, default=24.0, help="campaign-plan: hours (default 24)")
    ap.add_argument("--hpt", type=int, default=32, help="fold-check: hosts per T0 (default 32)")
    ap.add_argument(
        "--narrow",
        type=int,
        default=None,
        help="fold-check: kept blocks run representative replicas, N kept either side "
        "of each one set apart (openmrc.flow.fold.narrow_replicas)",
    )
    ap.add_argument(
        "--fold",
        type=int,
        default=1,
        help="flow-scale / flow-N: fold the DP replicas (openmrc.flow.fold) keeping this "
        "many blocks either side of a fault's (default 1); -1: simulate every replica",
    )
    ap.add_argument(
        "--micro",
        type=int,
        default=0,
        help="flow-scale / flow-N: micro-batches per replica (default: the scenario's)",
    )
    ap.add_argument("--seeds", default="1-2", help="agreement: seeds A-B (default 1-2)")
    ap.add_argument(
        "--flips",
        type=int,
        default=8,
        help="packet-noise: runs per seed with the coin flips redrawn",
    )
    ap.add_argument("--big", action="store_true", help="agreement: also gpt-1b-64 (minutes)")
    ap.add_argument("--job", help="agreement: only this job (small-8, chakra-8.toml, ...)")
    ap.add_argument("--transport", choices=["mrc", "roce"], help="agreement: only this one")
    ap.add_argument("--fault", choices=["no", "yes"], help="agreement: only without / with")
    ap.add_argument("--out", type=Path, help="also write every result to this JSON file")
    ap.add_argument(
        "--set",
        action="append",
        metavar="KEY.PATH=VALUE",
        help="campaign-check: a scenario override (repeatable), e.g. fabric.t0s=16",
    )
    ap.add_argument(
        "--ring-messages",
        action="store_true",
        help="flow level: RoCE ring steps as messages of their own (FluidModel.ring_messages)",
    )
    ap.add_argument(
        "--ring-weights",
        action="store_true",
        help="flow level: RoCE ring hop flows weighted by their messages ready "
        "(FluidModel.ring_weights)",
    )
    ap.add_argument(
        "--reuse",
        choices=["on", "off"],
        help="flow level: RoCE's refills reuse the kept sets of flows, or walk at every "
        "refill (FluidModel.reuse_component; default on)",
    )
    ap.add_argument(
        "--reuse-budget",
        type=float,
        metavar="B",
        help="flow level: a kept set refills at most B times its flows before it is walked "
        "again (FluidModel.reuse_budget; inf: no bound)",
    )
    args = ap.parse_args()
    refill: list[str] = []
    if args.reuse is not None or args.reuse_budget is not None:
        refill_reuse(args.reuse, args.reuse_budget)
        refill += [] if args.reuse is None else ["--reuse", args.reuse]
        refill += [] if args.reuse_budget is None else ["--reuse-budget", str(args.reuse_budget)]
    if args.ring_messages:
        ring_messages()
    if args.ring_weights:
        ring_weights()
    out: list[dict[str, Any]] = []
    for case in args.case or ["agreement"]:
        if case == "agreement":
            agreement(
                _seeds(args.seeds),
                args.big,
                out,
                args.job,
                (args.transport,) if args.transport else ("mrc", "roce"),
                (args.fault == "yes",) if args.fault else (False, True),
            )
        elif case == "roce-64":
            roce_64(_seeds(args.seeds), out)
        elif case == "campaign-check":
            campaign_check(
                _seeds(args.seeds),
                args.job,
                (args.transport,) if args.transport else ("mrc", "roce"),
                out,
                args.set,
            )
        elif case == "packet-noise":
            packet_noise(_seeds(args.seeds), args.flips, out)
        elif case == "roce-seeds":
            roce_seeds(range(_seeds(args.seeds)[0], _seeds(args.seeds)[-1] + 1))
        elif case == "dcqcn":
            dcqcn()
        elif case == "dcqcn-series":
            dcqcn_series()
        elif case == "dcqcn-arrivals":
            dcqcn_arrivals()
        elif case == "campaign-plan":
            out += campaign_plan(_seeds(args.seeds), args.hours)
        elif case == "campaign-restart-cost":
            out += campaign_restart_cost()
        elif case == "campaign-profile":
            row = campaign_profile(args.transport or "roce")
            print(json.dumps(row), flush=True)
            out.append(row)
        elif case == "fold-check":
            for tr in [args.transport] if args.transport else ["mrc", "roce"]:
                row = fold_check(args.gpus, tr, max(0, args.fold), args.hpt, args.moe, args.narrow)
                print(json.dumps(row), flush=True)
                out.append(row)
        elif case == "flow-scale" or case in SCALED:
            gpus, moe = SCALED.get(case, (args.gpus, args.moe))
            if args.in_process:
                row = scaled_one(gpus, args.transport or "mrc", args.fold, moe, args.micro)
                print(json.dumps(row), flush=True)
                continue
            trs = [args.transport] if args.transport else ["mrc", "roce"]
            out += scaled(case, gpus, trs, args.fold, moe, args.micro, refill)
        else:
            row = _timed(case, *TIMED[case])
            print(json.dumps(row), flush=True)
            out.append(row)
    if args.out:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
