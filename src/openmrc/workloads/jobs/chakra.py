"""Chakra execution traces (MLCommons ``et_def.proto``): read into a job graph, written from one.

An ET file holds one rank's trace: a sequence of length-prefixed protobuf
messages (a varint byte count, then the message), a ``GlobalMetadata`` first,
then ``Node`` s.  openmrc decodes and encodes the protobuf wire format itself
(varints, length-delimited fields, packed repeated fields), so it needs no
protobuf package.  Fields used (``et_def.proto``):

* ``Node``: ``id`` (1), ``name`` (2), ``type`` (3), ``ctrl_deps`` (4),
  ``data_deps`` (5), ``duration_micros`` (7), ``attr`` (10);
* ``AttributeProto``: ``name`` (1) and one value (``int64_val`` 9,
  ``int64_list`` 10, ``uint64_val`` 13, ``int32_val`` 7, ``bool_val`` 27,
  ``string_val`` 29, ``double_val`` 3);
* node types: ``METADATA_NODE`` (1, no time), ``COMP_NODE`` (4,
  ``duration_micros``; openmrc's own traces also carry ``duration_ps``),
  ``COMM_SEND_NODE`` (5: ``comm_dst``, ``comm_size``, ``comm_tag``),
  ``COMM_RECV_NODE`` (6: ``comm_src``, ``comm_tag``), ``COMM_COLL_NODE`` (7:
  ``comm_type``, ``comm_size``, and the ranks taking part in ``pg_ranks``, an
  int64 list; without it, every rank).  Any other type is an error naming
  the file and the node.

A collective is the same task on all of its ranks: the k-th collective over
a group on one rank is the k-th over that group on every other, and it
starts when every rank reached it.  A send and the receive with the same
(source, destination, tag) are one transfer.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .graph import JobGraph, Task
from .model import JobError

METADATA_NODE, COMP_NODE, COMM_SEND_NODE, COMM_RECV_NODE, COMM_COLL_NODE = 1, 4, 5, 6, 7
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
#: CollectiveCommType values openmrc runs, and back.
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


def _attr(buf: bytes) -> tuple[str, Any]:
    name = ""
    value: Any = None
    for num, wt, val in _fields(buf):
        if num == 1 and wt == 2:
            name = val.decode("utf-8", "replace")
        elif num in (7, 9, 11, 13) and wt == 0:
            value = _signed(val) if num in (7, 9) else val
        elif num == 27 and wt == 0:
            value = bool(val)
        elif num == 29 and wt == 2:
            value = val.decode("utf-8", "replace")
        elif num == 3 and wt == 1:
            value = struct.unpack("<d", val)[0]
        elif num in (10, 14, 8, 12) and wt == 2:
            items: list[int] = []
            for n2, w2, v2 in _fields(val):
                if n2 == 1:
                    items.extend(_signed(x) for x in _ints(w2, v2))
            value = items
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
    __slots__ = ("attrs", "deps", "dur_ps", "id", "name", "type")

    def __init__(self) -> None:
        self.id = 0
        self.name = ""
        self.type = 0
        self.deps: list[int] = []
        self.dur_ps = 0
        self.attrs: dict[str, Any] = {}


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
                raise _Bad("truncated message")
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
                elif num == 10 and wt == 2:
                    k, v = _attr(val)
                    node.attrs[k] = v
        except _Bad as exc:
            raise JobError(f"{p}: message {i}: malformed node ({exc})") from None
        given = node.attrs.get("duration_ps")
        node.dur_ps = int(given) if isinstance(given, int) and given >= 0 else dur_us * 1_000_000
        if node.type not in (
            METADATA_NODE,
            COMP_NODE,
            COMM_SEND_NODE,
            COMM_RECV_NODE,
            COMM_COLL_NODE,
        ):
            kind = NODE_TYPES.get(node.type, f"type {node.type}")
            raise JobError(
                f"{p}: node {node.id} ({node.name or 'unnamed'}): unsupported node type {kind}"
            )
        nodes.append(node)
    return nodes


def _need_int(node: _Node, key: str, where: str) -> int:
    v = node.attrs.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise JobError(f"{where}: node {node.id} ({node.name or 'unnamed'}): needs attribute {key}")
    return v


def read(files: Sequence[str | Path], name: str = "chakra", gpus_per_server: int = 8) -> JobGraph:
    """One job from one ET file per rank (``files[r]`` is rank ``r``)."""
    if not files:
        raise JobError("chakra: no trace files")
    n = len(files)
    per_rank = [read_nodes(f) for f in files]
    # units: a task made of nodes of one or more ranks
    unit_of: dict[tuple[int, int], int] = {}
    units: list[dict[str, Any]] = []
    coll_seq: dict[tuple[int, tuple[int, ...]], int] = {}
    coll_unit: dict[tuple[tuple[int, ...], int], int] = {}
    sends: dict[tuple[int, int, int], int] = {}
    recvs: dict[tuple[int, int, int], int] = {}
    for r, nodes in enumerate(per_rank):
        where = str(files[r])
        seen: set[int] = set()
        for node in nodes:
            if node.id in seen:
                raise JobError(f"{where}: node {node.id}: duplicate id")
            seen.add(node.id)
            key = (r, node.id)
            if node.type in (METADATA_NODE, COMP_NODE):
                unit_of[key] = len(units)
                dur = node.dur_ps if node.type == COMP_NODE else 0
                units.append(
                    {
                        "kind": "compute",
                        "ranks": (r,),
                        "dur": dur,
                        "name": node.name,
                        "members": [key],
                    }
                )
            elif node.type == COMM_COLL_NODE:
                code = _need_int(node, "comm_type", where)
                if code not in COLL_TYPES:
                    raise JobError(
                        f"{where}: node {node.id} ({node.name or 'unnamed'}): collective type "
                        f"{code} is not one of all-reduce (0), all-gather (2), all-to-all (6), "
                        "reduce-scatter (7)"
                    )
                size = _need_int(node, "comm_size", where)
                group = node.attrs.get("pg_ranks")
                ranks = tuple(range(n)) if group is None else tuple(int(x) for x in group)
                if r not in ranks or any(not 0 <= x < n for x in ranks):
                    raise JobError(
                        f"{where}: node {node.id}: pg_ranks {list(ranks)} is not a group of {n} ranks holding rank {r}"
                    )
                seq = coll_seq.get((r, ranks), 0)
                coll_seq[(r, ranks)] = seq + 1
                u = coll_unit.get((ranks, seq))
                if u is None:
                    u = len(units)
                    coll_unit[(ranks, seq)] = u
                    units.append(
                        {
                            "kind": COLL_TYPES[code],
                            "ranks": ranks,
                            "size": size,
                            "name": node.name,
                            "members": [],
                        }
                    )
                elif units[u]["kind"] != COLL_TYPES[code] or units[u]["size"] != size:
                    raise JobError(
                        f"{where}: node {node.id}: collective #{seq} of group {list(ranks)} differs from the other ranks'"
                    )
                units[u]["members"].append(key)
                unit_of[key] = u
            else:
                tag = int(node.attrs.get("comm_tag", 0) or 0)
                if node.type == COMM_SEND_NODE:
                    dst = _need_int(node, "comm_dst", where)
                    size = _need_int(node, "comm_size", where)
                    if not 0 <= dst < n or dst == r:
                        raise JobError(
                            f"{where}: node {node.id}: comm_dst {dst} is not another rank"
                        )
                    pair = (r, dst, tag)
                    if pair in sends:
                        raise JobError(
                            f"{where}: node {node.id}: a second send to {dst} with tag {tag}"
                        )
                    u = recvs.pop(pair, None) if pair in recvs else None
                    if u is None:
                        u = len(units)
                        units.append(
                            {
                                "kind": "p2p",
                                "ranks": (r, dst),
                                "size": size,
                                "name": node.name,
                                "members": [],
                            }
                        )
                    else:
                        units[u].update(ranks=(r, dst), size=size, name=node.name)
                    sends[pair] = u
                else:
                    src = _need_int(node, "comm_src", where)
                    if not 0 <= src < n or src == r:
                        raise JobError(
                            f"{where}: node {node.id}: comm_src {src} is not another rank"
                        )
                    pair = (src, r, tag)
                    u = sends.get(pair)
                    if u is None:
                        if pair in recvs:
                            raise JobError(
                                f"{where}: node {node.id}: a second receive from {src} with tag {tag}"
                            )
                        u = len(units)
                        units.append(
                            {
                                "kind": "p2p",
                                "ranks": (src, r),
                                "size": None,
                                "name": node.name,
                                "members": [],
                            }
                        )
                        recvs[pair] = u
                units[u]["members"].append(key)
                unit_of[key] = u
    for (src, dst, tag), u in recvs.items():
        if units[u]["size"] is None:
            raise JobError(
                f"{files[dst]}: receive from rank {src} tag {tag} has no matching send in {files[src]}"
            )
    for (ranks, seq), u in coll_unit.items():
        if len(units[u]["members"]) != len(ranks):
            raise JobError(
                f"chakra: collective #{seq} of group {list(ranks)}: only {len(units[u]['members'])} of its {len(ranks)} ranks have it"
            )
    # dependencies between units, then a topological order
    deps: list[set[int]] = [set() for _ in units]
    for r, nodes in enumerate(per_rank):
        for node in nodes:
            u = unit_of[(r, node.id)]
            for d in node.deps:
                du = unit_of.get((r, d))
                if du is None:
                    raise JobError(
                        f"{files[r]}: node {node.id}: depends on node {d}, which is not in the file"
                    )
                if du != u:
                    deps[u].add(du)
    order: list[int] = []
    indeg = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in units]
    for u, ds in enumerate(deps):
        for d in ds:
            users[d].append(u)
    ready = [u for u in range(len(units)) if indeg[u] == 0]
    while ready:
        u = ready.pop()
        order.append(u)
        for v in users[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                ready.append(v)
    if len(order) != len(units):
        stuck = next(u for u in range(len(units)) if indeg[u] > 0)
        r, nid = units[stuck]["members"][0]
        raise JobError(f"{files[r]}: node {nid}: its dependencies form a cycle")
    order = _topo_stable(deps, len(units))
    g = JobGraph(name, n, gpus_per_server=gpus_per_server)
    index: dict[int, int] = {}
    for u in order:
        unit = units[u]
        td = tuple(sorted(index[d] for d in deps[u]))
        if unit["kind"] == "compute":
            t = Task("compute", unit["ranks"], td, unit["dur"], 0, unit["name"], "compute")
        else:
            t = Task(unit["kind"], unit["ranks"], td, 0, unit["size"], unit["name"], "comm")
        index[u] = g.add(t)
    return g


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
    is the number before ``.et`` (``x.3.et`` is rank 3)."""
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

    def rank(path: Path) -> tuple[int, str]:
        stem = path.name[: -len(".et")] if path.name.endswith(".et") else path.name
        tail = stem.rsplit(".", 1)[-1]
        return (int(tail), path.name) if tail.isdigit() else (-1, path.name)

    return sorted(found, key=rank)


__all__ = ["COLL_TYPES", "NODE_TYPES", "read", "read_nodes", "trace_files", "write"]
