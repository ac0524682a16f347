"""Protocol cores, sans-IO: state machines fed with inputs and the time, returning outputs."""
