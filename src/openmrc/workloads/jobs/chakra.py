"""Chakra execution traces (MLCommons ``et_def.proto``): read the way astra-sim runs them, and written.

An ET file holds one rank's trace: a sequence of length-prefixed protobuf
messages (a varint byte count, then the message), a ``GlobalMetadata`` first,
then ``Node`` s.  openmrc decodes and encodes the protobuf wire format itself
(varints, length-delimited fields, packed repeated fields), so it needs no
protobuf package.  Fields read: ``Node`` ``id`` (1), ``name`` (2), ``type``
(3), ``ctrl_deps`` (4) and ``data_deps`` (5) (both are dependencies),
``duration_micros`` (7), ``inputs`` (8, a METADATA node's process groups),
``attr`` (10, every ``AttributeProto`` value type).

How each node runs is astra-sim's (``Workload::issue``, replay mode):

* ``COMP_NODE``: ``duration_micros`` (openmrc's own traces carry
  ``duration_ps``); one GPU kernel at a time per rank, and one CPU op
  (``is_cpu_op``) at a time, in the order the dependencies allow;
* ``MEM_LOAD_NODE`` / ``MEM_STORE_NODE``: ``duration_micros`` (astra-sim
  times ``tensor_size`` with its remote-memory model instead);
* ``METADATA_NODE`` and ``INVALID_NODE``: no time; a METADATA node's inputs
  may declare process groups (``pg_name``, ``ranks``), as PyTorch traces do;
* ``COMM_SEND_NODE`` (``comm_dst``, ``comm_size``, ``comm_tag``) and
  ``COMM_RECV_NODE`` (``comm_src``, ``comm_tag``): the k-th send from a
  rank to another with one tag and the k-th receive of it are one transfer;
* ``COMM_COLL_NODE`` (``comm_type``, ``comm_size``): ALL_REDUCE, ALL_GATHER,
  REDUCE_SCATTER (and REDUCE_SCATTER_BLOCK), ALL_TO_ALL over the group its
  ``pg_name`` names (``""`` or ``"0"``: every rank; others from astra-sim's
  communicator-group file or a METADATA node; openmrc's own traces name the
  ranks in ``pg_ranks``).  BROADCAST runs as NCCL's ring broadcast from the
  group's first rank (astra-sim replays its duration instead); BARRIER waits
  for every rank of the group and moves nothing.  REDUCE, GATHER and SCATTER
  are refused, as astra-sim refuses them.  ``comm_size`` is the whole buffer.

A collective is the same task on all of its ranks: the k-th collective over
a group on one rank is the k-th over that group on every other, and it
starts when every rank reached it.  A collective over a one-rank group (or
of 0 bytes) moves nothing: it is counted in :attr:`JobGraph.skipped`.  Every
error (an unknown type, a dangling dependency, a rank outside the job, a
missing rank's file) is one line naming the file and the node.
"""

from __future__ import annotations

import itertools
import struct
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .graph import JobGraph, Task
from .model import JobError

INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE = 0, 1, 2, 3, 4
COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 5, 6, 7
NODE_TYPES = {
    0: "INVALID_NODE",
    1: "METADATA_NODE",
    2: "MEM_LOAD_NODE",
    3: "MEM_STORE_NODE",
    4: "COMP_NODE",
    5: "COMM_SEND_NODE",
    6: "COMM_RECV_NODE",
    7: "COMM_COLL_NODE",
    8: "STORAGE_NODE",
    9: "BATCH_NODE",
    10: "CHECKPOINT_NODE",
}
#: node types openmrc runs (every type of the current et_def.proto).
RUN_TYPES = frozenset(range(8))
#: CollectiveCommType names.
COLL_NAMES = {
    0: "ALL_REDUCE",
    1: "REDUCE",
    2: "ALL_GATHER",
    3: "GATHER",
    4: "SCATTER",
    5: "BROADCAST",
    6: "ALL_TO_ALL",
    7: "REDUCE_SCATTER",
    8: "REDUCE_SCATTER_BLOCK",
    9: "BARRIER",
}
BARRIER = 9
#: CollectiveCommType values openmrc runs, as its task kinds.
COLL_KINDS = {
    0: "allreduce",
    2: "allgather",
    5: "broadcast",
    6: "alltoall",
    7: "reducescatter",
    8: "reducescatter",
    9: "barrier",
}
#: openmrc's kinds as the codes its writer uses.
COLL_TYPES = {0: "allreduce", 2: "allgather", 6: "alltoall", 7: "reducescatter"}
COLL_CODES = {v: k for k, v in COLL_TYPES.items()}


