"""How the simulator's cost per event grows with the fabric (1,024 against 8,192 hosts).

Each run is a fresh interpreter that builds ``perm-N`` (``sim_speed.py``'s case) and
times the event loop's CPU in two windows of simulated time: from the start to
``--first-us`` (the flows ramping up: the window ``sim_speed.py --until-us`` measures)
and from there to ``--steady-us`` (their windows full).  Sizes alternate, their order
reversed every other round, and the smallest size runs ``--small-runs`` times a round
(its loop is short).  A shared machine's neighbours move a single run by tens of
percent, so each size is summed up by its minimum (the quietest run) and its median
(and its maximum); when the smallest size's runs spread by more than a quarter, a
note says the growth reads low (a busy hour slows the smaller fabric most).

At 1,024 hosts the lines an event touches are largely still in the last-level cache
at the host's next event; at 8,192 hosts they are not.  The smaller size's cost thus
moves with what the machine's other work leaves of that cache (its spread over a day
is wide on a shared machine), the larger's hardly (docs/performance.md, "Where the
time goes").

``--fabric-only`` measures the same fabric with no transport: each host's NIC is a
small native reflector (compiled from this file with the C compiler) that re-sends
every packet it receives to the host's permutation peer, on a route through a T1 that
turns with each packet, with ``--window`` packets per host put in at the start.  Its
events are the kernel's own (switch arrivals, transmitters, the host link's end) and
one cheap call per packet at a host: how much of the growth the fabric's event loop
has by itself, whatever the hosts run.  ``--host-bytes B`` gives each reflector B bytes
of state of its own, every line of which it reads and writes for each packet: a stand-in
for a host whose transport state were that compact, to see what growth the fabric and
such a host would have together.  ``--host-lines K`` touches only K of those lines a
packet, the next K in turn (a host whose packets each read a few lines of a larger
state), and ``--host-work N`` adds N steps of a chain of multiplies a packet, work with no
memory in it: a stand-in for the instructions of a host's transport, so that such a
host's events cost what today's do and the fabric's growth is diluted as much.

    python benchmarks/sim_growth.py                          # 1024 and 8192 hosts, 6 rounds
    python benchmarks/sim_growth.py --sizes 1024,2048,8192 --rounds 4 --out g.json
    python benchmarks/sim_growth.py --fabric-only            # the kernel and fabric alone
    python benchmarks/sim_growth.py --fabric-only --host-bytes 1024   # and 1 KiB a host
    python benchmarks/sim_growth.py --fabric-only --host-bytes 4096 --host-lines 8 --host-work 1000
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

#: ``--fabric-only``'s host: a native callable per host, called by the host link's end
#: as ``(pkt, plane, now)``; it gives the packet a fresh route int (held by the packet
#: alone, so the switches shift it in place, as a NIC's are) from its table, turning
#: to the next entry each packet, and enqueues it on its port.  Its object is the one
#: host line it reads (its routes kept as two 64-bit halves, no Python ints).
_REFLECTOR_C = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_ROUTES 8

typedef struct {
    PyObject_HEAD
    vectorcallfunc vc;
    PyObject *enqueue; /* the port type's enqueue (shared) */
    PyObject *port;
    int n, k;
    long long sent;
    unsigned char routes[MAX_ROUTES][16]; /* little-endian 128-bit routes */
    void *mem;              /* the host's own state (--host-bytes), as allocated */
    uint64_t *state;        /* its first line (64-byte aligned), NULL: none */
    Py_ssize_t state_lines; /* its lines */
    Py_ssize_t per_packet;  /* lines touched (a word read and written) a packet, in turn */
    Py_ssize_t next_line;   /* the first of the next packet's */
    Py_ssize_t work;        /* steps of the multiply chain a packet (--host-work) */
    uint64_t chain;         /* the chain's value, kept so that it is computed */
    long long steps;        /* the chain's steps so far */
} Refl;

static PyObject *S_route;

static PyObject *Refl_vc(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kw)
{
    Refl *r = (Refl *)self;
    if (PyVectorcall_NARGS(nargsf) < 1 || kw != NULL) {
        PyErr_SetString(PyExc_TypeError, "Reflector(pkt, plane, now)");
        return NULL;
    }
    PyObject *pkt = args[0];
    PyObject *route = _PyLong_FromByteArray(r->routes[r->k], 16, 1, 0);
    if (route == NULL)
        return NULL;
    if (++r->k == r->n)
        r->k = 0;
    Py_ssize_t line = r->next_line;
    for (Py_ssize_t i = 0; i < r->per_packet; i++) {
        r->state[8 * line]++;
        if (++line == r->state_lines)
            line = 0;
    }
    r->next_line = line;
    uint64_t x = r->chain;
    for (Py_ssize_t i = 0; i < r->work; i++)
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    r->chain = x;
    r->steps += r->work;
    int rc = PyObject_SetAttr(pkt, S_route, route);
    Py_DECREF(route);
    if (rc < 0)
        return NULL;
    r->sent++;
    PyObject *call[2] = {r->port, pkt};
    return PyObject_Vectorcall(r->enqueue, call, 2, NULL);
}

static int Refl_init(Refl *r, PyObject *args, PyObject *kw)
{
    PyObject *enq, *port, *routes;
    Py_ssize_t nbytes = 0, lines = 0, work = 0;
    if (!PyArg_ParseTuple(args, "OOO!|nnn", &enq, &port, &PyTuple_Type, &routes, &nbytes, &lines,
                          &work))
        return -1;
    if (nbytes < 0 || nbytes % 64 || nbytes > (1 << 20) || r->mem != NULL) {
        PyErr_SetString(PyExc_ValueError, "Reflector: host bytes a multiple of 64, at most 1 MiB, once");
        return -1;
    }
    if (lines < 0 || lines > nbytes / 64 || work < 0) {
        PyErr_SetString(PyExc_ValueError, "Reflector: lines a packet 0 (all) to the state's, work 0 or more");
        return -1;
    }
    r->work = work;
    if (nbytes) {
        r->mem = PyMem_Calloc(1, (size_t)nbytes + 64);
        if (r->mem == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        r->state = (uint64_t *)(((uintptr_t)r->mem + 63) & ~(uintptr_t)63);
        r->state_lines = nbytes / 64;
        r->per_packet = lines ? lines : r->state_lines;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(routes);
    if (n < 1 || n > MAX_ROUTES) {
        PyErr_SetString(PyExc_ValueError, "Reflector: 1 to 8 routes");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyTuple_GET_ITEM(routes, i);
        if (!PyLong_Check(v) || _PyLong_AsByteArray((PyLongObject *)v, r->routes[i], 16, 1, 0) < 0)
            return -1;
    }
    Py_INCREF(enq);
    Py_INCREF(port);
    Py_XSETREF(r->enqueue, enq);
    Py_XSETREF(r->port, port);
    r->n = (int)n;
    r->k = 0;
    r->vc = Refl_vc;
    return 0;
}

static void Refl_dealloc(Refl *r)
{
    Py_XDECREF(r->enqueue);
    Py_XDECREF(r->port);
    PyMem_Free(r->mem);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *Refl_sent(Refl *r, void *c) { return PyLong_FromLongLong(r->sent); }
static PyObject *Refl_steps(Refl *r, void *c) { return PyLong_FromLongLong(r->steps); }

/* The fewest times any line of the host's state was touched (0 with none). */
static PyObject *Refl_touched(Refl *r, void *c)
{
    uint64_t least = r->state_lines ? UINT64_MAX : 0;
    for (Py_ssize_t i = 0; i < r->state_lines; i++)
        if (r->state[8 * i] < least)
            least = r->state[8 * i];
    return PyLong_FromUnsignedLongLong(least);
}

static PyGetSetDef Refl_getset[] = {{"sent", (getter)Refl_sent, NULL, NULL, NULL},
                                    {"touched", (getter)Refl_touched, NULL, NULL, NULL},
                                    {"steps", (getter)Refl_steps, NULL, NULL, NULL},
                                    {NULL}};

static PyTypeObject ReflType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "sim_growth_reflector.Reflector",
    .tp_basicsize = sizeof(Refl),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Refl, vc),
    .tp_call = PyVectorcall_Call,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Refl_init,
    .tp_dealloc = (destructor)Refl_dealloc,
    .tp_getset = Refl_getset,
};

static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "sim_growth_reflector", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_sim_growth_reflector(void)
{
    S_route = PyUnicode_InternFromString("route");
    if (S_route == NULL || PyType_Ready(&ReflType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&mod);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReflType);
    if (PyModule_AddObject(m, "Reflector", (PyObject *)&ReflType) < 0) {
        Py_DECREF(&ReflType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
"""


