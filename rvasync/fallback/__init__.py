"""Pure-Python twins of the modules in ``rvasync_native`` (same names, same interfaces)."""
