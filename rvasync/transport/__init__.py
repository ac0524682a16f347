"""Transports: the objects programs send and listen with."""
