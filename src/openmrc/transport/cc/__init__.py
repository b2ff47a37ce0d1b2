"""Congestion control: a small ABC and a registry selected by name (``nscc``, ``fixed``)."""

from . import fixed, nscc
from .base import CongestionControl, available, create, register

__all__ = ["CongestionControl", "available", "create", "fixed", "nscc", "register"]
