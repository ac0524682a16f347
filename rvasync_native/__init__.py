"""Compiled (Cython) hot paths of rvasync.

Each module here has a pure-Python twin under ``rvasync/fallback/`` with the same
interface; ``rvasync._accel`` picks one at import time.
"""
