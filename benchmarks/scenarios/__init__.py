"""Scenarios, one module per family; each registers itself with :mod:`benchmarks.registry`.

Scenario code runs inside the worker processes and is written against the
capability interfaces of :mod:`benchmarks.interfaces`, so every system runs
exactly the same measuring loop.
"""
