"""Bytes on the wire: the packet model and its IPv6/UDP/BTH/MRC codec."""
