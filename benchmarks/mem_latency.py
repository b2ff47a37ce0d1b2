"""This machine's memory latency by working-set size: how large a simulation's hot state
can grow before each event's cold lines cost a trip to memory.

A small C program (built with the C compiler into a temporary directory) follows a
random cycle of pointers, one per 64-byte line, through a buffer of each size, and
prints the time per step: the latency of a dependent load when the buffer fits a cache
level, and of memory (with its page walks) when it does not.  Each size runs on 4 KiB
pages and on transparent huge pages (``MADV_HUGEPAGE``; the same as 4 KiB pages where
the kernel's THP setting is ``never``).  The knee is the last level of cache this
process actually gets, which on a shared or virtual machine can be far below the size
``lscpu`` reports: it is what decides how much an event's cost grows from 1,024 to
8,192 hosts (docs/performance.md, "Where the time goes").

``--chains K,...`` times the same buffers (huge pages) with K chases at once, each
through its own part of the cycle: the time per load with K misses outstanding, which
falls with K until the core runs out of miss buffers.  Its floor is the least an event
can pay for a line it has to bring from memory, however early it asks for it; the
1-chain figure is what a line costs that is found only from the line before.

    python benchmarks/mem_latency.py                       # 1 MiB .. 512 MiB
    python benchmarks/mem_latency.py --sizes 1,8,64 --out lat.json
    python benchmarks/mem_latency.py --sizes 4,512 --chains 1,2,4,8,16,32
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

_CHASE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

#define MAX_CHAINS 64

/* chase MIB HUGE STEPS [CHAINS]: ns per load over a random cycle of MIB MiB, CHAINS
 * (default 1) chases at once, each from its own point of the cycle */
int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5)
        return 2;
    size_t bytes = (size_t)atol(argv[1]) << 20, lines = bytes / 64, steps = (size_t)atol(argv[3]);
    int chains = argc == 5 ? atoi(argv[4]) : 1;
    if (chains < 1 || chains > MAX_CHAINS || (size_t)chains > lines)
        return 2;
    size_t align = (size_t)2 << 20;
    char *raw = mmap(NULL, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (raw == MAP_FAILED)
        return 1;
    char *p = (char *)(((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1));
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, atoi(argv[2]) ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
#endif
    size_t *order = malloc(lines * sizeof *order);
    if (order == NULL)
        return 1;
    for (size_t i = 0; i < lines; i++)
        order[i] = i;
    uint64_t x = 88172645463325252ULL; /* xorshift64: a fixed shuffle */
    for (size_t i = lines - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t j = (size_t)(x % (i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    for (size_t i = 0; i < lines; i++)
        *(char **)(p + order[i] * 64) = p + order[(i + 1) % lines] * 64;
    char **q = (char **)(p + order[0] * 64);
    for (size_t i = 0; i < lines; i++) /* one lap to warm the caches and the TLB */
        q = (char **)*q;
    char **c[MAX_CHAINS]; /* chain k starts k/chains of the way round the cycle */
    for (int k = 0; k < chains; k++)
        c[k] = (char **)(p + order[lines / (size_t)chains * (size_t)k] * 64);
    size_t rounds = steps / (size_t)chains ? steps / (size_t)chains : 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t i = 0; i < rounds; i++)
        for (int k = 0; k < chains; k++) /* the chains' loads are independent */
            c[k] = (char **)*c[k];
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) /
                (double)(rounds * (size_t)chains);
    int alive = 1;
    for (int k = 0; k < chains; k++)
        alive &= c[k] != NULL;
    printf("%.2f %d\n", ns, alive);
    return 0;
}
"""

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 512)
#: the most chases --chains runs at once (the C program's MAX_CHAINS)
MAX_CHAINS = 64


def _build(tmp: str) -> Path:
    """Compile the chase into ``tmp``; the executable."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("mem_latency: needs a C compiler (cc)")
    src, exe = Path(tmp) / "chase.c", Path(tmp) / "chase"
    src.write_text(_CHASE)
    subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
    return exe


def _time(exe: Path, mib: int, huge: int, steps: int, chains: int = 1) -> float:
    """One timing: ns per load."""
    out = subprocess.run(
        [str(exe), str(mib), str(huge), str(steps), str(chains)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(out.split()[0])


def measure(sizes: list[int], steps: int) -> list[dict[str, float]]:
    """ns per dependent load for each size (MiB), on 4 KiB and on huge pages."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = _build(tmp)
        for mib in sizes:
            row: dict[str, float] = {"mib": mib}
            for huge, key in ((0, "ns_4k"), (1, "ns_huge")):
                row[key] = _time(exe, mib, huge, steps)
            rows.append(row)
    return rows


def measure_chains(sizes: list[int], chains: list[int], steps: int) -> list[dict[str, Any]]:
    """ns per load for each size (MiB) with each number of chases at once (huge pages)."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = _build(tmp)
        for mib in sizes:
            ns = {str(k): _time(exe, mib, 1, steps, k) for k in chains}
            rows.append({"mib": mib, "ns_by_chains": ns})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="MiB, comma-separated"
    )
    ap.add_argument("--steps", type=int, default=5_000_000, help="loads timed per size")
    ap.add_argument(
        "--chains", help=f"chases at once, comma-separated (1 to {MAX_CHAINS}; huge pages)"
    )
    ap.add_argument("--out", help="also write the rows here (JSON)")
    args = ap.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        print(f"mem_latency: --sizes: not a list of whole MiB: {args.sizes!r}", file=sys.stderr)
        return 2
    if not sizes or min(sizes) < 1 or args.steps < 1:
        print("mem_latency: --sizes and --steps must be positive", file=sys.stderr)
        return 2
    if args.chains is not None:
        try:
            chains = [int(k) for k in args.chains.split(",") if k]
        except ValueError:
            chains = []
        if not chains or min(chains) < 1 or max(chains) > MAX_CHAINS:
            print(
                f"mem_latency: --chains: not a list of whole numbers from 1 to {MAX_CHAINS}: "
                f"{args.chains!r}",
                file=sys.stderr,
            )
            return 2
        crows = measure_chains(sizes, chains, args.steps)
        print(f"{'working set':>12} " + " ".join(f"{k:>6} at once" for k in chains))
        for r in crows:
            cells = " ".join(f"{r['ns_by_chains'][str(k)]:>11.1f}ns" for k in chains)
            print(f"{int(r['mib']):>8} MiB {cells}")
        if args.out:
            Path(args.out).write_text(json.dumps(crows, indent=1) + "\n")
        return 0
    rows = measure(sizes, args.steps)
    print(f"{'working set':>12} {'4 KiB pages':>12} {'huge pages':>12}")
    for r in rows:
        print(f"{int(r['mib']):>8} MiB {r['ns_4k']:>9.1f} ns {r['ns_huge']:>9.1f} ns")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