def build_reflector(where: Path) -> Path:
    """Compile ``--fabric-only``'s reflector into ``where``; the module's path."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("sim_growth: --fabric-only needs a C compiler (cc)")
    src = where / "sim_growth_reflector.c"
    out = where / f"sim_growth_reflector{sysconfig.get_config_var('EXT_SUFFIX')}"
    src.write_text(_REFLECTOR_C)
    include = sysconfig.get_paths()["include"]
    subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{include}", "-o", str(out), str(src)],
                   check=True)  # fmt: skip
    return out


def load_reflector(path: Path) -> ModuleType:
    """Import the module :func:`build_reflector` made."""
    spec = importlib.util.spec_from_file_location("sim_growth_reflector", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reflect(exp: Any, hosts: int, module: ModuleType, spec: FabricOnly) -> list[Any]:
    """Give every host of ``exp`` (perm-``hosts``, no flows) one of ``spec``'s
    reflectors (its own state, lines touched and work a packet), and put its window
    of packets a host on its port; the reflectors."""
    import sim_speed

    from openmrc.wire.packets import DataPacket, Opcode

    fabric = exp.fabric
    t1s = min(exp.topology.spec.t1s, 8)
    refls = []
    for flow in sim_speed.perm_flows(hosts, 1, 1):
        port = fabric.host_port(flow.src, 0)
        routes = tuple(fabric.path_for(flow.src, flow.dst, path << 4) for path in range(t1s))
        refl = module.Reflector(type(port).enqueue, port, routes, spec.host_bytes,
                                spec.host_lines, spec.host_work)  # fmt: skip
        fabric.attach_host(flow.src, refl)
        refls.append(refl)
    for refl in refls:
        for psn in range(spec.window):
            refl(DataPacket(1, 0, Opcode.WRITE_ONLY, psn, 0, 0, 0, 4096), 0, 0)
    return refls


class FabricOnly(NamedTuple):
    """A ``--fabric-only`` run's hosts: the module :func:`build_reflector` made, the
    packets put in per host, the bytes of its own state each has, the lines of it it
    touches a packet (0: all) and the steps of work it does a packet."""

    reflector: str
    window: int
    host_bytes: int = 0
    host_lines: int = 0
    host_work: int = 0

    @classmethod
    def of_child(cls, args: argparse.Namespace) -> FabricOnly | None:
        """A child's hosts, as :meth:`child_argv` handed them (None: the whole simulator)."""
        if not args.reflector:
            return None
        return cls(args.reflector, args.window, args.host_bytes, args.host_lines, args.host_work)

    @classmethod
    def of_options(cls, args: argparse.Namespace, reflector: str = "") -> FabricOnly:
        """The hosts :func:`add_fabric_only_options`' options ask for (``reflector``: the
        module, or "" until it is built)."""
        return cls(reflector, args.window, args.host_bytes, args.host_lines, args.host_work)

    def label(self) -> str:
        """A size's label, ``{}`` its hosts."""
        parts = []
        if self.host_bytes:
            lines = f", {self.host_lines} lines a packet" if self.host_lines else ""
            parts.append(f"{self.host_bytes} B a host{lines}")
        if self.host_work:
            parts.append(f"{self.host_work} steps a packet")
        return "perm-{} (fabric only" + "".join(f", {p}" for p in parts) + ")"

    def child_argv(self) -> list[str]:
        """The options that hand these hosts to a child run (``--child``)."""
        return ["--reflector", self.reflector, "--window", str(self.window),
                "--host-bytes", str(self.host_bytes), "--host-lines", str(self.host_lines),
                "--host-work", str(self.host_work)]  # fmt: skip


