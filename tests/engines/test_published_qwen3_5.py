"""The published Qwen3.6-27B compressed-tensors config and its drafter's index entries
(tests/data/published/qwen3_5_dense_ct_mtpfile/SOURCES.md says where they come from): what vLLM 0.33
builds for every drafter module agrees with what the index says is stored, and the
shape of issue 19's fourth report (``mtp.fc`` BF16 under a config that does not list
it in ``ignore``) is caught on the real config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specguard.engines.vllm.v0_33 import MTP_MODEL, Vllm033
from specguard.formats import scheme as s
from specguard.formats.modules import split_name

DATA = Path(__file__).resolve().parents[1] / "data" / "published" / "qwen3_5_dense_ct_mtpfile"


def _config(drop_ignore: str | None = None) -> dict:
    cfg = json.loads((DATA / "config.json").read_text())
    if drop_ignore:
        cfg["quantization_config"]["ignore"].remove(drop_ignore)
    return cfg


def _stored() -> dict[str, str]:
    """Checkpoint module -> format the published names say (compressed-tensors packs
    ``weight_packed``; a bare ``weight`` is BF16)."""
    params: dict[str, set[str]] = {}
    for name in json.loads((DATA / "index.mtp-entries.json").read_text())["weight_map"]:
        module, param = split_name(name)
        params.setdefault(module, set()).add(param)
    return {m: s.INT4_GROUP if "weight_packed" in p else s.BF16 for m, p in params.items()}


def _builds(v: Vllm033, module: str):
    layout = v.layout
    return v.builds(layout.runtime_prefix(module), kind=layout.module_kind(module), model=MTP_MODEL)


def test_every_published_drafter_module_is_built_as_stored():
    v = Vllm033(_config())
    stored = _stored()
    assert len(stored) == 15 and all(v.layout.role(m).is_draft for m in stored)
    for module, fmt in stored.items():
        built = _builds(v, module).scheme
        assert (built.format if built.quantized else s.BF16) == fmt, module
        if fmt == s.INT4_GROUP:
            assert built.group_size == 32, module  # group_mtp: re:.*mtp\..*proj$


@pytest.mark.parametrize("module", ["mtp.fc"])
def test_bf16_mtp_fc_outside_ignore_is_built_int4_on_the_real_config(module):
    assert _stored()[module] == s.BF16
    built = _builds(Vllm033(_config(drop_ignore=module)), module)
    assert built.method == "CompressedTensorsLinearMethod" and built.scheme.format == s.INT4_GROUP
