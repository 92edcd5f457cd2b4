"""Fixtures for the vLLM plugin tests: real vLLM 0.33 configs and layers, built once."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integrations import checkpoints, vllm_harness

vllm_harness.set_cpu_env()  # before anything imports vLLM


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-ckpts")


@pytest.fixture(scope="session")
def s1_dir(ckpt_root: Path) -> Path:
    return checkpoints.s1(ckpt_root / "s1")


@pytest.fixture(scope="session")
def s1_ignore_dir(ckpt_root: Path) -> Path:
    return checkpoints.s1(ckpt_root / "s1-ignore", ignore=["mtp.*"])


@pytest.fixture(scope="session")
def s3_dir(ckpt_root: Path) -> Path:
    return checkpoints.s3(ckpt_root / "s3")


@pytest.fixture(scope="session")
def s8_dir(ckpt_root: Path) -> Path:
    return checkpoints.s8_nvfp4(ckpt_root / "s8-nvfp4")


@pytest.fixture(scope="session")
def cpu_vllm() -> Iterator[None]:
    """Kernel-availability checks off for the session (see vllm_harness)."""
    with vllm_harness.cpu_kernel_checks_off():
        yield


def _mtp_config(model: Path) -> Any:
    cfg = vllm_harness.engine_config(str(model), {"method": "mtp", "num_speculative_tokens": 1})
    vllm_harness.init_single_rank(cfg)
    return cfg


@pytest.fixture(scope="session")
def s1_mtp(s1_dir: Path, cpu_vllm: None) -> Any:
    return _mtp_config(s1_dir)


@pytest.fixture(scope="session")
def s1_ignore_mtp(s1_ignore_dir: Path, cpu_vllm: None) -> Any:
    return _mtp_config(s1_ignore_dir)


@pytest.fixture(scope="session")
def s3_mtp(s3_dir: Path, cpu_vllm: None) -> Any:
    return _mtp_config(s3_dir)


@pytest.fixture(scope="session")
def s8_mtp(s8_dir: Path, cpu_vllm: None) -> Any:
    return _mtp_config(s8_dir)


@pytest.fixture
def plugin() -> Iterator[None]:
    """The plugin installed in fix mode for one test, vLLM restored after."""
    from specguard.integrations.vllm import installed, routing

    routing.take_decisions()
    with installed():
        yield
    routing.take_decisions()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def specguard_log() -> Iterator[list[logging.LogRecord]]:
    """Records the plugin logs (to ``vllm.specguard``, which vLLM's handlers print)."""
    logger = logging.getLogger("vllm.specguard")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler.records
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture(scope="session")
def s2_mtp(ckpt_root: Path, cpu_vllm: None) -> Any:
    return _mtp_config(checkpoints.s2(ckpt_root / "s2"))


@pytest.fixture(scope="session")
def s1_bf16_linears_mtp(ckpt_root: Path, cpu_vllm: None) -> Any:
    return _mtp_config(checkpoints.s1_bf16_linears(ckpt_root / "s1-bf16-linears"))


@pytest.fixture(scope="session")
def s8_with_s3_drafter(s8_dir: Path, s3_dir: Path, cpu_vllm: None) -> Any:
    """Target S8 (draft region NVFP4) served with a separate DSpark drafter: S3 (MXFP4)."""
    spec = {"method": "dspark", "num_speculative_tokens": 3, "model": str(s3_dir)}
    cfg = vllm_harness.engine_config(str(s8_dir), spec)
    vllm_harness.init_single_rank(cfg)
    return cfg
