"""Fixtures for the guard's tests: factory scenario checkpoints and devices."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from specguard.factory import write_scenario


@pytest.fixture(scope="session")
def s1_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """S1: ModelOpt NVFP4 main experts, MXFP4 (I8 + E8M0) MTP experts, global NVFP4 config."""
    return write_scenario("s1", tmp_path_factory.mktemp("s1") / "ckpt").path


@pytest.fixture(scope="session")
def s5_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """S5: like S1 but the draft experts stored NVFP4 without weight_scale_2/input_scale."""
    return write_scenario("s5", tmp_path_factory.mktemp("s5") / "ckpt").path


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    return request.param
