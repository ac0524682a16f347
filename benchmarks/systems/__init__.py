"""Contenders and their adapters, one module per system (or per system and capability).

:mod:`benchmarks.systems.catalog` registers the systems; the other modules register
adapters. Peer packages are imported lazily inside adapters, so a missing package
makes its rows "unavailable" instead of breaking discovery.
"""