def fabric_only_experiment(hosts: int, fabric: FabricOnly) -> tuple[Any, list[Any]]:
    """perm-``hosts``'s fabric with no flows, every host one of ``fabric``'s reflectors;
    the experiment and the reflectors."""
    import sim_speed

    exp = sim_speed.make_experiment(
        sim_speed.fabric_for(hosts, 1), seed=1, sample_interval_ps=100_000_000
    )
    module = load_reflector(Path(fabric.reflector))
    return exp, reflect(exp, hosts, module, fabric)


def add_fabric_only_options(ap: argparse.ArgumentParser) -> None:
    """``--fabric-only`` and ``--window`` (this script's and sim_misses.py's)."""
    ap.add_argument(
        "--fabric-only",
        action="store_true",
        help="hosts that only reflect packets (the fabric's event loop alone)",
    )
    ap.add_argument("--window", type=int, default=32,
                    help="--fabric-only: packets put in per host")  # fmt: skip
    ap.add_argument("--host-bytes", type=int, default=0,
                    help="--fabric-only: state of its own each host has, every line of it "
                         "touched a packet unless --host-lines (a multiple of 64; 0: none)")  # fmt: skip
    ap.add_argument("--host-lines", type=int, default=0,
                    help="--fabric-only: lines of --host-bytes touched a packet, the next in "
                         "turn (0: all)")  # fmt: skip
    ap.add_argument("--host-work", type=int, default=0,
                    help="--fabric-only: steps of a multiply chain a host does a packet (work "
                         "with no memory, a stand-in for a transport's instructions)")  # fmt: skip


