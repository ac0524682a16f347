"""Side-by-side benchmarks of rvasync against its peers (NATS, ZeroMQ) and a bare-socket floor.

Run ``python -m benchmarks run --help``. The package is organised by concern:

- :mod:`benchmarks.registry`: scenarios, systems, variants and the adapters joining them;
- :mod:`benchmarks.interfaces`: what an adapter must provide for each capability;
- :mod:`benchmarks.measure`: the measuring code shared by every system (clock, sinks, pumps);
- :mod:`benchmarks.scenarios`: the scenarios, written once against the interfaces;
- :mod:`benchmarks.systems`: one module per system (and per capability where useful);
- :mod:`benchmarks.procs`: worker and broker processes, free loopback ports, cleanup;
- :mod:`benchmarks.worker`: the entry point every measured process runs;
- :mod:`benchmarks.runner` and :mod:`benchmarks.cli`: orchestration and the command line;
- :mod:`benchmarks.stats`, :mod:`benchmarks.report`, :mod:`benchmarks.charts`,
  :mod:`benchmarks.machine`: numbers, the results page, its charts, the machine description.

A new capability (certified delivery, fault tolerance ...) adds a module under
``benchmarks/scenarios/`` and adapters under ``benchmarks/systems/``; both are
discovered at start-up, so the runner never changes.
"""
