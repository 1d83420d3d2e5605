"""Helpers the tests share (stand-in servers, records, training runs, the layer check)."""