#: ``--host-bytes`` at most (the reflector refuses more).
HOST_BYTES_MAX = 1 << 20
#: ``--host-work`` at most (a million steps a packet is some milliseconds).
HOST_WORK_MAX = 1 << 20


def fabric_options_error(args: argparse.Namespace) -> str | None:
    """Why ``--host-bytes``, ``--host-lines`` or ``--host-work`` is refused, or None."""
    host_bytes, host_lines, host_work = args.host_bytes, args.host_lines, args.host_work
    for name, value in (("bytes", host_bytes), ("lines", host_lines), ("work", host_work)):
        if value and not args.fabric_only:
            return f"--host-{name}: only with --fabric-only (a reflector's own state and work)"
    if host_bytes < 0 or host_bytes % 64 or host_bytes > HOST_BYTES_MAX:
        return f"--host-bytes: a multiple of 64 from 0 to {HOST_BYTES_MAX}, not {host_bytes}"
    if host_lines < 0 or host_lines > host_bytes // 64:
        return (f"--host-lines: 0 (all) to the {host_bytes // 64} lines of --host-bytes, "
                f"not {host_lines}")  # fmt: skip
    if host_work < 0 or host_work > HOST_WORK_MAX:
        return f"--host-work: 0 to {HOST_WORK_MAX} steps, not {host_work}"
    return None


