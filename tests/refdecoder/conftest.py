"""Fixtures for the engine's tests: the trained model, held-out prompts, one CPU thread."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from specguard.refdecoder.corpus import held_out_sample
from specguard.refdecoder.model import Transformer
from specguard.refdecoder.weights import load_weights


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    # The model's matmuls are tiny: extra threads only add contention on a shared box.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def trained() -> Transformer:
    return load_weights()


@pytest.fixture(scope="session")
def held_out() -> bytes:
    """Held-out standard-library source of the Python running the tests."""
    return held_out_sample(max_bytes=256 * 1024)


@pytest.fixture(scope="session")
def prompts(held_out: bytes) -> list[list[int]]:
    """Six 48-byte prompts cut at evenly spaced line starts of held-out text."""
    out, step = [], len(held_out) // 6
    for i in range(6):
        start = held_out.index(b"\n", i * step) + 1
        out.append(list(held_out[start : start + 48]))
    return out
