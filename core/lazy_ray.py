"""Ray, imported where it is first used: ``from core.lazy_ray import ray`` reads like
``import ray``, and the import (0.7-0.9 s of wall time on the project's 2-core machines, most
of a second in a run that lasts a few) happens at the first attribute read (``ray.get``,
``ray.remote``, ``ray.exceptions``). A run that never starts Ray (``--num_workers 0`` without
``--address``: a batched env stepped in the learner's own process) never imports it.

Questions about Ray that have an answer without it: ``imported()`` (no Ray object can exist
before the import: an exception cannot be Ray's, a value cannot be an ObjectRef) and
``initialized()`` (``ray.is_initialized()``, False when Ray was never imported).
"""
import importlib
import sys


class _LazyRay:
    """Stands for the ray module: every attribute read is the module's (imported on the first)."""
    __slots__ = ()

    def __getattr__(self, name):
        # import_module waits for an import under way in another thread (Ray is started in a
        # background thread: core/distributed/placement.py RayStarter) and then returns it.
        return getattr(importlib.import_module("ray"), name)

    def __repr__(self):
        return f"<ray, {'imported' if imported() else 'imported on first use'}>"


ray = _LazyRay()


def imported() -> bool:
    """Whether Ray has been imported (or its import has begun) in this process."""
    return "ray" in sys.modules


def initialized() -> bool:
    """``ray.is_initialized()``, without importing Ray for the answer."""
    is_initialized = getattr(sys.modules.get("ray"), "is_initialized", None)
    return bool(is_initialized is not None and is_initialized())
