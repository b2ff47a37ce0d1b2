"""The native event loop alone: events per CPU second with no Python code in the loop.

64 packets circle through one native switch and its egress port back into
itself (every event native: arrival at the switch, enqueue, transmitter free),
for 100 simulated ms; the best of 5 runs.  It measures what an event costs in
``openmrc.sim._kernel`` (heap, key, dispatch), e.g. before and after a change
to the event layout (docs/performance.md, "The entity key in the sequential
run"); it needs the kernel built.

    python benchmarks/kernel_loop.py
"""

from __future__ import annotations

import time

from openmrc.sim import _kernel as k
from openmrc.topology import BLOCK, SwitchInfo
from openmrc.wire.packets import DataPacket, Opcode


def main() -> None:
    """Print the events run and the best rate."""
    best = 0.0
    n = 0
    for _ in range(5):
        sim = k.Simulator(1)
        sw = k.Switch(SwitchInfo("loop", 0, 0, 0, 0), 1)
        port = k.EgressPort(
            sim, "loop", 10**11, 1000, sw.receive, data_limit=10**9, prio_limit=10**5
        )
        sw.ports[0] = port
        sw.install({0: 0})
        if hasattr(sim, "add_entity"):  # (a kernel with entity keys: one entity)
            sim.add_entity([sw, port])
        for _ in range(64):
            pkt = DataPacket(5, 0, Opcode.WRITE_ONLY, 0, 0, 0, 0, 1000)
            pkt.route = BLOCK
            port.enqueue(pkt)
        t = time.process_time()
        n = sim.run(until_ps=100 * 10**9)
        best = max(best, n / (time.process_time() - t))
    print(f"{n:,} events, best {best / 1e6:.2f} M events per CPU second")


if __name__ == "__main__":
    main()
