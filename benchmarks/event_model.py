"""How many cold cache lines an event may touch before its cost grows with the fabric,
on this machine: a model event loop over compact native records.

The model (a small C program built with the C compiler into a temporary directory) keeps
what a packet simulator of ``hosts`` hosts must: a record per host (``--lines`` cache lines,
all read by each of its events), a 64-byte record per packet in flight (36 a host: a
window of 100 Gb/s over a 21 us round trip) and a ring of events, one per packet, taken
in order.  Each event reads its packet and its host's lines, does ``--work`` rounds of
dependent integer arithmetic (about a ns each: the event's own computation), writes both
records and sends the packet on to a random host a lap of the ring later.  With
``--prefetch D`` the loop asks for the lines of the event ``D`` ahead first, as the
simulator's kernel does with its hint rows; with ``--scatter`` a host's lines lie apart
(as an object graph's do), not in one block.  At 1,024 hosts the records fit a last-level
cache of a few MiB; at 8,192 (about 19 MiB of packets) they do not.  The growth from
the smaller to the larger says what an event of that many cold lines costs here when
its state is out of the cache: openmrc's events touch about 50 lines through about 20
Python objects (docs/performance.md, "Where the time goes").

    python benchmarks/event_model.py                              # lines 4, 12, 24; prefetch 0, 4, 16
    python benchmarks/event_model.py --lines 8 --work 400 --out m.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_growth import parse_sizes  # (--sizes: one rule for both benchmarks)

_MODEL = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* model HOSTS EVENTS WORK PREFETCH LINES: ns per event, then a checksum */
typedef struct { uint32_t pkt, host; } Ev;
/* where line L of host H lies: its own block, or (SCATTER) anywhere in the hosts' memory,
   as an object's lines lie among other objects' */
#ifdef SCATTER
#define HL(H, L) ((((H) * lines + (L)) * 2654435761u) % (hosts * lines))
#else
#define HL(H, L) ((H) * lines + (L))
#endif
typedef struct { uint64_t w[8]; } Line;

int main(int argc, char **argv)
{
    if (argc != 6)
        return 2;
    size_t hosts = (size_t)atol(argv[1]), events = (size_t)atol(argv[2]);
    long work = atol(argv[3]);
    size_t pfd = (size_t)atol(argv[4]), lines = (size_t)atol(argv[5]), npkt = hosts * 36;
    Line *host = aligned_alloc(64, hosts * lines * sizeof(Line));
    Line *pkt = aligned_alloc(64, npkt * sizeof(Line));
    Ev *ring = aligned_alloc(64, (npkt * sizeof(Ev) + 63) / 64 * 64);
    if (host == NULL || pkt == NULL || ring == NULL)
        return 1;
    memset(host, 1, hosts * lines * sizeof(Line));
    memset(pkt, 2, npkt * sizeof(Line));
    uint64_t x = 88172645463325252ULL; /* xorshift64 */
    for (size_t i = 0; i < npkt; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ring[i].pkt = (uint32_t)i, ring[i].host = (uint32_t)(x % hosts);
    }
    size_t head = 0;
    uint64_t sum = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t e = 0; e < events; e++) {
        if (pfd) {
            const Ev *f = &ring[(head + pfd) % npkt];
            __builtin_prefetch(&pkt[f->pkt], 1, 3);
            for (size_t l = 0; l < lines; l++)
                __builtin_prefetch(&host[HL(f->host, l)], 1, 3);
        }
        Ev ev = ring[head];
        Line *p = &pkt[ev.pkt];
        uint64_t v = p->w[0];
        for (size_t l = 0; l < lines; l++)
            v += host[HL(ev.host, l)].w[l & 7];
        for (long i = 0; i < work; i++)
            v = v * 6364136223846793005ULL + 1442695040888963407ULL;
        host[HL(ev.host, 0)].w[0] = v, p->w[1] = v, sum += v;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ring[head].host = (uint32_t)(x % hosts); /* its next event, a lap later */
        head = (head + 1) % npkt;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / events;
    printf("%.2f %llu\n", ns, (unsigned long long)sum);
    return 0;
}
"""


