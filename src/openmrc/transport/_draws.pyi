"""Type stub of the native EV draws (src/openmrc/transport/_draws.c): the same
functions as :func:`openmrc.transport.paths._shuffle` and
:func:`openmrc.transport.paths._picks`, and a whole generated profile's draws
(:func:`openmrc.transport.paths._draw_planes_native`); see those for what each does."""

from array import array
from collections.abc import Callable, Sequence

def shuffle(getrandbits: Callable[[int], int], x: list[int], /) -> None: ...
def picks(getrandbits: Callable[[int], int], nsp: int, need: int, /) -> list[int]: ...
def draw_planes(
    getrandbits: Callable[[int], int],
    planes: Sequence[int],
    uplinks: Sequence[int],
    spares: Sequence[int],
    n: int,
    seeds: array[int],
    /,
) -> bytes | None: ...

#: 1 when the draws read CPython's generator state directly (see _draws.c).
DIRECT: int
