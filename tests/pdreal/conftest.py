"""Fixtures for the engine tests; torch is imported inside them so that test modules
without torch (the allocator tests) still run where torch is absent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(autouse=True, scope="session")
def one_thread() -> None:
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model() -> Any:
    pytest.importorskip("torch")
    from pd_helpers import TINY

    from pdreal.model.weights import random_model

    return random_model(TINY, seed=7)


@pytest.fixture
def pd_factory(tiny_model: Any) -> Iterator[Any]:
    from pd_helpers import PD, make_pd

    made: list[PD] = []

    def factory(**kwargs: Any) -> PD:
        pd = make_pd(kwargs.pop("model", tiny_model), **kwargs)
        made.append(pd)
        return pd

    yield factory
    for pd in made:
        pd.prefill.kv.close()
        pd.decode.kv.close()
