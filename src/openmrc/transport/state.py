"""The queue pair state machine, as one transition table (h11 style).

RESET -> INIT -> RTR -> RTS is the verbs bring-up; any state may go to ERROR
(by the user or when the transport fails) and to RESET (by the user).  A QP in
ERROR flushes its work and accepts nothing new until it is reset.
"""

from __future__ import annotations

from enum import Enum
from typing import Final

from .errors import InvalidState


class QPState(Enum):
    """Verbs queue pair states."""

    RESET = "RESET"
    INIT = "INIT"
    RTR = "RTR"  # ready to receive
    RTS = "RTS"  # ready to send
    ERROR = "ERROR"


S = QPState

#: state -> states the user may move a QP to with ``modify``.
TRANSITIONS: dict[QPState, frozenset[QPState]] = {
    S.RESET: frozenset({S.INIT, S.RESET, S.ERROR}),
    S.INIT: frozenset({S.INIT, S.RTR, S.RESET, S.ERROR}),
    S.RTR: frozenset({S.RTS, S.RESET, S.ERROR}),
    S.RTS: frozenset({S.RTS, S.RESET, S.ERROR}),
    S.ERROR: frozenset({S.RESET, S.ERROR}),
}

#: states in which each capability is available.
CAN_POST_RECV: Final = frozenset({S.INIT, S.RTR, S.RTS})
CAN_POST_SEND: Final = frozenset({S.RTS})
CAN_RECEIVE: Final = frozenset({S.RTR, S.RTS})
CAN_SEND: Final = frozenset({S.RTS})


def check_transition(current: QPState, new: QPState) -> None:
    """Raise :class:`InvalidState` unless ``current -> new`` is in the table."""
    if new not in TRANSITIONS[current]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current]))
        raise InvalidState(
            f"QP state: cannot go from {current.value} to {new.value} (allowed: {allowed})"
        )
