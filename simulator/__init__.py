"""The discrete-event engine (SimPy): replicas, scheduler, KV cache, verify batching, CUDA-graph buckets.

Imports ``traces`` and the executor protocol (``backends.protocol``) only; never torch.
"""
