"""Type stub of the native EV draws (src/openmrc/transport/_draws.c): the same
functions as :func:`openmrc.transport.paths._shuffle` and
:func:`openmrc.transport.paths._picks`; see those for what each does."""

from collections.abc import Callable

def shuffle(getrandbits: Callable[[int], int], x: list[int], /) -> None: ...
def picks(getrandbits: Callable[[int], int], nsp: int, need: int, /) -> list[int]: ...