def child(
    hosts: int, first_us: float, steady_us: float, fabric: FabricOnly | None = None
) -> dict[str, Any]:
    """One run in this process: loop CPU and events in each window (``fabric``: the
    hosts of ``--fabric-only``, else the whole simulator)."""
    import sim_speed

    if fabric is None:
        exp, _, _ = sim_speed.build(f"perm-{hosts}", 2_000_000, 1, 1)
        refls: list[Any] = []
    else:
        exp, refls = fabric_only_experiment(hosts, fabric)
    sim = exp.sim

    cpu = time.process_time  # the process's CPU (user and system), to the nanosecond
    exp.sampler.start()
    c0 = cpu()
    sim.run(int(first_us * sim_speed.US))
    c1, e1 = cpu(), sim.events_run
    row: dict[str, Any] = {"hosts": hosts, "first_events": e1, "first_cpu": round(c1 - c0, 7)}
    if steady_us:
        sim.run(int(steady_us * sim_speed.US))
        c2, e2 = cpu(), sim.events_run
        row.update(steady_events=e2 - e1, steady_cpu=round(c2 - c1, 7))
    exp.sampler.stop()
    if refls:  # packets sent: by all hosts, and by the host that sent the fewest
        row["sent"] = sum(r.sent for r in refls)
        row["sent_min"] = min(r.sent for r in refls)
        # (every line of a host's own state touched once a packet it sent)
        # (with K of its L lines a packet in turn: each line sent * K // L times at least)
        if fabric is not None and fabric.host_bytes:
            lines = fabric.host_bytes // 64
            k = fabric.host_lines or lines
            row["touched_all"] = all(r.touched == r.sent * k // lines for r in refls)
        else:
            row["touched_all"] = None
        row["work_steps"] = sum(r.steps for r in refls)
    row["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return row


def ns_per_event(row: dict[str, Any], window: str) -> float | None:
    """A run's loop CPU per event in ``window`` (``first`` or ``steady``), ns."""
    events = row.get(f"{window}_events")
    if not events:
        return None
    return float(row[f"{window}_cpu"]) / int(events) * 1e9


def run_child(
    hosts: int, first_us: float, steady_us: float, fabric: FabricOnly | None = None
) -> dict[str, Any]:
    """One run in a fresh interpreter."""
    argv = [sys.executable, __file__, "--child", str(hosts), "--first-us", str(first_us),
            "--steady-us", str(steady_us)]  # fmt: skip
    if fabric is not None:
        argv += fabric.child_argv()
    out = subprocess.run(argv, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"sim_growth: perm-{hosts} failed: {out.stderr.strip()[-400:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def summarise(rows: list[dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """Per size: runs, and the minimum and median ns per event of each window; then the
    growth of each from the smallest size to the largest, as a ratio and in ns added per
    event (the ratio falls when the smaller size gets dearer: the added ns do not)."""
    out: dict[str, Any] = {"sizes": {}, "growth": {}}
    for n in sizes:
        mine = [r for r in rows if r["hosts"] == n]
        cell: dict[str, Any] = {"runs": len(mine)}
        for window in ("first", "steady"):
            vals = [v for v in (ns_per_event(r, window) for r in mine) if v is not None]
            if vals:
                cell[window] = {"min": round(min(vals), 1),
                                "median": round(statistics.median(vals), 1),
                                "max": round(max(vals), 1)}  # fmt: skip
        out["sizes"][str(n)] = cell
    lo, hi = out["sizes"][str(sizes[0])], out["sizes"][str(sizes[-1])]
    for window in ("first", "steady"):
        if window in lo and window in hi and lo[window]["min"] > 0:
            out["growth"][window] = {k: round(hi[window][k] / lo[window][k] - 1, 4)
                                     for k in ("min", "median")}  # fmt: skip
            out["growth"][window].update({f"{k}_added_ns": round(hi[window][k] - lo[window][k], 1)
                                          for k in ("min", "median")})  # fmt: skip
    return out


#: The smallest size's slowest run over its quickest (in either window) above which the
#: summary says the growth read low: the machine's other work moves the smaller fabric's
#: cost far more than the larger's (its lines are in the shared L3 between a host's
#: events, the larger's are not), so a busy hour shrinks the growth without a change.
SPREAD_NOTE = 1.25


def spread_note(summary: dict[str, Any], sizes: list[int], label: str) -> str | None:
    """A line saying the smallest size's runs spread by more than :data:`SPREAD_NOTE`
    (``label``: its name), or None."""
    cell = summary["sizes"][str(sizes[0])]
    spreads = [cell[w]["max"] / cell[w]["min"] for w in ("first", "steady")
               if w in cell and cell[w]["min"] > 0]  # fmt: skip
    worst = max(spreads, default=1.0)
    if worst <= SPREAD_NOTE:
        return None
    return (
        f"note: {label}'s runs spread by {worst - 1:+.0%} (slowest over quickest): the "
        "machine's other work moves the smaller fabric's cost most, so this growth reads "
        "lower than a quiet hour's"
    )


def parse_sizes(text: str) -> list[int]:
    """``--sizes``: two or more host counts, ascending (ValueError with the reason)."""
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"not a comma-separated list of host counts: {text!r}") from None
    if len(sizes) < 2 or sizes != sorted(set(sizes)) or sizes[0] < 2:
        raise ValueError(f"two or more host counts, ascending, each 2 or more: {text!r}")
    return sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,8192", help="hosts of perm-N, ascending")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--small-runs", type=int, default=2, help="runs of the smallest size a round")
    ap.add_argument("--first-us", type=float, default=30.0, help="the first window's end")
    ap.add_argument("--steady-us", type=float, default=60.0, help="the second's (0: none)")
    ap.add_argument("--out", help="also write every run and the summary here (JSON)")
    add_fabric_only_options(ap)
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--reflector", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        row = child(args.child, args.first_us, args.steady_us, FabricOnly.of_child(args))
        print(json.dumps(row))
        return 0
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as e:
        print(f"sim_growth: --sizes: {e}", file=sys.stderr)
        return 2
    for name in ("rounds", "small_runs"):
        if getattr(args, name) < 1:
            print(f"sim_growth: --{name.replace('_', '-')}: must be 1 or more", file=sys.stderr)
            return 2
    if not args.first_us > 0 or (args.steady_us and not args.steady_us > args.first_us):
        print("sim_growth: --steady-us: must be 0 or past --first-us (> 0)", file=sys.stderr)
        return 2
    if args.fabric_only and args.window < 1:
        print("sim_growth: --window: must be 1 or more", file=sys.stderr)
        return 2
    bad = fabric_options_error(args)
    if bad is not None:
        print(f"sim_growth: {bad}", file=sys.stderr)
        return 2
    spec = FabricOnly.of_options(args) if args.fabric_only else None
    what = spec.label() if spec is not None else "perm-{}"  # a size's label
    with tempfile.TemporaryDirectory() as tmp:
        fabric = None
        if spec is not None:
            fabric = spec._replace(reflector=str(build_reflector(Path(tmp))))
        rows = run_rounds(args, sizes, fabric, what)
    summary = summarise(rows, sizes)
    for window, title in (("first", f"0-{args.first_us:g} us"),
                          ("steady", f"{args.first_us:g}-{args.steady_us:g} us")):  # fmt: skip
        if window not in summary["growth"]:
            continue
        cells = ", ".join(f"{what.format(n)} {summary['sizes'][str(n)][window]['min']:.0f}/"
                          f"{summary['sizes'][str(n)][window]['median']:.0f}" for n in sizes)  # fmt: skip
        g = summary["growth"][window]
        print(f"{title}: {cells} ns/event (min/median); growth {g['min']:+.0%} by min,"
              f" {g['median']:+.0%} by median ({g['min_added_ns']:+.0f}/"
              f"{g['median_added_ns']:+.0f} ns an event)")  # fmt: skip
    note = spread_note(summary, sizes, what.format(sizes[0]))
    if note is not None:
        print(note)
    if args.out:
        doc = {"command": " ".join(["python", "benchmarks/sim_growth.py", *sys.argv[1:]]),
               "summary": summary, "runs": rows}  # fmt: skip
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


def run_rounds(
    args: argparse.Namespace, sizes: list[int], fabric: FabricOnly | None, what: str
) -> list[dict[str, Any]]:
    """Every round's runs, printed as they end (``what``: a size's label, ``{}`` its hosts)."""
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        for n in sizes if r % 2 == 0 else sizes[::-1]:
            for _ in range(args.small_runs if n == sizes[0] else 1):
                row = run_child(n, args.first_us, args.steady_us, fabric)
                row["round"] = r + 1
                rows.append(row)
                steady = ns_per_event(row, "steady")
                print(f"round {r + 1} {what.format(n)}: {ns_per_event(row, 'first'):.0f} ns/event to"
                      f" {args.first_us:g} us"
                      + (f", {steady:.0f} from there to {args.steady_us:g} us"
                         if steady is not None else ""), flush=True)  # fmt: skip
    return rows


if __name__ == "__main__":
    sys.exit(main())
