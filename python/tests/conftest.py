import numpy as np
import pytest


def random_graph(rng, n, e, self_loops=True):
    src = rng.integers(0, n, size=e)
    dst = rng.integers(0, n, size=e)
    if not self_loops:
        keep = src != dst
        src, dst = src[keep], dst[keep]
    return np.stack([src, dst]).astype(np.int64)


@pytest.fixture
def rng():
    return np.random.default_rng(7)