def measure(
    sizes: list[int],
    lines: list[int],
    prefetch: list[int],
    work: int,
    events: int,
    repeat: int,
    scatter: bool = False,
) -> list[dict[str, Any]]:
    """ns per event for each lines x prefetch x size, the minimum of ``repeat`` runs
    (sizes alternated within each); ``scatter``: a host's lines apart, not one block."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("event_model: needs a C compiler (cc)")
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "model.c", Path(tmp) / "model"
        src.write_text(_MODEL)
        flags = ["-DSCATTER"] if scatter else []
        subprocess.run([cc, "-O2", *flags, "-o", str(exe), str(src)], check=True)
        for n_lines in lines:
            for pfd in prefetch:
                row: dict[str, Any] = {"lines": n_lines, "prefetch": pfd, "work": work,
                                       "scatter": scatter}  # fmt: skip
                best: dict[int, float] = {}
                for r in range(repeat):
                    for hosts in sizes if r % 2 == 0 else sizes[::-1]:
                        argv = [str(exe), str(hosts), str(events), str(work), str(pfd),
                                str(n_lines)]  # fmt: skip
                        out = subprocess.run(argv, check=True, capture_output=True, text=True)
                        ns = float(out.stdout.split()[0])
                        best[hosts] = min(ns, best.get(hosts, ns))
                row["ns"] = {str(h): round(best[h], 1) for h in sizes}
                row["growth"] = round(best[sizes[-1]] / best[sizes[0]] - 1, 4)
                rows.append(row)
    return rows


def _ints(text: str, name: str, least: int) -> list[int]:
    """Option ``--name``'s comma-separated whole numbers, each ``least`` or more
    (ValueError naming the option and the reason)."""
    try:
        vals = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(
            f"--{name}: not a comma-separated list of whole numbers: {text!r}"
        ) from None
    if not vals or min(vals) < least:
        raise ValueError(f"--{name}: each must be {least} or more: {text!r}")
    return vals


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,8192", help="hosts, ascending")
    ap.add_argument("--lines", default="4,12,24", help="cold lines of a host an event reads")
    ap.add_argument("--prefetch", default="0,4,16", help="events ahead (0: none)")
    ap.add_argument("--work", type=int, default=300, help="rounds of arithmetic an event")
    ap.add_argument("--events", type=int, default=4_000_000, help="events timed per run")
    ap.add_argument("--repeat", type=int, default=3, help="runs per size (the minimum)")
    ap.add_argument("--scatter", action="store_true", help="a host's lines apart, not in a block")
    ap.add_argument("--out", help="also write the rows here (JSON)")
    args = ap.parse_args()
    try:
        sizes = parse_sizes(args.sizes)
    except ValueError as e:
        print(f"event_model: --sizes: {e}", file=sys.stderr)
        return 2
    try:
        lines = _ints(args.lines, "lines", 1)
        prefetch = _ints(args.prefetch, "prefetch", 0)
    except ValueError as e:
        print(f"event_model: {e}", file=sys.stderr)
        return 2
    for name in ("work", "events", "repeat"):
        if getattr(args, name) < (0 if name == "work" else 1):
            print(f"event_model: --{name}: too small: {getattr(args, name)}", file=sys.stderr)
            return 2
    rows = measure(sizes, lines, prefetch, args.work, args.events, args.repeat, args.scatter)
    print(f"{'lines':>5} {'prefetch':>8} " + " ".join(f"{h:>10}" for h in sizes) + "   growth")
    for r in rows:
        cells = " ".join(f"{r['ns'][str(h)]:>7.1f} ns" for h in sizes)
        print(f"{r['lines']:>5} {r['prefetch']:>8} {cells}   {r['growth']:+.1%}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
