"""RoCEv2 reliable connection, sans-IO: go-back-N, local ACK timeout, DCQCN.

This is the comparison baseline, not MRC.  It models what a commodity RoCEv2
NIC does for RDMA WRITEs on one RC queue pair:

* **One path per QP.**  Every packet of a QP carries the QP's UDP source port
  (``sport``); switches hash the 5-tuple, so a QP follows one ECMP path.  A
  connection made of several QPs stripes its messages over them round-robin
  (NCCL-style); that is the driver's business (:class:`RoceSender` is one QP).
* **Go-back-N.**  The receiver (:class:`RoceReceiver`) accepts only the
  expected PSN.  On the first packet beyond a gap it sends one NAK (sequence
  error) carrying the expected PSN and stays silent about later ones until the
  gap is filled; duplicates are re-ACKed.  In-order packets are ACKed every
  ``ack_every`` packets, at a message's end, and whenever ``ack_delay_ps`` has
  passed since the last ACK (so a slowly paced QP is ACKed packet by packet).
  The sender rewinds to the NAKed PSN and resends everything from there, at
  most ``window_packets`` PSNs beyond the oldest unacknowledged one.
* **Retransmission timeout.**  On expiry the sender rewinds to the oldest
  unacknowledged PSN.  With ``adaptive_retransmission`` (the default, as
  ConnectX NICs ship: NVIDIA's "Adaptive Retransmission") the first timeout is
  short, ``adp_time_base_ps x 2**k`` with ``k`` drawn per QP from
  ``adp_init_exp .. adp_init_exp + adp_init_range - 1``; each expiry without
  progress doubles it, capped at the QP's local ACK timeout ``4.096 us x 2**t``
  (:func:`ack_timeout_ps`); progress resets it to the initial value; the QP
  goes to the error state after ``retries x`` the local ACK timeout without
  progress; with ``slow_restart`` each expiry also cuts the QP's DCQCN rate as
  a CNP would.  Without it the timeout is the local ACK timeout and the QP errors
  after ``retries`` consecutive expiries without progress.  Either way the
  outstanding messages of an errored QP complete in error.
* **DCQCN** (:class:`Dcqcn`, the reaction point; the notification point is in
  :class:`RoceReceiver`): a CNP when a data packet arrives ECN-marked, at most
  every ``cnp_interval_ps`` per QP (``cnp_per_port``: per receiving NIC port); the sender cuts ``rc *= 1 - alpha/2``
  (remembering the target ``rt = rc``), updates ``alpha`` as an EWMA with gain
  ``g`` on a timer, and raises the rate on a rate-increase timer: fast recovery
  (``rc = (rc + rt)/2``), then additive (``rt += R_AI``), then hyper
  (``rt += i * R_HAI``) stages.  The timers are evaluated lazily (exactly, from
  elapsed time) so they cost no simulator events.  The sender is paced at
  ``rc``.

Nothing here reads a clock: every method takes ``now`` (integer picoseconds).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field, fields

from mypy_extensions import mypyc_attr

from ..wire.packets import DataPacket, Opcode, Packet

#: Bytes below the payload of a RoCEv2 WRITE packet (IP size): IPv6 40 + UDP 8
#: + BTH 12 + RETH 16 + ICRC 4.  Ethernet framing is added by the links.
ROCE_DATA_HEADER_BYTES = 80


def default_pfc_xoff_bytes(rate_bps: float) -> int:
    """The PFC XOFF threshold of a switch ingress port fed at ``rate_bps`` when the
    scenario sets none: 512 KB at 100 Gb/s, scaled by the rate (the packet baseline's
    ports, :mod:`openmrc.baselines.fabric`, and the flow level's budget for it,
    :class:`openmrc.flow.model.FluidModel`)."""
    return int(512 * 1024 * rate_bps / 100e9)


#: ACK / NAK: IPv6 40 + UDP 8 + BTH 12 + AETH 4 + ICRC 4.
ROCE_ACK_BYTES = 68
#: CNP: IPv6 40 + UDP 8 + BTH 12 + 16 reserved + ICRC 4.
ROCE_CNP_BYTES = 80
#: Local ACK timeout unit: 4.096 us in picoseconds.
ACK_TIMEOUT_UNIT_PS = 4_096_000
#: DCQCN's reference link rate: published parameters are given at 25 Gb/s.
DCQCN_REFERENCE_BPS = 25e9


def ack_timeout_ps(t: int) -> int:
    """The local ACK timeout ``4.096 us x 2**t`` in picoseconds."""
    if not isinstance(t, int) or isinstance(t, bool) or not 0 <= t <= 31:
        raise ValueError(f"ack timeout exponent: must be an integer in 0..31, got {t!r}")
    return ACK_TIMEOUT_UNIT_PS << t


# ----- packets ---------------------------------------------------------------------------
@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # as the packet classes: copy_packet
class RoceData(DataPacket):
    """A RoCEv2 WRITE packet.  ``src``/``dst`` are host indices, ``sport`` the QP's UDP port.

    ``va`` is the byte offset of the payload in the destination buffer,
    ``last`` marks the last packet of a message.  It is a
    :class:`~openmrc.wire.packets.DataPacket` so that ports queue, mark and
    account it as data (never trimmed: RoCE fabrics do not trim).
    """

    __slots__ = ("dst", "last", "sport", "src")

    def __init__(
        self,
        qp: int,
        psn: int,
        msn: int,
        offset: int,
        length: int,
        last: bool,
        src: int,
        dst: int,
        sport: int,
        payload: bytes | None = None,
        ts: int = 0,
        retransmit: bool = False,
    ) -> None:
        opcode = Opcode.WRITE_LAST if last else Opcode.WRITE_MIDDLE
        DataPacket.__init__(
            self, qp, 0, opcode, psn, msn, offset, 0, length, payload, ts=ts, retransmit=retransmit
        )
        self.size = ROCE_DATA_HEADER_BYTES + length
        self.src = src
        self.dst = dst
        self.sport = sport
        self.last = last


@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # as the packet classes: copy_packet
class RoceAck(Packet):
    """ACK (``nak=False``: every PSN below ``psn`` arrived) or sequence-error NAK (expects ``psn``)."""

    __slots__ = ("dst", "nak", "psn", "sport", "src")

    def __init__(self, qp: int, psn: int, nak: bool, src: int, dst: int, sport: int) -> None:
        Packet.__init__(self, qp, 0, ROCE_ACK_BYTES)
        self.psn = psn
        self.nak = nak
        self.src = src
        self.dst = dst
        self.sport = sport


@mypyc_attr(allow_interpreted_subclasses=True, acyclic=True)  # as the packet classes: copy_packet
class Cnp(Packet):
    """Congestion notification packet, from the receiver (NP) to the sender (RP) of a QP."""

    __slots__ = ("dst", "sport", "src")

    def __init__(self, qp: int, src: int, dst: int, sport: int) -> None:
        Packet.__init__(self, qp, 0, ROCE_CNP_BYTES)
        self.src = src
        self.dst = dst
        self.sport = sport


# ----- configuration ---------------------------------------------------------------------
def _check_int(owner: str, name: str, value: object, lo: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < lo:
        raise ValueError(f"{owner}.{name}: must be an integer >= {lo}, got {value!r}")


def _check_num(owner: str, name: str, value: object, lo: float, hi: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < lo:
        raise ValueError(f"{owner}.{name}: must be a number >= {lo}, got {value!r}")
    if hi is not None and value > hi:
        raise ValueError(f"{owner}.{name}: must be <= {hi}, got {value!r}")


@dataclass
class DcqcnConfig:
    """DCQCN parameters.  Defaults: NVIDIA ConnectX firmware defaults (profile ``"nvidia"``).

    Profiles (:data:`DCQCN_PROFILES`, :meth:`profile`): ``"nvidia"`` -- the
    ConnectX-4-and-later defaults NVIDIA documents (docs/baselines.md cites
    them): absolute rates, byte counter 32767 B, the target rate kept across a
    burst of CNPs and clamped to the current rate by a CNP that follows a rate
    increase; ``"nvidia-v1"`` -- the same constants with openmrc's earlier
    reading of the clamp flags (only a timer increase clamps the target, so the
    target stays at line rate under sustained congestion); ``"hpcc"`` -- the
    constants used before, from the HPCC artifact's Mellanox model (rates given at 25 Gb/s and
    scaled by ``line / 25 Gb/s``, no byte counter, target rate reset on every
    CNP), which over-react at 100-400 Gb/s.
    ``byte_counter_bytes`` = 0 disables the byte counter (timer-only increase).
    Rates are ``*_25g_bps`` for history; with ``scale_rates`` false they are
    absolute b/s.
    """

    enabled: bool = True
    #: alpha gain: ConnectX dce_tcp_g = 1019 means alpha <- (1019/1024) alpha (+ 5/1024)
    g: float = 5 / 1024
    initial_alpha: float = 1023 / 1024
    alpha_interval_ps: int = 1_000_000
    rate_increase_interval_ps: int = 300_000_000
    fast_recovery_stages: int = 1
    additive_stages: int = 1
    rai_25g_bps: float = 5e6
    rhai_25g_bps: float = 50e6
    min_rate_25g_bps: float = 1e6
    byte_counter_bytes: int = 32767
    cnp_interval_ps: int = 4_000_000
    #: True: the CNP spacing holds per receiving NIC port, shared by all its QPs (a
    #: literal reading of ConnectX ``min_time_between_cnps``, "Minimum time between
    #: sending cnps from the port"); False (default): per QP, as the DCQCN paper's
    #: NP.  Per port, 7 flows into one port already fall into PFC, against the
    #: paper's "about 10" held by the default profile (docs/baselines.md).
    cnp_per_port: bool = False
    #: On every CNP set the target rate to the current rate (the DCQCN paper).
    #: NVIDIA ConnectX (``clamp_tgt_rate`` = 0) does not: a burst of CNPs with no
    #: increase in between keeps the target at the rate from before the burst.  The
    #: target is set to the current rate only if the rate rose since the previous
    #: CNP: by the byte counter (``clamp_after_byte_increase``), or by the timer
    #: when ``clamp_after_time_increase`` (``clamp_tgt_rate_after_time_inc`` = 1:
    #: "updated if the rate was increased due to the timer, and not only due to the
    #: byte counter").  docs/baselines.md explains the reading.
    clamp_target_rate: bool = False
    clamp_after_time_increase: bool = True
    #: False: byte-counter increases never clamp the target (openmrc's earlier
    #: reading of the ConnectX flags; the target then stays at line rate through a
    #: congestion episode and DCQCN barely throttles at 400 Gb/s).
    clamp_after_byte_increase: bool = True
    #: Scale ``*_25g_bps`` rates by line / 25 Gb/s (the HPCC artifact); False:
    #: they are absolute (b/s), as a ConnectX NIC's ``rpg_ai_rate`` etc. are.
    scale_rates: bool = False

    @classmethod
    def profile(cls, name: str, **overrides: object) -> DcqcnConfig:
        """The named parameter set (:data:`DCQCN_PROFILES`) with ``overrides``."""
        if name not in DCQCN_PROFILES:
            raise ValueError(
                f"dcqcn_profile: must be one of {', '.join(DCQCN_PROFILES)}, got {name!r}"
            )
        return cls(**{**DCQCN_PROFILES[name], **overrides})  # type: ignore[arg-type]

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        o = "DcqcnConfig"
        _check_num(o, "g", self.g, 0.0, 1.0)
        if self.g == 0:
            raise ValueError(f"{o}.g: must be positive")
        _check_num(o, "initial_alpha", self.initial_alpha, 0.0, 1.0)
        _check_int(o, "alpha_interval_ps", self.alpha_interval_ps, 1)
        _check_int(o, "rate_increase_interval_ps", self.rate_increase_interval_ps, 1)
        _check_int(o, "fast_recovery_stages", self.fast_recovery_stages, 0)
        _check_int(o, "additive_stages", self.additive_stages, 0)
        for name in ("rai_25g_bps", "rhai_25g_bps", "min_rate_25g_bps"):
            _check_num(o, name, getattr(self, name), 0.0)
        if self.min_rate_25g_bps <= 0:
            raise ValueError(f"{o}.min_rate_25g_bps: must be positive")
        _check_int(o, "byte_counter_bytes", self.byte_counter_bytes, 0)
        _check_int(o, "cnp_interval_ps", self.cnp_interval_ps, 0)
        for name in (
            "clamp_target_rate",
            "clamp_after_time_increase",
            "clamp_after_byte_increase",
            "scale_rates",
            "enabled",
            "cnp_per_port",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{o}.{name}: must be true or false, got {getattr(self, name)!r}")


@dataclass
class RoceConfig:
    """One RoCE (or IB-style, ``dcqcn.enabled=False``) connection's parameters.

    ``qps`` QPs per connection, messages striped round-robin; ``timeout_exp``
    is ``t`` of the local ACK timeout (NCCL: 20, about 4.3 s); ``retries``
    expiries without progress before the QP errors (NCCL: 7).  ``ack_every``:
    the receiver ACKs every that many in-order packets and every message end.
    ``window_packets`` bounds the PSNs outstanding (a NIC's PSN window).
    """

    mtu: int = 4096
    qps: int = 1
    timeout_exp: int = 20
    retries: int = 7
    ack_every: int = 16
    #: The receiver also ACKs an in-order packet that arrives this long or longer
    #: after its previous ACK (0: count-based coalescing only).  A responder that
    #: waited for ``ack_every`` packets however slowly they came would let a QP
    #: that DCQCN paces below about 1 Gb/s outlive the first adaptive timeout with
    #: nothing lost.  NVIDIA does not publish its responder's coalescing; 16 us is
    #: openmrc's choice (docs/baselines.md gives the reasoning).
    ack_delay_ps: int = 16_000_000
    #: PSNs outstanding at most: the transmit window.  ConnectX ships it off
    #: (``roce_tx_window_en = 0``; its size is not published), so the default is
    #: only the bound of the 24-bit PSN space.
    window_packets: int = 1 << 22
    #: NVIDIA ConnectX "Adaptive Retransmission" (``roce_adp_retrans_en``, on by
    #: default): short first timeouts that double on each expiry without
    #: progress, capped at the local ACK timeout.  docs/baselines.md gives the
    #: sources and the choice of the initial value.
    adaptive_retransmission: bool = True
    #: ADP ``time_base``: the firmware minimum is 4 us; the IB unit 4.096 us here.
    adp_time_base_ps: int = 4_096_000
    #: ADP ``timeout_init_low_bound`` / ``timeout_init_range_size``: the first
    #: timeout is ``time_base x 2**k``, k uniform in [low, low + range - 1] per QP:
    #: 524 us or 1.05 ms.  NVIDIA does not publish its default profile; this is the
    #: smallest range with no spurious expiry in lossless PFC runs (docs/baselines.md).
    adp_init_exp: int = 7
    adp_init_range: int = 2
    #: ConnectX "slow restart" (``roce_slow_restart_en = 1`` in NVIDIA's ROCE_ACCL
    #: example): a retransmission timeout cuts the QP's DCQCN rate as one CNP
    #: would (the NIC counts "slow restart generated CNP packets").  No effect
    #: without DCQCN.
    slow_restart: bool = True
    #: Receiver: PSNs up to this far beyond the expected one are placed out of
    #: order and remembered (0: strict go-back-N, every such packet is dropped).
    #: Adaptive-routing InfiniBand NICs place out-of-order packets of RDMA WRITEs.
    reorder_window: int = 0
    #: First UDP source port; QP ``i`` of a connection uses ``sport_base + i`` plus
    #: a per-connection offset chosen by the driver.
    sport_base: int = 49152
    dcqcn: DcqcnConfig = field(default_factory=DcqcnConfig)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad field."""
        o = "RoceConfig"
        _check_int(o, "mtu", self.mtu, 1)
        _check_int(o, "qps", self.qps, 1)
        ack_timeout_ps(self.timeout_exp)
        _check_int(o, "retries", self.retries, 0)
        _check_int(o, "ack_every", self.ack_every, 1)
        _check_int(o, "ack_delay_ps", self.ack_delay_ps, 0)
        _check_int(o, "window_packets", self.window_packets, 1)
        for name in ("adaptive_retransmission", "slow_restart"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{o}.{name}: must be true or false, got {getattr(self, name)!r}")
        _check_int(o, "adp_time_base_ps", self.adp_time_base_ps, 1)
        _check_int(o, "adp_init_exp", self.adp_init_exp, 0)
        _check_int(o, "adp_init_range", self.adp_init_range, 1)
        if self.adp_init_exp + self.adp_init_range > 32:
            raise ValueError(
                f"{o}.adp_init_exp: adp_init_exp + adp_init_range must be at most 32, "
                f"got {self.adp_init_exp} + {self.adp_init_range}"
            )
        _check_int(o, "reorder_window", self.reorder_window, 0)
        _check_int(o, "sport_base", self.sport_base, 0)
        if not isinstance(self.dcqcn, DcqcnConfig):
            raise ValueError(f"{o}.dcqcn: must be a DcqcnConfig, got {self.dcqcn!r}")
        self.dcqcn.validate()

    @classmethod
    def from_dict(cls, params: dict[str, object]) -> RoceConfig:
        """Build from flat keys: RoceConfig fields plus ``dcqcn_<field>`` / ``dcqcn`` (bool).

        ``dcqcn_profile`` picks a named parameter set (:data:`DCQCN_PROFILES`)
        that the ``dcqcn_<field>`` keys then adjust.
        """
        own = {f.name for f in fields(cls)} - {"dcqcn"}
        dc_names = {f.name for f in fields(DcqcnConfig)}
        kw: dict[str, object] = {}
        dc: dict[str, object] = {}
        profile = "nvidia"
        for key, value in params.items():
            if key in own:
                kw[key] = value
            elif key == "dcqcn" and isinstance(value, bool):
                dc["enabled"] = value
            elif key == "dcqcn_profile":
                if not isinstance(value, str) or value not in DCQCN_PROFILES:
                    raise ValueError(
                        f"RoceConfig.dcqcn_profile: must be one of "
                        f"{', '.join(DCQCN_PROFILES)}, got {value!r}"
                    )
                profile = value
            elif key.startswith("dcqcn_") and key[6:] in dc_names:
                dc[key[6:]] = value
            else:
                raise ValueError(f"RoceConfig: unknown parameter {key!r}")
        cfg = cls(**kw, dcqcn=DcqcnConfig.profile(profile, **dc))  # type: ignore[arg-type]
        cfg.validate()
        return cfg


#: Named DCQCN parameter sets; the keys are DcqcnConfig fields (see docs/baselines.md).
DCQCN_PROFILES: dict[str, dict[str, object]] = {
    "nvidia": {},
    "nvidia-v1": {"clamp_after_byte_increase": False},
    "hpcc": {
        "g": 1 / 256,
        "initial_alpha": 1.0,
        "min_rate_25g_bps": 10e6,
        "byte_counter_bytes": 0,
        "clamp_target_rate": True,
        "clamp_after_time_increase": False,
        "scale_rates": True,
    },
}


# ----- DCQCN reaction point --------------------------------------------------------------
class Dcqcn:
    """DCQCN rate state of one QP at line rate ``line_bps`` (lazily timed, see module doc)."""

    __slots__ = (
        "_alpha_t",
        "_byte_inc",
        "_bytes",
        "_cnp_flag",
        "_inc_t",
        "_timer_inc",
        "alpha",
        "b_stage",
        "cfg",
        "cnps",
        "line",
        "min_rate",
        "rai",
        "rc",
        "rhai",
        "rt",
        "t_stage",
    )

    def __init__(self, cfg: DcqcnConfig, line_bps: float, now: int = 0) -> None:
        cfg.validate()
        if line_bps <= 0:
            raise ValueError(f"Dcqcn: line rate must be positive, got {line_bps}")
        scale = line_bps / DCQCN_REFERENCE_BPS if cfg.scale_rates else 1.0
        self.cfg = cfg
        self.line = float(line_bps)
        self.rai = cfg.rai_25g_bps * scale
        self.rhai = cfg.rhai_25g_bps * scale
        self.min_rate = min(self.line, cfg.min_rate_25g_bps * scale)
        self.rc = self.line
        self.rt = self.line
        self.alpha = cfg.initial_alpha
        self._alpha_t = now
        self._cnp_flag = False
        self._inc_t = now
        self._bytes = 0
        self.t_stage = 0
        self.b_stage = 0
        self.cnps = 0
        #: the timer raised the rate since the last CNP
        self._timer_inc = False
        #: the byte counter raised the rate since the last CNP
        self._byte_inc = False

    def rate(self, now: int) -> float:
        """The current rate ``rc`` (b/s) at ``now``, after applying elapsed timer events."""
        self._advance(now)
        return self.rc

    def _advance(self, now: int) -> None:
        cfg = self.cfg
        ai = cfg.alpha_interval_ps
        k = (now - self._alpha_t) // ai
        if k > 0:
            g = cfg.g
            a = self.alpha
            n = k
            if self._cnp_flag:
                a = (1 - g) * a + g
                self._cnp_flag = False
                n -= 1
            if n:
                a *= (1 - g) ** n
            self.alpha = a
            self._alpha_t += k * ai
        if self.rc >= self.line and self.rt >= self.line:
            self._inc_t = now
            return
        ri = cfg.rate_increase_interval_ps
        while self._inc_t + ri <= now:
            self._inc_t += ri
            self.t_stage += 1
            self._timer_inc = True
            self._increase()
            if self.rc >= self.line and self.rt >= self.line:
                self._inc_t = now
                break

    def _increase(self) -> None:
        cfg = self.cfg
        f = cfg.fast_recovery_stages
        if cfg.byte_counter_bytes:
            hi, lo = max(self.t_stage, self.b_stage), min(self.t_stage, self.b_stage)
        else:
            hi = lo = self.t_stage
        if hi <= f:
            pass  # fast recovery: approach the target only
        elif lo > f + cfg.additive_stages:
            self.rt += self.rhai * (lo - f - cfg.additive_stages)
        else:
            self.rt += self.rai
        if self.rt > self.line:
            self.rt = self.line
        rc = (self.rt + self.rc) / 2
        self.rc = rc if rc < self.line else self.line

    def next_increase_ps(self) -> int | None:
        """When the rate-increase timer next raises the rate (None at line rate)."""
        if self.rc >= self.line and self.rt >= self.line:
            return None
        return self._inc_t + self.cfg.rate_increase_interval_ps

    def on_cnp(self, now: int) -> None:
        """A CNP arrived: cut the rate by ``alpha/2`` and restart the increase stages."""
        self.cnps += 1
        self.cut(now)

    def cut(self, now: int) -> None:
        """Cut the rate as a CNP does (a CNP, or the sender's own slow restart)."""
        self._advance(now)
        cfg = self.cfg
        if (
            cfg.clamp_target_rate
            or (cfg.clamp_after_byte_increase and self._byte_inc)
            or (cfg.clamp_after_time_increase and self._timer_inc)
        ):
            self.rt = self.rc
        self._timer_inc = False
        self._byte_inc = False
        rc = self.rc * (1 - self.alpha / 2)
        self.rc = rc if rc > self.min_rate else self.min_rate
        self._cnp_flag = True
        self._inc_t = now
        self._bytes = 0
        self.t_stage = 0
        self.b_stage = 0

    def on_sent(self, nbytes: int, now: int) -> None:
        """Count sent bytes for the byte counter (no-op when it is disabled)."""
        bc = self.cfg.byte_counter_bytes
        if not bc or (self.rc >= self.line and self.rt >= self.line):
            return
        self._bytes += nbytes
        while self._bytes >= bc:
            self._bytes -= bc
            self._advance(now)
            self.b_stage += 1
            self._byte_inc = True
            self._increase()


# ----- requester (sender) side of a QP ---------------------------------------------------
class RoceSender:
    """The sending half of one QP: message segmentation, go-back-N, timeout, pacing.

    ``post(msg_id, offset, length)`` queues a WRITE of ``length`` bytes at
    ``offset`` of the connection's buffer; ``data`` (optional) is the source
    buffer for real payloads.  The driver calls :meth:`ready`,
    :meth:`next_send_ps`, :meth:`build`, :meth:`receive`, :meth:`deadline`
    and :meth:`on_timer`; finished messages appear in :attr:`completed` as
    ``(msg_id, ok, now)``.  With adaptive retransmission the initial timeout's
    exponent is ``adp_init_exp`` plus ``adp_offset`` if given, else plus a draw
    from ``rng`` below ``adp_init_range`` (none without ``rng``).
    """

    __slots__ = (
        "_pending",
        "_progress_t",
        "_segs",
        "_timer",
        "_tx_bits",
        "_tx_start",
        "cfg",
        "completed",
        "data",
        "dcqcn",
        "dst",
        "line",
        "next_tx",
        "nxt",
        "qp",
        "retries_left",
        "rewinds",
        "rto",
        "rto_init",
        "rto_max",
        "sent_bytes",
        "sent_pkts",
        "slow_restarts",
        "sport",
        "src",
        "state",
        "timeouts",
        "una",
        "wire_overhead",
    )

    def __init__(
        self,
        cfg: RoceConfig,
        qp: int,
        src: int,
        dst: int,
        sport: int,
        line_bps: float,
        data: bytes | bytearray | None = None,
        now: int = 0,
        wire_overhead: int = 38,
        rng: random.Random | None = None,
        adp_offset: int | None = None,
    ) -> None:
        cfg.validate()
        self.cfg = cfg
        self.qp = qp
        self.src = src
        self.dst = dst
        self.sport = sport
        self.line = float(line_bps)
        self.data = data
        self.wire_overhead = wire_overhead
        self.dcqcn = Dcqcn(cfg.dcqcn, line_bps, now) if cfg.dcqcn.enabled else None
        #: the local ACK timeout: the fixed timeout, or the adaptive one's cap
        self.rto_max = ack_timeout_ps(cfg.timeout_exp)
        if cfg.adaptive_retransmission:
            k = cfg.adp_init_exp
            if adp_offset is not None:
                k += adp_offset
            elif rng is not None and cfg.adp_init_range > 1:
                k += rng.randrange(cfg.adp_init_range)
            self.rto_init = min(cfg.adp_time_base_ps << k, self.rto_max)
        else:
            self.rto_init = self.rto_max
        #: the current retransmission timeout
        self.rto = self.rto_init
        #: when the QP last made progress (ACKed a new PSN)
        self._progress_t = now
        #: per PSN: (msg_id, offset, length, last)
        self._segs: list[tuple[int, int, int, bool]] = []
        #: messages not yet acknowledged: (end PSN, msg_id)
        self._pending: deque[tuple[int, int]] = deque()
        self.una = 0
        self.nxt = 0
        self.next_tx = now
        #: the last packet's pacing start and size, to re-pace it when the rate rises
        self._tx_start = now
        self._tx_bits = 0
        self._timer: int | None = None
        self.retries_left = cfg.retries
        self.state = "ok"
        self.completed: list[tuple[int, bool, int]] = []
        self.timeouts = 0
        #: timeouts that cut the DCQCN rate (``slow_restart``)
        self.slow_restarts = 0
        self.rewinds = 0
        self.sent_pkts = 0
        self.sent_bytes = 0

    # -- work ------------------------------------------------------------------------
    def post(self, msg_id: int, offset: int, length: int) -> None:
        """Queue one WRITE message of ``length`` bytes at buffer ``offset``."""
        if self.state != "ok":
            self.completed.append((msg_id, False, -1))
            return
        if length <= 0:
            raise ValueError(f"RoceSender.post: length must be positive, got {length}")
        mtu = self.cfg.mtu
        segs = self._segs
        end = offset + length
        off = offset
        while off < end:
            n = min(mtu, end - off)
            segs.append((msg_id, off, n, off + n >= end))
            off += n
        self._pending.append((len(segs), msg_id))

    def ready(self) -> bool:
        """Whether a packet is waiting to go (ignoring pacing)."""
        return (
            self.state == "ok"
            and self.nxt < len(self._segs)
            and self.nxt - self.una < self.cfg.window_packets
        )

    def next_send_ps(self, now: int | None = None) -> int:
        """When to look at this QP again: its pacer's release time, or a rate increase before it.

        With ``now``, a rate that rose since the last packet (DCQCN timer or
        byte counter) shortens the pacing gap, as a NIC's rate limiter
        re-evaluates at its current rate; ``next_tx`` may move earlier.
        """
        dc = self.dcqcn
        if dc is None or now is None or self.next_tx <= now:
            return self.next_tx
        t = self._tx_start + int(self._tx_bits * 1e12 / dc.rate(now))
        if t < self.next_tx:
            self.next_tx = t if t > now else now
        inc = dc.next_increase_ps()
        return inc if inc is not None and inc < self.next_tx else self.next_tx

    def idle(self) -> bool:
        """Nothing left to send or acknowledge."""
        return self.una >= len(self._segs)

    def build(self, now: int) -> RoceData:
        """Make the next packet (PSN ``nxt``), advance, arm the timer, charge the pacer."""
        psn = self.nxt
        msg_id, off, n, last = self._segs[psn]
        payload = None if self.data is None else bytes(self.data[off : off + n])
        pkt = RoceData(
            self.qp,
            psn,
            msg_id,
            off,
            n,
            last,
            self.src,
            self.dst,
            self.sport,
            payload,
            ts=now,
        )
        self.nxt = psn + 1
        self.sent_pkts += 1
        wb = pkt.size + self.wire_overhead
        self.sent_bytes += wb
        if self._timer is None:
            # nothing was outstanding: the no-progress clock starts now
            self._timer = now + self.rto
            self._progress_t = now
        dc = self.dcqcn
        if dc is not None:
            rate = dc.rate(now)
            dc.on_sent(wb, now)
            start = self.next_tx if self.next_tx > now else now
            self._tx_start = start
            self._tx_bits = wb * 8
            self.next_tx = start + int(wb * 8e12 / rate)
        return pkt

    # -- feedback --------------------------------------------------------------------
    def receive(self, pkt: Packet, now: int) -> None:
        """Handle an ACK, a NAK or a CNP addressed to this QP."""
        if isinstance(pkt, Cnp):
            if self.dcqcn is not None:
                self.dcqcn.on_cnp(now)
            return
        if not isinstance(pkt, RoceAck) or self.state != "ok":
            return
        psn = pkt.psn
        if psn > self.nxt:
            self.nxt = psn  # an ACK overtaken by a rewind: no need to resend those
        if psn > self.una:
            self.una = psn
            self.retries_left = self.cfg.retries
            self.rto = self.rto_init
            self._progress_t = now
            pend = self._pending
            while pend and pend[0][0] <= psn:
                self.completed.append((pend.popleft()[1], True, now))
            self._timer = now + self.rto if self.una < self.nxt else None
        if pkt.nak and self.nxt > self.una:
            self.nxt = self.una
            self.rewinds += 1
            self._timer = now + self.rto

    def deadline(self) -> int | None:
        """When :meth:`on_timer` must run next (the local ACK timeout), or None."""
        return self._timer

    def on_timer(self, now: int) -> None:
        """Retransmission timeout: rewind to the oldest unacknowledged PSN, or fail the QP.

        Adaptive: the QP fails once ``retries`` local ACK timeouts have passed
        without progress (NVIDIA: "QP.ack_timeout * QP.retry_num"), else the
        timeout doubles up to the local ACK timeout.  Fixed: it fails after
        ``retries`` expiries in a row without progress.
        """
        t = self._timer
        if t is None or now < t or self.state != "ok":
            return
        if self.una >= len(self._segs):
            self._timer = None
            return
        self.timeouts += 1
        if self.cfg.adaptive_retransmission:
            failed = now - self._progress_t >= self.cfg.retries * self.rto_max
        else:
            failed = self.retries_left == 0
        if failed:
            self.state = "error"
            self._timer = None
            while self._pending:
                self.completed.append((self._pending.popleft()[1], False, now))
            return
        self.retries_left -= 1
        self.nxt = self.una
        self.rewinds += 1
        if self.cfg.adaptive_retransmission:
            self.rto = min(self.rto * 2, self.rto_max)
        self._timer = now + self.rto
        dc = self.dcqcn
        if dc is not None and self.cfg.slow_restart:
            self.slow_restarts += 1
            dc.cut(now)


# ----- responder (receiver) side of a QP -------------------------------------------------
class CnpPacer:
    """When the notification point last sent a CNP: one per QP, or one shared per NIC port."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: int | None = None

    def allow(self, now: int, interval: int) -> bool:
        """Whether a CNP may go at ``now`` (and if so, count it as sent)."""
        last = self.last
        if last is None or now - last >= interval:
            self.last = now
            return True
        return False


class RoceReceiver:
    """The receiving half of one QP: in-order acceptance, ACK/NAK, CNP generation.

    ``buffer`` (optional) receives real payloads at each packet's offset.
    :meth:`receive` returns the packets to send back (ACK, NAK and/or CNP).
    """

    __slots__ = (
        "_cnp",
        "_last_ack",
        "_ooo",
        "_since_ack",
        "buffer",
        "cfg",
        "cnps",
        "dups",
        "expected",
        "host",
        "messages",
        "nak_sent",
        "naks",
        "out_of_order",
        "peer",
        "qp",
        "rcvd_bytes",
        "sport",
    )

    def __init__(
        self,
        cfg: RoceConfig,
        qp: int,
        host: int,
        peer: int,
        sport: int,
        buffer: bytearray | None = None,
        cnp_pacer: CnpPacer | None = None,
    ) -> None:
        self.cfg = cfg
        self.qp = qp
        self.host = host
        self.peer = peer
        self.sport = sport
        self.buffer = buffer
        self.expected = 0
        self.nak_sent = False
        #: PSN -> last-of-message flag, for packets placed beyond ``expected``
        self._ooo: dict[int, bool] = {}
        self._since_ack = 0
        #: when the last ACK went (None: never)
        self._last_ack: int | None = None
        #: the CNP spacing: the port's shared pacer (``cnp_per_port``) or this QP's own
        self._cnp = cnp_pacer if cnp_pacer is not None and cfg.dcqcn.cnp_per_port else CnpPacer()
        self.rcvd_bytes = 0
        self.messages = 0
        self.naks = 0
        self.dups = 0
        self.out_of_order = 0
        self.cnps = 0

    def receive(self, pkt: RoceData, now: int) -> list[Packet]:
        """Accept or refuse one data packet; return the replies."""
        out: list[Packet] = []
        dc = self.cfg.dcqcn
        if pkt.ecn and dc.enabled and self._cnp.allow(now, dc.cnp_interval_ps):
            self.cnps += 1
            out.append(Cnp(self.qp, self.host, self.peer, self.sport))
        psn = pkt.psn
        exp = self.expected
        if psn == exp or exp < psn < exp + self.cfg.reorder_window:
            if psn != exp:
                if psn in self._ooo:
                    self.dups += 1
                    return out
                self.out_of_order += 1
                self._ooo[psn] = pkt.last
            self.rcvd_bytes += pkt.length
            buf = self.buffer
            if buf is not None and pkt.payload is not None:
                buf[pkt.va : pkt.va + pkt.length] = pkt.payload
            if psn != exp:
                return out
            self.nak_sent = False
            last = pkt.last
            ack = False
            while True:
                exp += 1
                self._since_ack += 1
                if last:
                    self.messages += 1
                    ack = True
                if exp not in self._ooo:
                    break
                last = self._ooo.pop(exp)
            self.expected = exp
            cfg = self.cfg
            last_ack = self._last_ack
            if (
                ack
                or self._since_ack >= cfg.ack_every
                or (
                    cfg.ack_delay_ps > 0
                    and (last_ack is None or now - last_ack >= cfg.ack_delay_ps)
                )
            ):
                self._since_ack = 0
                self._last_ack = now
                out.append(self._ack(False))
        elif psn > exp:
            self.out_of_order += 1
            if not self.nak_sent:
                self.nak_sent = True
                self.naks += 1
                out.append(self._ack(True))
        else:
            self.dups += 1
            out.append(self._ack(False))
        return out

    def _ack(self, nak: bool) -> RoceAck:
        return RoceAck(self.qp, self.expected, nak, self.host, self.peer, self.sport)


def received_bytes(receivers: list[RoceReceiver]) -> int:
    """The payload bytes ``receivers`` (a connection's receiving QPs) took in all.

    The experiment's sampler reads this for every flow under way at every tick (in a
    64-rank all-to-all with 16 QPs, 32,256 flows of 16 QPs each): a loop here, in a
    compiled module, rather than in the interpreted experiment."""
    got = 0
    for r in receivers:
        got += r.rcvd_bytes
    return got


def received_messages(receivers: list[RoceReceiver]) -> int:
    """The messages ``receivers`` (a connection's receiving QPs) placed in all."""
    got = 0
    for r in receivers:
        got += r.messages
    return got
