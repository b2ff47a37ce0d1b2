"""uet-htsim connection matrices (``.cm`` files), so htsim users bring their traffic unchanged.

The format, as uet-htsim's ``ConnectionMatrix::load`` reads it (re-implemented
here from its description; nothing is copied)::

    Nodes 4                     # header lines, in any order; '#' starts a comment line
    Connections 3
    Triggers 1
    0->1 id 1 start 0 size 100000 send_done_trigger 1
    1->2 id 2 trigger 1 size 100000 recv_done_trigger 1
    2->3 id 3 start 10 size 50000
    trigger id 1 oneshot        # or: multishot, barrier count N

A flow line is ``SRC->DST`` then ``key value`` pairs: ``size`` (bytes),
``start`` or ``trigger`` (exactly one), ``id`` (non-zero, needed for a
trigger target), ``send_done_trigger`` / ``recv_done_trigger`` (the trigger
this flow activates when its sender completes / when all its data arrived),
``prio`` and ``msg`` (accepted, ignored: openmrc has no priorities or message
ids).

**Unit of ``start``: microseconds.** The loader keeps the number as written
(its comment calls it picoseconds), but uet-htsim's ``main_uec.cpp`` turns it
into simulator time with ``timeFromUs((uint32_t)crt->start)``: whole
microseconds, any fraction truncated.  openmrc does the same by default
(``fractional_start=True`` keeps the fraction).

Triggers (uet-htsim ``trigger.h``): a *oneshot* trigger starts all its targets
at its first activation; a *multishot* trigger starts its next target (in file
order) at each activation; a *barrier* of ``count`` N starts all its targets at
the N-th activation.  These become ``FlowSpec`` dependencies (``deps`` for
``recv_done_trigger`` activators, ``send_deps`` for ``send_done_trigger`` ones,
``deps_needed`` for the count).  ``failure`` lines name htsim fat-tree
switches and are refused: use ``[[faults]]``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from . import FlowSpec, check_dependencies

US = 1_000_000


class CmError(ValueError):
    """A .cm file is wrong; the message names the line and the reason."""


@dataclass
class CmFlow:
    """One flow line of a connection matrix."""

    line: int
    src: int
    dst: int
    size: int
    start_us: float | None = None
    flow_id: int = 0
    trigger: int = 0
    send_done_trigger: int = 0
    recv_done_trigger: int = 0


@dataclass
class CmTrigger:
    """One trigger: ``oneshot``, ``multishot`` or ``barrier`` (with ``count``)."""

    trigger_id: int
    kind: str
    count: int = 0
    line: int = 0


@dataclass
class ConnectionMatrix:
    """A parsed .cm file."""

    nodes: int
    flows: list[CmFlow]
    triggers: dict[int, CmTrigger] = field(default_factory=dict)

    def flow_specs(
        self, message: int = 1 << 20, placement: list[int] | None = None
    ) -> list[FlowSpec]:
        """The flows as FlowSpecs (node ``n`` on host ``placement[n]``, default host ``n``).

        Triggers become dependencies; see the module docstring.
        """
        host = list(range(self.nodes)) if placement is None else placement
        if len(host) < self.nodes:
            raise CmError(f"placement: needs a host for each of the {self.nodes} nodes")
        activators: dict[int, list[tuple[int, str]]] = {}
        for i, f in enumerate(self.flows):
            if f.send_done_trigger:
                activators.setdefault(f.send_done_trigger, []).append((i, "send"))
            if f.recv_done_trigger:
                activators.setdefault(f.recv_done_trigger, []).append((i, "recv"))
        targets: dict[int, list[int]] = {}
        for i, f in enumerate(self.flows):
            if f.trigger:
                targets.setdefault(f.trigger, []).append(i)
        out = []
        for i, f in enumerate(self.flows):
            deps: tuple[int, ...] = ()
            send_deps: tuple[int, ...] = ()
            needed = 0
            start_ps = 0
            if f.trigger:
                trig = self.triggers[f.trigger]
                acts = [(j, how) for j, how in activators.get(f.trigger, []) if j != i]
                deps = tuple(j for j, how in acts if how == "recv")
                send_deps = tuple(j for j, how in acts if how == "send")
                if trig.kind == "oneshot":
                    needed = 1
                elif trig.kind == "multishot":
                    needed = targets[f.trigger].index(i) + 1
                else:
                    needed = trig.count
                if needed > len(acts):
                    raise CmError(
                        f"line {f.line}: trigger {f.trigger} ({trig.kind}) needs {needed} "
                        f"activations to start this flow but only {len(acts)} flows activate it"
                    )
                if needed == len(acts):
                    needed = 0  # all of them
            else:
                start_ps = round((f.start_us or 0.0) * US)
            out.append(
                FlowSpec(
                    host[f.src],
                    host[f.dst],
                    f.size,
                    start_ps=start_ps,
                    message=min(message, f.size),
                    name=f"cm{f.flow_id or i}:{f.src}->{f.dst}",
                    deps=deps,
                    send_deps=send_deps,
                    deps_needed=needed,
                )
            )
        try:
            check_dependencies(out)
        except ValueError as exc:
            raise CmError(f"triggers: {exc}") from None
        return out


def _int(tok: list[str], i: int, line: int, what: str, lo: int = 0) -> int:
    if i >= len(tok):
        raise CmError(f"line {line}: {what} needs a value")
    try:
        v = int(tok[i])
    except ValueError:
        raise CmError(f"line {line}: {what} must be an integer, got {tok[i]!r}") from None
    if v < lo:
        raise CmError(f"line {line}: {what} must be >= {lo}, got {v}")
    return v


def parse_cm(text: str, fractional_start: bool = False) -> ConnectionMatrix:
    """Parse the text of a .cm file (raises :class:`CmError` naming the line)."""
    header: dict[str, int] = {}
    flows: list[CmFlow] = []
    triggers: dict[int, CmTrigger] = {}
    referenced: dict[int, int] = {}
    ids: set[int] = set()
    ntriggers = 0
    for n, raw in enumerate(text.splitlines(), 1):
        tok = raw.split()
        if not tok or tok[0].startswith("#"):
            continue
        head = tok[0]
        if head in ("Nodes", "Connections", "Triggers", "Failures"):
            if flows or ntriggers:
                raise CmError(f"line {n}: {head} after the first flow or trigger")
            header[head] = _int(tok, 1, n, head)
        elif "->" in head:
            a, _, b = head.partition("->")
            try:
                f = CmFlow(n, int(a), int(b), 0)
            except ValueError:
                raise CmError(f"line {n}: {head!r} is not SRC->DST") from None
            size = None
            i = 1
            while i < len(tok):
                key = tok[i]
                if key == "start":
                    if i + 1 >= len(tok):
                        raise CmError(f"line {n}: start needs a value")
                    try:
                        v = float(tok[i + 1])
                    except ValueError:
                        raise CmError(
                            f"line {n}: start must be a number, got {tok[i + 1]!r}"
                        ) from None
                    if v < 0:
                        raise CmError(f"line {n}: start must be >= 0, got {v}")
                    f.start_us = v if fractional_start else float(int(v))
                elif key == "size":
                    size = _int(tok, i + 1, n, "size", 1)
                elif key == "id":
                    f.flow_id = _int(tok, i + 1, n, "id", 1)
                    if f.flow_id in ids:
                        raise CmError(f"line {n}: flow id {f.flow_id} used twice")
                    ids.add(f.flow_id)
                elif key == "trigger":
                    f.trigger = _int(tok, i + 1, n, "trigger", 1)
                elif key == "send_done_trigger":
                    f.send_done_trigger = _int(tok, i + 1, n, key, 1)
                elif key == "recv_done_trigger":
                    f.recv_done_trigger = _int(tok, i + 1, n, key, 1)
                elif key in ("prio", "msg"):
                    pass  # no priorities / message ids in openmrc
                else:
                    raise CmError(f"line {n}: unknown token {key!r}")
                i += 2
            if size is None:
                raise CmError(f"line {n}: a flow needs a size")
            f.size = size
            if f.trigger and f.start_us is not None:
                raise CmError(f"line {n}: both a start time and a trigger")
            if not f.trigger and f.start_us is None:
                raise CmError(f"line {n}: no start method (start or trigger)")
            if f.trigger and not f.flow_id:
                raise CmError(f"line {n}: a trigger target needs an id")
            for t in (f.trigger, f.send_done_trigger, f.recv_done_trigger):
                if t:
                    referenced.setdefault(t, n)
            flows.append(f)
        elif head == "trigger":
            ntriggers += 1
            tid, kind, count = 0, "", 0
            i = 1
            while i < len(tok):
                key = tok[i]
                if key == "id":
                    tid = _int(tok, i + 1, n, "id", 1)
                    i += 2
                elif key == "count":
                    count = _int(tok, i + 1, n, "count", 1)
                    i += 2
                elif key in ("oneshot", "multishot", "barrier"):
                    if kind:
                        raise CmError(f"line {n}: a trigger has one type, got {kind} and {key}")
                    kind = key
                    i += 1
                else:
                    raise CmError(f"line {n}: unknown trigger token {key!r}")
            if not tid:
                raise CmError(f"line {n}: trigger with no id")
            if not kind:
                raise CmError(f"line {n}: trigger {tid} with no type")
            if kind == "barrier" and not count:
                raise CmError(f"line {n}: barrier trigger {tid} needs a count")
            if tid in triggers:
                raise CmError(f"line {n}: trigger {tid} defined twice")
            triggers[tid] = CmTrigger(tid, kind, count, n)
        elif head == "failure":
            raise CmError(
                f"line {n}: failure lines name htsim fat-tree switches; use [[faults]] instead"
            )
        else:
            raise CmError(f"line {n}: unknown line {head!r}")
    nodes = header.get("Nodes")
    if nodes is None:
        raise CmError("Nodes: missing header line")
    if header.get("Connections", len(flows)) != len(flows):
        raise CmError(f"Connections: says {header['Connections']}, the file has {len(flows)}")
    if header.get("Triggers", ntriggers) != ntriggers:
        raise CmError(f"Triggers: says {header['Triggers']}, the file has {ntriggers}")
    for f in flows:
        for what, v in (("source", f.src), ("destination", f.dst)):
            if not 0 <= v < nodes:
                raise CmError(f"line {f.line}: {what} {v} is not a node in 0..{nodes - 1}")
        if f.src == f.dst:
            raise CmError(f"line {f.line}: source and destination are both {f.src}")
    for t, n in referenced.items():
        if t not in triggers:
            raise CmError(f"line {n}: trigger {t} referenced but not specified")
    return ConnectionMatrix(nodes, flows, triggers)


def load_cm(path: str | Path, fractional_start: bool = False) -> ConnectionMatrix:
    """Read a .cm file."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise CmError(f"{p}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise CmError(f"{p}: not a text file") from None
    return parse_cm(text, fractional_start)


__all__ = ["CmError", "ConnectionMatrix", "load_cm", "parse_cm"]
