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

    python benchmarks/mem_latency.py                       # 1 MiB .. 512 MiB
    python benchmarks/mem_latency.py --sizes 1,8,64 --out lat.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_CHASE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

/* chase MIB HUGE STEPS: ns per dependent load over a random cycle of MIB MiB */
int main(int argc, char **argv)
{
    if (argc != 4)
        return 2;
    size_t bytes = (size_t)atol(argv[1]) << 20, lines = bytes / 64, steps = (size_t)atol(argv[3]);
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
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (size_t i = 0; i < steps; i++)
        q = (char **)*q;
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / steps;
    printf("%.2f %d\n", ns, q != NULL);
    return 0;
}
"""

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 512)


def measure(sizes: list[int], steps: int) -> list[dict[str, float]]:
    """ns per dependent load for each size (MiB), on 4 KiB and on huge pages."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("mem_latency: needs a C compiler (cc)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "chase.c", Path(tmp) / "chase"
        src.write_text(_CHASE)
        subprocess.run([cc, "-O2", "-o", str(exe), str(src)], check=True)
        for mib in sizes:
            row: dict[str, float] = {"mib": mib}
            for huge, key in ((0, "ns_4k"), (1, "ns_huge")):
                out = subprocess.run(
                    [str(exe), str(mib), str(huge), str(steps)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                row[key] = float(out.split()[0])
            rows.append(row)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="MiB, comma-separated"
    )
    ap.add_argument("--steps", type=int, default=5_000_000, help="loads timed per size")
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
    rows = measure(sizes, args.steps)
    print(f"{'working set':>12} {'4 KiB pages':>12} {'huge pages':>12}")
    for r in rows:
        print(f"{int(r['mib']):>8} MiB {r['ns_4k']:>9.1f} ns {r['ns_huge']:>9.1f} ns")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
