"""Executors: how long a batch takes.

``backends.protocol`` is the small protocol every executor implements; ``roofline`` and
``profile`` run on the CPU; ``backends.aiter`` is the real AITER graph-replay executor and is
the only module that imports torch or aiter, and only when it is used.
"""