# ----- protobuf wire format ----------------------------------------------------------------
class _Bad(ValueError):
    pass


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if pos >= len(buf):
            raise _Bad("truncated varint")
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7
        if shift > 63:
            raise _Bad("varint longer than 10 bytes")


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message: ints, or bytes for length-delimited."""
    out: list[tuple[int, int, Any]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise _Bad("field number 0")
        val: int | bytes
        if wt == 0:
            val, pos = _varint(buf, pos)
        elif wt == 1:
            if pos + 8 > len(buf):
                raise _Bad("truncated 64-bit field")
            val = buf[pos : pos + 8]
            pos += 8
        elif wt == 2:
            n, pos = _varint(buf, pos)
            if pos + n > len(buf):
                raise _Bad("truncated length-delimited field")
            val = buf[pos : pos + n]
            pos += n
        elif wt == 5:
            if pos + 4 > len(buf):
                raise _Bad("truncated 32-bit field")
            val = buf[pos : pos + 4]
            pos += 4
        else:
            raise _Bad(f"wire type {wt}")
        out.append((num, wt, val))
    return out


def _ints(wt: int, val: Any) -> list[int]:
    """A repeated integer field's values (packed or not)."""
    if wt == 0:
        return [val]
    if wt != 2:
        raise _Bad("an integer list in a non-integer field")
    out = []
    pos = 0
    while pos < len(val):
        v, pos = _varint(val, pos)
        out.append(v)
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _zigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


def _scalar(num: int, wt: int, val: Any) -> Any:
    """One ``AttributeProto`` value field (or a list element) as a Python value."""
    if num in (7, 9) and wt == 0:
        return _signed(val)
    if num in (11, 13) and wt == 0:
        return val
    if num in (15, 17) and wt == 0:
        return _zigzag(val)
    if num == 27 and wt == 0:
        return bool(val)
    if num in (29, 31) and wt == 2:
        return val.decode("utf-8", "replace")
    if num == 3 and wt == 1:
        return struct.unpack("<d", val)[0]
    if num == 5 and wt == 5:
        return struct.unpack("<f", val)[0]
    if num in (19, 23) and wt == 5:
        return struct.unpack("<I" if num == 19 else "<i", val)[0]
    if num in (21, 25) and wt == 1:
        return struct.unpack("<Q" if num == 21 else "<q", val)[0]
    return None


#: list fields of AttributeProto: (field number, element type as its scalar field).
_LISTS = {
    8: 7,
    10: 9,
    12: 11,
    14: 13,
    16: 15,
    18: 17,
    28: 27,
    30: 29,
    32: 31,
    4: 3,
    6: 5,
    20: 19,
    22: 21,
    24: 23,
    26: 25,
}


def _list(elem: int, buf: bytes) -> list[Any]:
    out: list[Any] = []
    for n2, w2, v2 in _fields(buf):
        if n2 != 1:
            continue
        if w2 == 2 and elem not in (29, 31):  # packed
            if elem in (3, 21, 25):
                out.extend(_scalar(elem, 1, v2[i : i + 8]) for i in range(0, len(v2) - 7, 8))
            elif elem in (5, 19, 23):
                out.extend(_scalar(elem, 5, v2[i : i + 4]) for i in range(0, len(v2) - 3, 4))
            else:
                out.extend(_scalar(elem, 0, x) for x in _ints(2, v2))
        else:
            out.append(_scalar(elem, w2, v2))
    return out


