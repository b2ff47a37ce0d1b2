"""Errors raised to the *user* of the transport API.

Input from the network never raises: bad packets are dropped and counted (and
NACKed where the protocol says so).  Bad API use raises one of these, with a
message that names the argument or field and the reason.
"""

from __future__ import annotations


class MrcError(Exception):
    """Base class of every error the openmrc transport API raises."""


class InvalidArgument(MrcError, ValueError):
    """An argument or attribute value is out of range or inconsistent."""


class InvalidState(MrcError):
    """The operation is not allowed in the object's current state."""


class ResourceExhausted(MrcError):
    """A queue or a bounded resource (send queue, max_wimm) is full."""
