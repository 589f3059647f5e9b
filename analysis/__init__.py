"""Metrics, SLOs, reports and plots, capacity planning, uniformity validation, sweeps.

Reads result tables (parquet) and configs; never reaches into a running simulation.  Modules:

- ``results``: read a results folder (``load_run``) or wrap tables in memory (``from_tables``).
- ``metrics``: every serving metric from the tables (``summarize``).
- ``slo``: parse and check SLOs (``parse_slo``).
- ``report`` / ``plots``: the self-contained HTML report and the terminal summary.
- ``search``: the capacity search algorithm alone (``ScaleSearch``).
- ``plan``: the highest sustainable rate, replicas for a target, configuration search.
- ``uniformity``: every verify policy on one trace, side by side.
- ``grid`` / ``sweep``: configuration grids, resumable sweeps.
- ``runner`` / ``parallel``: running simulations in this process, a process pool or on Ray.
- ``cli``: the ``report``, ``plan``, ``uniformity``, ``sweep`` (and ``fidelity``) commands.

docs/analysis.md documents every command, column and key.
"""