def _attr(buf: bytes) -> tuple[str, Any]:
    name = ""
    value: Any = None
    for num, wt, val in _fields(buf):
        if num == 1 and wt == 2:
            name = val.decode("utf-8", "replace")
        elif num in _LISTS and wt == 2:
            value = _list(_LISTS[num], val)
        elif num != 2:
            v = _scalar(num, wt, val)
            if v is not None:
                value = v
    return name, value


def _enc_varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _enc_field(num: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _enc_varint(num << 3) + _enc_varint(value)
    return _enc_varint((num << 3) | 2) + _enc_varint(len(value)) + value


def _enc_attr(name: str, value: int | str | list[int]) -> bytes:
    body = _enc_field(1, name.encode())
    if isinstance(value, list):
        packed = b"".join(_enc_varint(v) for v in value)
        body += _enc_field(10, _enc_field(1, packed))
    elif isinstance(value, str):
        body += _enc_field(29, value.encode())
    else:
        body += _enc_field(9, value)
    return body


# ----- reading --------------------------------------------------------------------------------
class _Node:
    __slots__ = ("attrs", "deps", "dur_ps", "id", "inputs", "name", "type")

    def __init__(self) -> None:
        self.id = 0
        self.name = ""
        self.type = 0
        self.deps: list[int] = []
        self.dur_ps = 0
        self.attrs: dict[str, Any] = {}
        self.inputs = ""

    def where(self, path: str | Path) -> str:
        """The node as an error names it: file, id and name."""
        return f"{path}: node {self.id} ({self.name or 'unnamed'})"


def read_nodes(path: str | Path) -> list[_Node]:
    """The nodes of one ET file (errors name the file and the node)."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise JobError(f"{p}: cannot read ({exc.strerror})") from None
    pos = 0
    msgs: list[bytes] = []
    try:
        while pos < len(data):
            n, pos = _varint(data, pos)
            if pos + n > len(data):
                raise _Bad(f"a message of {n} bytes, {len(data) - pos} left: truncated")
            msgs.append(data[pos : pos + n])
            pos += n
    except _Bad as exc:
        raise JobError(f"{p}: byte {pos}: not a Chakra ET file ({exc})") from None
    if not msgs:
        raise JobError(f"{p}: empty (a GlobalMetadata and nodes expected)")
    nodes = []
    for i, msg in enumerate(msgs[1:], start=1):
        node = _Node()
        try:
            dur_us = 0
            for num, wt, val in _fields(msg):
                if num == 1 and wt == 0:
                    node.id = val
                elif num == 2 and wt == 2:
                    node.name = val.decode("utf-8", "replace")
                elif num == 3 and wt == 0:
                    node.type = val
                elif num in (4, 5):
                    node.deps.extend(_ints(wt, val))
                elif num == 7 and wt == 0:
                    dur_us = val
                elif num == 8 and wt == 2:
                    for n2, w2, v2 in _fields(val):
                        if n2 == 1 and w2 == 2:
                            node.inputs = v2.decode("utf-8", "replace")
                elif num == 10 and wt == 2:
                    k, v = _attr(val)
                    node.attrs[k] = v
        except _Bad as exc:
            raise JobError(f"{p}: message {i}: malformed node ({exc})") from None
        given = node.attrs.get("duration_ps")
        node.dur_ps = int(given) if isinstance(given, int) and given >= 0 else dur_us * 1_000_000
        if node.type not in NODE_TYPES:
            raise JobError(f"{node.where(p)}: unknown node type {node.type}")
        if node.type not in RUN_TYPES:
            raise JobError(
                f"{node.where(p)}: unsupported node type {NODE_TYPES[node.type]} "
                f"(openmrc runs {', '.join(NODE_TYPES[t] for t in sorted(RUN_TYPES))})"
            )
        nodes.append(node)
    return nodes


def _tag(node: _Node, where: str) -> int:
    v = node.attrs.get("comm_tag", 0)
    if v is None:
        return 0
    if not isinstance(v, int) or isinstance(v, bool):
        raise JobError(f"{node.where(where)}: comm_tag must be an integer, got {v!r}")
    return v


def _need_int(node: _Node, key: str, where: str) -> int:
    v = node.attrs.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise JobError(f"{node.where(where)}: needs attribute {key}")
    return v


def pg_metadata(text: str) -> dict[str, list[int]]:
    """Process groups a METADATA node carries (PyTorch's ``pg_name`` / ``ranks`` list in its
    inputs, as astra-sim reads them); {} when it carries none."""
    import json

    for cand in (text, text[2:-2]):
        try:
            items = json.loads(cand)
        except (ValueError, RecursionError):
            continue
        if not isinstance(items, list):
            continue
        out = {}
        for item in items:
            ranks = item.get("ranks") if isinstance(item, dict) else None
            if (
                isinstance(ranks, list)
                and "pg_name" in item
                and all(isinstance(x, int) and not isinstance(x, bool) for x in ranks)
            ):
                out[str(item["pg_name"])] = list(ranks)
        return out
    return {}


def read_comm_groups(path: str | Path) -> dict[str, list[int]]:
    """astra-sim's communicator-group file (``--comm-group-configuration``): a JSON object
    of group id -> the ranks in it."""
    import json

    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise JobError(f"{p}: cannot read ({exc.strerror})") from None
    except ValueError as exc:
        raise JobError(f"{p}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise JobError(f"{p}: a JSON object of group id -> list of ranks expected")
    out: dict[str, list[int]] = {}
    for k, v in doc.items():
        if not str(k).isdigit() or not isinstance(v, list) or not v:
            raise JobError(f"{p}: group {k!r}: a numeric id and a non-empty list of ranks expected")
        if any(not isinstance(x, int) or isinstance(x, bool) for x in v):
            raise JobError(f"{p}: group {k}: ranks must be integers")
        out[str(int(k))] = list(v)
    return out


class _Units:
    """The tasks being assembled from every rank's nodes: a unit is one task."""

    def __init__(self, files: Sequence[str | Path]) -> None:
        self.files = files
        self.units: list[dict[str, Any]] = []
        self.unit_of: dict[tuple[int, int], int] = {}
        self.skipped: dict[str, int] = {}

    def new(self, kind: str, ranks: tuple[int, ...], name: str, **kw: Any) -> int:
        self.units.append({"kind": kind, "ranks": ranks, "name": name, "members": [], **kw})
        return len(self.units) - 1

    def join(self, u: int, key: tuple[int, int]) -> None:
        self.units[u]["members"].append(key)
        self.unit_of[key] = u


def read(
    files: Sequence[str | Path],
    name: str = "chakra",
    gpus_per_server: int = 8,
    comm_groups: dict[str, list[int]] | None = None,
) -> JobGraph:
    """One job from one ET file per rank (``files[r]`` is rank ``r``), as astra-sim runs it.

    ``comm_groups``: astra-sim's communicator groups (``pg_name`` -> ranks), beside
    those the traces' METADATA nodes declare.
    """
    if not files:
        raise JobError("chakra: no trace files")
    n = len(files)
    per_rank = [read_nodes(f) for f in files]
    groups: dict[str, list[int]] = dict(comm_groups or {})
    for nodes in per_rank:
        for node in nodes:
            if node.type == METADATA_NODE and node.inputs:
                groups.update(pg_metadata(node.inputs))
    U = _Units(files)
    units = U.units
    coll_seq: dict[tuple[int, tuple[int, ...]], int] = {}
    coll_unit: dict[tuple[tuple[int, ...], int], int] = {}
    sends: dict[tuple[int, int, int], deque[tuple[int, tuple[int, int]]]] = {}
    recvs: dict[tuple[int, int, int], deque[tuple[int, tuple[int, int]]]] = {}
    lane_prev: dict[tuple[int, str], tuple[int, int]] = {}
    lane_deps: dict[tuple[int, int], tuple[int, int]] = {}
    recv_of: dict[int, int] = {}  # a receive's unit -> its transfer's
    for r, nodes in enumerate(per_rank):
        where = str(files[r])
        seen: set[int] = set()
        for node in nodes:
            if node.id in seen:
                raise JobError(f"{node.where(where)}: duplicate id")
            seen.add(node.id)
        ids = {node.id for node in nodes}
        for node in nodes:
            for d in node.deps:
                if d not in ids:
                    raise JobError(
                        f"{node.where(where)}: depends on node {d}, which is not in the file"
                    )
        for node in _rank_order(nodes, where):
            key = (r, node.id)
            if node.type in (INVALID_NODE, METADATA_NODE, MEM_LOAD_NODE, MEM_STORE_NODE, COMP_NODE):
                timed = node.type in (COMP_NODE, MEM_LOAD_NODE, MEM_STORE_NODE)
                U.join(
                    U.new(
                        "compute",
                        (r,),
                        node.name,
                        dur=node.dur_ps if timed else 0,
                        phase="compute" if timed else "wait",
                    ),
                    key,
                )
                if node.type == COMP_NODE:
                    # astra-sim runs one GPU kernel (and one CPU op) at a time per rank
                    lane = "cpu" if node.attrs.get("is_cpu_op") is True else "gpu"
                    if (r, lane) in lane_prev:
                        lane_deps[key] = lane_prev[(r, lane)]
                    lane_prev[(r, lane)] = key
            elif node.type == COMM_COLL_NODE:
                _collective(U, node, r, n, where, groups, coll_seq, coll_unit)
            elif node.type == COMM_SEND_NODE:
                dst = _need_int(node, "comm_dst", where)
                size = _need_int(node, "comm_size", where)
                if not 0 <= dst < n or dst == r:
                    raise JobError(
                        f"{node.where(where)}: comm_dst {dst} is not another rank of the {n}"
                    )
                pair = (r, dst, _tag(node, where))
                waiting = recvs.get(pair)
                if waiting:
                    u, _ = waiting.popleft()
                    units[u].update(size=size, name=node.name)
                else:
                    u = U.new("p2p", (r, dst), node.name, size=size)
                    sends.setdefault(pair, deque()).append((u, key))
                U.join(u, key)
            else:
                src = _need_int(node, "comm_src", where)
                if not 0 <= src < n or src == r:
                    raise JobError(
                        f"{node.where(where)}: comm_src {src} is not another rank of the {n}"
                    )
                pair = (src, r, _tag(node, where))
                pending = sends.get(pair)
                if pending:
                    u, _ = pending.popleft()
                else:
                    u = U.new("p2p", (src, r), node.name, size=None)
                    recvs.setdefault(pair, deque()).append((u, key))
                # astra-sim's sends are eager: the transfer waits for the sender only; the
                # receive ends when the bytes are in and its own dependencies are done
                done = U.new("compute", (r,), f"{node.name} received", dur=0, phase="wait")
                U.join(done, key)
                recv_of[done] = u
    for (src, _dst, tag), q in recvs.items():
        for _, (r, nid) in q:
            raise JobError(
                f"{files[r]}: node {nid}: receive from rank {src} tag {tag} has no matching "
                f"send in {files[src]}"
            )
    for (_src, dst, tag), q in sends.items():
        for _, (r, nid) in q:
            raise JobError(
                f"{files[r]}: node {nid}: send to rank {dst} tag {tag} has no matching "
                f"receive in {files[dst]}"
            )
    for (ranks, seq), u in coll_unit.items():
        have = {k[0] for k in units[u]["members"]}
        if len(have) != len(ranks):
            missing = [x for x in ranks if x not in have]
            r, nid = units[u]["members"][0]
            raise JobError(
                f"{files[r]}: node {nid}: collective #{seq} of group {list(ranks)} is missing "
                f"from rank {missing[0]} ({files[missing[0]]})"
            )
    # dependencies between units (data and control edges alike, and the compute lanes)
    deps: list[set[int]] = [set() for _ in units]
    for r, nodes in enumerate(per_rank):
        for node in nodes:
            key = (r, node.id)
            u = U.unit_of[key]
            for d in node.deps:
                du = U.unit_of[(r, d)]
                if du != u:
                    deps[u].add(du)
            if u in recv_of:
                deps[u].add(recv_of[u])
            if key in lane_deps:
                du = U.unit_of[lane_deps[key]]
                if du != u:
                    deps[u].add(du)
    order = _topo_stable(deps, len(units))
    if len(order) != len(units):
        placed = set(order)
        stuck = next(u for u in range(len(units)) if u not in placed)
        r, nid = units[stuck]["members"][0]
        raise JobError(
            f"{files[r]}: node {nid}: its dependencies form a cycle (across ranks: "
            "collectives or sends issued in different orders)"
        )
    g = JobGraph(name, n, gpus_per_server=gpus_per_server, skipped=dict(U.skipped))
    index: dict[int, int] = {}
    for u in order:
        unit = units[u]
        td = tuple(sorted(index[d] for d in deps[u]))
        kind = unit["kind"]
        if kind == "compute":
            t = Task("compute", unit["ranks"], td, unit["dur"], 0, unit["name"], unit["phase"])
        elif kind == "broadcast":
            ring = unit["ranks"]
            parts = tuple(
                g.add(Task("p2p", (a, b), td, 0, unit["size"], unit["name"], "comm"))
                for a, b in itertools.pairwise(ring)
            )
            t = Task("compute", (ring[0],), parts, 0, 0, f"{unit['name']} done", "wait")
        else:
            t = Task(kind, unit["ranks"], td, 0, unit["size"], unit["name"], "comm")
        index[u] = g.add(t)
    return g


def _rank_order(nodes: list[_Node], where: str) -> list[_Node]:
    """A rank's nodes in an order that respects their dependencies (file order first)."""
    pos = {node.id: i for i, node in enumerate(nodes)}
    deps = [{pos[d] for d in node.deps} - {i} for i, node in enumerate(nodes)]
    order = _topo_stable(deps, len(nodes))
    if len(order) != len(nodes):
        stuck = next(i for i in range(len(nodes)) if i not in set(order))
        raise JobError(f"{nodes[stuck].where(where)}: its dependencies form a cycle")
    return [nodes[i] for i in order]


def _collective(
    U: _Units,
    node: _Node,
    r: int,
    n: int,
    where: str,
    groups: dict[str, list[int]],
    coll_seq: dict[tuple[int, tuple[int, ...]], int],
    coll_unit: dict[tuple[tuple[int, ...], int], int],
) -> None:
    """A COMM_COLL_NODE of rank ``r``: the k-th over a group is the k-th on every member."""
    code = _need_int(node, "comm_type", where)
    if code not in COLL_NAMES:
        raise JobError(f"{node.where(where)}: unknown collective type {code}")
    if code not in COLL_KINDS:
        raise JobError(
            f"{node.where(where)}: collective {COLL_NAMES[code]} is not run (neither by "
            f"astra-sim); openmrc runs {', '.join(COLL_NAMES[c] for c in sorted(COLL_KINDS))}"
        )
    size = 0 if code == BARRIER else _need_int(node, "comm_size", where)
    given = node.attrs.get("pg_ranks")
    pg = node.attrs.get("pg_name")
    if given is not None:
        if not isinstance(given, list) or not all(
            isinstance(x, int) and not isinstance(x, bool) for x in given
        ):
            raise JobError(f"{node.where(where)}: pg_ranks must be a list of ranks")
        ranks = tuple(given)
        label = "pg_ranks"
    elif pg is None or str(pg) in ("", "0"):
        ranks, label = tuple(range(n)), "every rank"
    else:
        if str(pg) not in groups:
            raise JobError(
                f"{node.where(where)}: pg_name {pg!r} is not a communicator group (give "
                "workload.comm_groups, astra-sim's comm-group file, or a METADATA node's)"
            )
        ranks, label = tuple(groups[str(pg)]) or tuple(range(n)), f"pg {pg}"
    bad = [x for x in ranks if not 0 <= x < n]
    if bad:
        raise JobError(
            f"{node.where(where)}: {label} holds rank {bad[0]}, outside the job's {n} ranks"
        )
    if r not in ranks:
        raise JobError(f"{node.where(where)}: {label} {list(ranks)} does not hold rank {r}")
    kind = COLL_KINDS[code]
    reason = None
    if len(ranks) < 2:
        reason = f"{COLL_NAMES[code]} over a one-rank group ({label})"
    elif size == 0 and code != BARRIER:
        reason = f"{COLL_NAMES[code]} of 0 bytes"
    key = (r, node.id)
    if reason is not None or code == BARRIER:
        kind = "barrier"
    seq = coll_seq.get((r, ranks), 0)
    coll_seq[(r, ranks)] = seq + 1
    u = coll_unit.get((ranks, seq))
    if u is None:
        if reason is not None:
            U.skipped[reason] = U.skipped.get(reason, 0) + 1
        if kind == "barrier":
            u = U.new("compute", (ranks[0],), node.name, dur=0, phase="wait", coll=code, size=size)
        else:
            u = U.new(kind, ranks, node.name, size=size, coll=code)
        coll_unit[(ranks, seq)] = u
    elif U.units[u]["coll"] != code or U.units[u]["size"] != size:
        raise JobError(
            f"{node.where(where)}: collective #{seq} of group {list(ranks)} differs from the "
            "other ranks' (type or size)"
        )
    U.join(u, key)


def _topo_stable(deps: list[set[int]], n: int) -> list[int]:
    """A topological order that keeps lower unit numbers first where it can."""
    import heapq

    indeg = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in range(n)]
    for u, ds in enumerate(deps):
        for d in ds:
            users[d].append(u)
    heap = [u for u in range(n) if indeg[u] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        u = heapq.heappop(heap)
        out.append(u)
        for v in users[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, v)
    return out


# ----- writing --------------------------------------------------------------------------------
def write(graph: JobGraph, directory: str | Path, prefix: str = "") -> list[Path]:
    """One ET file per rank of ``graph`` (``<prefix>.<rank>.et``); their paths."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    stem = prefix or graph.name
    nodes: list[list[bytes]] = [[] for _ in range(graph.ranks)]
    node_id: dict[tuple[int, int], int] = {}  # (task, rank) -> node id on that rank
    counter = [0] * graph.ranks

    def add(rank: int, task_index: int, fields: bytes, deps: list[int]) -> None:
        nid = counter[rank]
        counter[rank] += 1
        node_id[(task_index, rank)] = nid
        packed = b"".join(_enc_varint(x) for x in deps)
        body = _enc_field(1, nid) + fields + (_enc_field(5, packed) if deps else b"")
        nodes[rank].append(body)

    for i, t in enumerate(graph.tasks):
        name = _enc_field(2, (t.label or t.kind).encode())
        if t.kind == "compute":
            r = t.ranks[0]
            deps = [node_id[(d, r)] for d in t.deps if (d, r) in node_id]
            fields = (
                name
                + _enc_field(3, COMP_NODE)
                + _enc_field(7, round(t.dur_ps / 1_000_000))
                + _enc_field(10, _enc_attr("duration_ps", t.dur_ps))
            )
            add(r, i, fields, deps)
        elif t.kind == "p2p":
            src, dst = t.ranks
            deps = [node_id[(d, src)] for d in t.deps if (d, src) in node_id]
            send = (
                name
                + _enc_field(3, COMM_SEND_NODE)
                + _enc_field(10, _enc_attr("comm_dst", dst))
                + _enc_field(10, _enc_attr("comm_size", t.size))
                + _enc_field(10, _enc_attr("comm_tag", i))
            )
            add(src, i, send, deps)
            recv = (
                name
                + _enc_field(3, COMM_RECV_NODE)
                + _enc_field(10, _enc_attr("comm_src", src))
                + _enc_field(10, _enc_attr("comm_size", t.size))
                + _enc_field(10, _enc_attr("comm_tag", i))
            )
            deps = [node_id[(d, dst)] for d in t.deps if (d, dst) in node_id]
            add(dst, i, recv, deps)
        else:
            for r in t.ranks:
                deps = [node_id[(d, r)] for d in t.deps if (d, r) in node_id]
                fields = (
                    name
                    + _enc_field(3, COMM_COLL_NODE)
                    + _enc_field(10, _enc_attr("comm_type", COLL_CODES[t.kind]))
                    + _enc_field(10, _enc_attr("comm_size", t.size))
                    + _enc_field(10, _enc_attr("pg_ranks", list(t.ranks)))
                )
                add(r, i, fields, deps)
    out = []
    meta = _enc_field(1, b"0.0.4") + _enc_field(2, _enc_attr("generator", "openmrc"))
    for r in range(graph.ranks):
        path = d / f"{stem}.{r}.et"
        blob = bytearray(_enc_varint(len(meta)) + meta)
        for body in nodes[r]:
            blob += _enc_varint(len(body)) + body
        path.write_bytes(bytes(blob))
        out.append(path)
    return out


def trace_files(spec: str | Path, base: Path | None = None) -> list[Path]:
    """The ET files a scenario names: a folder (``*.et``), a glob, or one file; rank order
    is the number before ``.et`` (``x.3.et`` is rank 3).  Several files must number the
    ranks 0 to n-1, each once: a missing rank's file is an error naming it."""
    p = Path(spec)
    if not p.is_absolute() and base is not None:
        p = base / p
    if p.is_dir():
        found = list(p.glob("*.et"))
    elif any(c in str(p) for c in "*?["):
        found = list(p.parent.glob(p.name))
    else:
        found = [p]
    if not found:
        raise JobError(f"{spec}: no Chakra trace files (*.et) there")
    if len(found) == 1:
        return found

    def rank(path: Path) -> int:
        stem = path.name[: -len(".et")] if path.name.endswith(".et") else path.name
        tail = stem.rsplit(".", 1)[-1]
        if not tail.isdigit():
            raise JobError(f"{path}: no rank in its name (name each rank's trace <name>.<rank>.et)")
        return int(tail)

    by_rank: dict[int, Path] = {}
    for f in sorted(found):
        r = rank(f)
        if r in by_rank:
            raise JobError(f"{f}: rank {r} has a second trace ({by_rank[r].name})")
        by_rank[r] = f
    for r in range(len(by_rank)):
        if r not in by_rank:
            last = max(by_rank)
            example = by_rank[last].name.replace(f".{last}.et", f".{r}.et")
            raise JobError(
                f"{spec}: rank {r}'s trace ({example}) is missing: the files number ranks "
                f"up to {last}, {len(by_rank)} files"
            )
    return [by_rank[r] for r in range(len(by_rank))]


__all__ = [
    "COLL_KINDS",
    "COLL_NAMES",
    "COLL_TYPES",
    "NODE_TYPES",
    "read",
    "read_comm_groups",
    "read_nodes",
    "trace_files",
    "write",
]
