"""Compiled (Cython) hot paths of rvasync.

Each module here has a pure-Python twin under ``rvasync/fallback/`` with the same
interface; ``rvasync._accel`` picks one at import time.

The native modules build on rvasync's Python modules (messages, errors, wire
constants), and importing any of those runs ``rvasync/__init__``, which picks
the codec and loads ``rvasync_native.codec``. Importing ``rvasync`` here, first,
lets that choice finish before a native module starts initialising: otherwise
``import rvasync_native.codec`` on its own would meet its own half-built module
through the codec choice (a circular import).
"""

import rvasync as _rvasync  # noqa: F401  (see the docstring: import order, not a name)
