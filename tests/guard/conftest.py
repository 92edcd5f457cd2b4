"""Fixtures for the guard's tests: S1/S5-shaped checkpoints and devices."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from guard_ckpts import write_checkpoint


@pytest.fixture(scope="session")
def s1_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("s1"), "mxfp4")


@pytest.fixture(scope="session")
def s5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("s5"), "nvfp4-no-global-scales")


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param
