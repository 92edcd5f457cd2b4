"""Fixtures for the vLLM plugin tests: real vLLM 0.33 configs and layers, built once."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.integrations import vllm_harness

vllm_harness.set_cpu_env()  # before anything imports vLLM


@pytest.fixture(scope="session")
def ckpt_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-ckpts")


def scenario(root: Path, name: str, quantization: dict | None = None, tag: str = "") -> Path:
    """A factory scenario; ``quantization`` entries replace config.json's claims, not the bytes."""
    from specguard.factory import write_scenario

    path = write_scenario(name, root / f"{name}{tag}").path
    if quantization:
        cfg_path = path / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["quantization_config"].update(quantization)
        cfg_path.write_text(json.dumps(cfg, indent=2))
    return path


@pytest.fixture(scope="session")
def s1_dir(ckpt_root: Path) -> Path:
    return scenario(ckpt_root, "s1")


@pytest.fixture(scope="session")
def s1_ignore_dir(ckpt_root: Path) -> Path:
    """S1 with the ModelOpt-style ``ignore`` list the V4.1 class honours."""
    return scenario(ckpt_root, "s1", {"ignore": ["mtp.*"]}, "-ignore")


@pytest.fixture(scope="session")
def s3_dir(ckpt_root: Path) -> Path:
    return scenario(ckpt_root, "s3")


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
def s1_u8_mtp(ckpt_root: Path, cpu_vllm: None) -> Any:
    """S1 with the draft's FP4 bytes and E8M0 scales labelled U8 (settled by their bytes)."""
    return _mtp_config(scenario(ckpt_root, "s1-u8"))


@pytest.fixture(scope="session")
def s1_ignore_mtp(s1_ignore_dir: Path, cpu_vllm: None) -> Any:
    return _mtp_config(s1_ignore_dir)


@pytest.fixture(scope="session")
def s3_mtp(s3_dir: Path, cpu_vllm: None) -> Any:
    return _mtp_config(s3_dir)


@pytest.fixture(scope="session")
def s8_mtp(ckpt_root: Path, cpu_vllm: None) -> Any:
    return _mtp_config(scenario(ckpt_root, "s8"))


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


@contextmanager
def capture_specguard_log() -> Iterator[list[logging.LogRecord]]:
    """Records the plugin logs to ``vllm.specguard`` (printed by vLLM's handlers).

    vLLM's logging set-up (run by EngineArgs) drops handlers of existing ``vllm.*``
    loggers: build configs before entering.
    """
    logger = logging.getLogger("vllm.specguard")
    handler, level = _Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture
def specguard_log() -> Iterator[list[logging.LogRecord]]:
    with capture_specguard_log() as records:
        yield records


@pytest.fixture(scope="session")
def s2_mtp(ckpt_root: Path, cpu_vllm: None) -> Any:
    return _mtp_config(scenario(ckpt_root, "s2"))


@pytest.fixture(scope="session")
def s1_rekey_mtp(ckpt_root: Path, cpu_vllm: None) -> Any:
    """S1 whose ignored_layers also lists the draft's e_proj by checkpoint name."""
    q = {"ignored_layers": ["mtp.*", "mtp.0.e_proj"]}
    return _mtp_config(scenario(ckpt_root, "s1", q, "-rekey"))


@pytest.fixture(scope="session")
def s1_dspark(ckpt_root: Path, cpu_vllm: None) -> Any:
    cfg = vllm_harness.engine_config(
        str(scenario(ckpt_root, "s1-dspark")), {"method": "dspark", "num_speculative_tokens": 3}
    )
    vllm_harness.init_single_rank(cfg)
    return cfg


@pytest.fixture(scope="session")
def s4(ckpt_root: Path, cpu_vllm: None) -> Any:
    """S4: NVFP4 target served with its separate native-FP4 DSpark drafter checkpoint."""
    from specguard.factory import write_scenario

    info = write_scenario("s4", ckpt_root / "s4")
    spec = {"method": "dspark", "num_speculative_tokens": 3, "model": str(info.drafter_path)}
    cfg = vllm_harness.engine_config(str(info.path), spec)
    vllm_harness.init_single_rank(cfg)
    return cfg
