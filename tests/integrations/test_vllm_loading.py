"""S1's draft expert tensors through vLLM 0.33's own loader, into the parameters the method created.

vLLM's ``DefaultModelLoader`` reads the checkpoint, ``DeepSeekV4MTP.load_weights``
renames ``mtp.0.*`` to the draft layer and ``.scale`` to ``.weight_scale``, and
the layers' weight loaders copy the tensors; the expected bytes are read with
the ``safetensors`` library.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

from specguard import factory
from specguard.guard import LoadGuard
from specguard.integrations.vllm import installed, loading, routing
from specguard.integrations.vllm.settings import WARN, Settings
from tests.integrations import vllm_harness as H

EXPERTS = "model.layers.2.mtp_block.ffn.experts.routed_experts."
NVFP4_PER_TENSOR = ("w13_input_scale", "w13_weight_scale_2", "w2_input_scale", "w2_weight_scale_2")
SIZES = factory.SIZES["tiny"]
I = SIZES.moe_inter  # noqa: E741  (the expert intermediate size)


@pytest.fixture(scope="module")
def s1_draft(s1_dir: Path) -> dict[str, torch.Tensor]:
    out = {}
    for shard in sorted(s1_dir.glob("*.safetensors")):
        with safe_open(str(shard), framework="pt") as f:
            for k in f.keys():  # noqa: SIM118
                if k.startswith("mtp.0.ffn.experts."):
                    out[k] = f.get_tensor(k)
    return out


def experts_params(model: Any) -> dict[str, torch.Tensor]:
    return {
        n.removeprefix(EXPERTS): p for n, p in model.named_parameters() if n.startswith(EXPERTS)
    }


def test_before_e8m0_scales_are_cast_into_e4m3_slots_and_four_scales_never_written(
    s1_mtp: Any, s1_draft: dict[str, torch.Tensor]
) -> None:
    model = H.mtp_draft_model(s1_mtp, H.quant_config(s1_mtp, "cuda"))
    guard = LoadGuard(model, policy="report", include=[f"{EXPERTS}*"])
    with guard:
        H.load_draft_weights(s1_mtp, model)
    p = experts_params(model)

    # The slot is NVFP4's: E4M3, one scale per 16 -> twice as many columns as the
    # checkpoint's E8M0 scale (one per 32); the loader fills the first half.
    slot = p["w13_weight_scale"]
    ckpt = s1_draft["mtp.0.ffn.experts.0.w1.scale"]
    assert (slot.dtype, tuple(slot.shape)) == (torch.float8_e4m3fn, (4, 2 * I, 16))
    assert (ckpt.dtype, tuple(ckpt.shape)) == (torch.float8_e8m0fnu, (I, 8))
    # vLLM reinterprets the E8M0 bytes as uint8 and copies them numerically: the
    # exponent byte 125 (2^-2) becomes the E4M3 value 128.
    cast = ckpt.view(torch.uint8).to(torch.float8_e4m3fn)
    assert torch.equal(slot[0, :I, :8].view(torch.uint8), cast.view(torch.uint8))
    assert slot[0, :I, :8].float().min() >= 112 > ckpt.float().max()

    report = guard.report
    assert report.names("never_written") == tuple(EXPERTS + n for n in NVFP4_PER_TENSOR)
    assert report.names("partly_written") == (
        EXPERTS + "w13_weight_scale", EXPERTS + "w2_weight_scale",
    )


def test_plugin_loads_s1_draft_experts_into_mxfp4_parameters(
    s1_mtp: Any, s1_dir: Path, s1_draft: dict[str, torch.Tensor], plugin: None,
    specguard_log: list[logging.LogRecord],
) -> None:
    model = H.mtp_draft_model(s1_mtp, H.quant_config(s1_mtp, "cuda"))
    with loading.draft_load(str(s1_dir)):  # what the load_model wrapper marks for a draft
        H.load_draft_weights(s1_mtp, model)  # the plugin's LoadGuard raises on any gap
    p = experts_params(model)

    assert {n: (str(t.dtype), tuple(t.shape)) for n, t in p.items()} == {
        "w13_weight": ("torch.uint8", (4, 2 * I, 128)),
        "w2_weight": ("torch.uint8", (4, 256, I // 2)),
        "w13_weight_scale": ("torch.uint8", (4, 2 * I, 8)),
        "w2_weight_scale": ("torch.uint8", (4, 256, I // 32)),
    }
    for e in range(SIZES.experts):
        t = {k.removeprefix(f"mtp.0.ffn.experts.{e}."): v for k, v in s1_draft.items()
             if k.startswith(f"mtp.0.ffn.experts.{e}.")}
        # DeepSeek stores the packed FP4 bytes as I8; the loader keeps every byte.
        assert torch.equal(p["w13_weight"][e, :I], t["w1.weight"].view(torch.uint8))
        assert torch.equal(p["w13_weight"][e, I:], t["w3.weight"].view(torch.uint8))
        assert torch.equal(p["w2_weight"][e], t["w2.weight"].view(torch.uint8))
        assert torch.equal(p["w13_weight_scale"][e, :I], t["w1.scale"].view(torch.uint8))
        assert torch.equal(p["w13_weight_scale"][e, I:], t["w3.scale"].view(torch.uint8))
        assert torch.equal(p["w2_weight_scale"][e], t["w2.scale"].view(torch.uint8))
    assert any("all written and finite" in r.getMessage() for r in specguard_log)


def test_plugin_guard_stops_a_draft_load_that_leaves_parameters_unwritten(
    s1_mtp: Any, s1_dir: Path, plugin: None
) -> None:
    with routing.vanilla():  # the draft built as vLLM 0.33 builds it: NVFP4
        model = H.mtp_draft_model(s1_mtp, H.quant_config(s1_mtp, "cuda"))
    with pytest.raises(loading.DraftLoadError) as err, loading.draft_load(str(s1_dir)):
        H.load_draft_weights(s1_mtp, model)
    assert set(err.value.report.names("never_written")) == {EXPERTS + n for n in NVFP4_PER_TENSOR}
    assert "SPECGUARD_VLLM_GUARD=warn" in str(err.value)


def test_guard_warn_policy_logs_instead_of_raising(
    s1_mtp: Any, s1_dir: Path, specguard_log: list[logging.LogRecord]
) -> None:
    model = H.mtp_draft_model(s1_mtp, H.quant_config(s1_mtp, "cuda"))
    with installed(Settings(guard=WARN)), loading.draft_load(str(s1_dir)):
        H.load_draft_weights(s1_mtp, model)
    errors = [r.getMessage() for r in specguard_log if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "4 never written" in errors[0]
    assert EXPERTS + "w13_weight_scale_2" in errors[0]


def test_target_loads_are_not_guarded(s1_mtp: Any, plugin: None) -> None:
    assert loading.is_draft_load(s1_mtp, s1_mtp.speculative_config.draft_model_config)
    assert not loading.is_draft_load(s1_mtp, s1_mtp.model_config)


# --- through vLLM's BaseModelLoader.load_model, as the draft proposer calls it ---------------


@pytest.fixture
def cpu_post_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the weights are in, vLLM repacks them for the device's kernels and empties the
    accelerator cache; neither exists on this CPU, so both steps are skipped."""
    from vllm.model_executor.model_loader import base_loader

    monkeypatch.setattr(torch.accelerator, "empty_cache", lambda: None)
    monkeypatch.setattr(base_loader, "process_weights_after_loading", lambda *a, **k: None)


