"""Metrics, SLOs, reports and plots, capacity planning, uniformity validation, sweeps.

Reads result tables (parquet) and configs; never reaches into a running simulation.
"""
