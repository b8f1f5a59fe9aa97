"""A local handle (core/distributed/placement.py) resolves ray refs among its arguments, as Ray does for an
actor call: an elastic start's stand-in worker is handed ray.put weights once the remote
workers exist (a CNN's weights are too large to inline)."""
import numpy as np
import pytest

from core.distributed.placement import LocalHandle, LocalRef, resolve

pytestmark = pytest.mark.contract


class Echo:
    def echo(self, *args, **kwargs):
        return args, kwargs


def test_a_local_call_gets_the_values_behind_ray_refs_and_local_refs(ray_session):
    import ray
    weights = {"w": np.arange(300_000, dtype=np.float32)}  # 1.2 MB: past inlining
    ref = ray.put(weights)
    out = resolve(LocalHandle(Echo()).echo.remote(ref, LocalRef(3), 4, key=ref))
    (got, three, four), kwargs = out
    np.testing.assert_array_equal(got["w"], weights["w"])
    assert (three, four) == (3, 4)
    np.testing.assert_array_equal(kwargs["key"]["w"], weights["w"])