def _load_model(cfg: Any, model_config: Any) -> Any:
    """vLLM's ``load_model`` (create, load weights, post-process) with the partial MTP model."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import DefaultModelLoader

    class PartialModelLoader(DefaultModelLoader):
        def create_model(self, vllm_config: Any, model_config: Any, prefix: str = "") -> Any:
            return H.mtp_draft_model(vllm_config, H.quant_config(vllm_config, "cuda"))

    with set_current_vllm_config(cfg):
        return PartialModelLoader(cfg.load_config).load_model(
            vllm_config=cfg, model_config=model_config
        )


def test_load_model_routes_guards_and_logs_the_draft(
    s1_mtp: Any, plugin: None, cpu_post_load: None, specguard_log: list[logging.LogRecord]
) -> None:
    model = _load_model(s1_mtp, s1_mtp.speculative_config.draft_model_config)
    assert set(experts_params(model)) == {
        "w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale",
    }
    lines = [r.getMessage() for r in specguard_log]
    # (the first test to import the V4.1 class also sees its "routes by what is stored" line)
    assert [m for m in lines if "routes by what is stored" not in m] == [
        "specguard: model.layers.2.ffn.experts (draft; checkpoint mtp.0.ffn.experts.*): "
        "stored MXFP4, vLLM would build NVFP4 -> routed MXFP4",
        "specguard: 1 draft expert layer stored MXFP4, vLLM would build NVFP4 -> routed MXFP4",
        "specguard: draft weights: LoadGuard: 14 tensors checked, all written and finite",
    ]


def test_load_model_stops_on_an_unwritten_draft_parameter(
    s1_mtp: Any, plugin: None, cpu_post_load: None
) -> None:
    with routing.vanilla(), pytest.raises(loading.DraftLoadError) as err:  # built as vLLM does
        _load_model(s1_mtp, s1_mtp.speculative_config.draft_model_config)
    assert set(err.value.report.names("never_written")) == {EXPERTS + n for n in NVFP4_PER_TENSOR}


def test_load_model_does_not_guard_the_target(
    s1_mtp: Any, plugin: None, cpu_post_load: None, specguard_log: list[logging.LogRecord]
) -> None:
    with routing.vanilla():  # a load with the target's ModelConfig: no guard, whatever it holds
        _load_model(s1_mtp, s1_mtp.model_config)
    assert not any("draft weights" in r.getMessage() for r in specguard_log)
