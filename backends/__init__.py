"""Executors: how long a batch takes.

``backends.protocol`` is the small protocol every executor implements; ``roofline`` and
``profile`` run on the CPU; ``backends.aiter`` is the real AITER graph-replay executor and is
the only module that imports torch or aiter, and only when it is used.

:func:`make_executor` builds any of them by name.  This module imports neither torch nor the
executors themselves until one is asked for.
"""

from __future__ import annotations

from typing import Any

__all__ = ["make_executor", "EXECUTORS"]

#: Names :func:`make_executor` accepts.
EXECUTORS = ("profile", "roofline", "aiter")


def make_executor(name: str, *, model: Any, gpu: Any = "H200", profile: Any = None,
                  **opts: Any):
    """An executor by name.

    - ``"profile"``: interpolates a measured profile: ``profile`` (a path), else the shipped
      ``backends/profiles/<model>__<gpu>.parquet``; the profile must be of ``model``.
    - ``"roofline"``: FLOPs and bytes of ``model`` against the ``gpu`` sheet; ``opts`` may override
      the sheet's achievable fractions and launch costs (``roofline.ROOFLINE_OPTIONS``).
    - ``"aiter"``: the live AITER executor on this machine's GPU
      (``backends.aiter.make_executor(model=..., gpu=gpu, **opts)``; ``gpu`` names the sheet its
      modelled all-reduce uses).

    ``model`` is a preset name, a ``config.json`` path or a ``ModelShape``.  ``profile`` is used by
    the profile backend only (the others ignore it, so one configuration can name a profile and
    still be run on any backend).  Unknown names and bad options raise ``SpecschedError``.
    """
    from traces.errors import SpecschedError

    key = str(name).strip().lower()
    if key not in EXECUTORS:
        raise SpecschedError(f"unknown backend {name!r}; valid: {', '.join(EXECUTORS)}")
    from backends.models import load_model

    shape = load_model(model)
    if key == "roofline":
        from backends.roofline import make_roofline_executor

        return make_roofline_executor(shape, gpu, **opts)
    if key == "profile":
        if opts:
            raise SpecschedError(f"the profile backend takes no options, got {sorted(opts)}")
        from backends.profile import ProfileExecutor, default_profile

        path = profile if profile is not None else default_profile(shape.name, gpu)
        return ProfileExecutor(path, model=shape)
    import importlib

    aiter = importlib.import_module("backends.aiter")
    factory = getattr(aiter, "make_executor", None)
    if factory is None:
        raise SpecschedError("the aiter backend is not available in this build "
                             "(backends.aiter.make_executor is missing)")
    return factory(model=shape, gpu=gpu, **opts)
