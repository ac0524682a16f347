"""Scale: how the cost grows with hosts, subjects and networks (issue 40).

``python -m benchmarks.scale sim ...`` runs the project's own sans-IO cores by
the thousand on a simulated network and clock (deterministic: its figures are
publishable on any machine); ``python -m benchmarks.scale lab ...`` measures
the same quantities between real hosts (network namespaces, real multicast,
nftables loss: tests/lab/lab.py). Both write ``benchmarks/results/scale.json``
and regenerate the "Scale" section of docs/performance.md with its charts
(``benchmarks/scale/page.py``).
"""
