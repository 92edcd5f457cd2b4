"""The plugin on an architecture specguard has no recorded plan of (issue 27 item 5): it leaves
that model's routing to vLLM, with one warning naming the architecture.

A one-layer Qwen2 checkpoint (``Qwen2ForCausalLM``: vLLM 0.33 serves it; no plan is recorded
for it, docs/architecture.md "Plans") stores BF16 under an FP8 config. vLLM's real ``Fp8Config``
and ``Qwen2MLP`` on CPU build ``Fp8LinearMethod``; specguard routes it ``unknown``, so the
plugin must not guess: before this rule it swapped in ``UnquantizedLinearMethod`` by the disk.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from specguard.integrations.vllm import installed, routing
from specguard.resolve import UNKNOWN, Resolver
from tests.integrations import vllm_harness as H

H_, I_, V_, HEADS, KV = 64, 128, 128, 4, 2


def _qwen2(root: Path) -> Path:
    import torch
    from safetensors.torch import save_file

    root.mkdir()
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": H_,
              "intermediate_size": I_, "num_hidden_layers": 1, "num_attention_heads": HEADS,
              "num_key_value_heads": KV, "vocab_size": V_, "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
              "torch_dtype": "bfloat16", "tie_word_embeddings": False, "rope_theta": 10000.0,
              "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}}
    (root / "config.json").write_text(json.dumps(config))
    g = torch.Generator().manual_seed(0)
    d = H_ // HEADS
    shapes = {"model.embed_tokens.weight": (V_, H_), "lm_head.weight": (V_, H_), "model.norm.weight": (H_,),
              "model.layers.0.input_layernorm.weight": (H_,), "model.layers.0.post_attention_layernorm.weight": (H_,),
              "model.layers.0.self_attn.q_proj.weight": (HEADS * d, H_),
              "model.layers.0.self_attn.q_proj.bias": (HEADS * d,),
              "model.layers.0.self_attn.k_proj.weight": (KV * d, H_), "model.layers.0.self_attn.k_proj.bias": (KV * d,),
              "model.layers.0.self_attn.v_proj.weight": (KV * d, H_), "model.layers.0.self_attn.v_proj.bias": (KV * d,),
              "model.layers.0.self_attn.o_proj.weight": (H_, HEADS * d),
              "model.layers.0.mlp.gate_proj.weight": (I_, H_), "model.layers.0.mlp.up_proj.weight": (I_, H_),
              "model.layers.0.mlp.down_proj.weight": (H_, I_)}
    save_file({k: torch.randn(*s, generator=g).to(torch.bfloat16) for k, s in shapes.items()},
              str(root / "model.safetensors"), metadata={"format": "pt"})
    return root


@pytest.fixture(scope="module")
def qwen2(ckpt_root: Path, cpu_vllm: None) -> tuple[Path, Any, Any]:
    path = _qwen2(ckpt_root / "qwen2-fp8-claim")
    cfg = H.engine_config(str(path))
    H.init_single_rank(cfg)
    from vllm.config import VllmConfig

    quant = VllmConfig.get_quantization_config(cfg.model_config, cfg.load_config)
    assert type(quant).__name__ == "Fp8Config"
    return path, cfg, quant


def _mlp(cfg: Any, quant: Any) -> tuple[str, str]:
    """(gate_up_proj, down_proj) methods of vLLM's Qwen2MLP at ``model.layers.0.mlp``."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.models.qwen2 import Qwen2MLP

    with set_current_vllm_config(H.with_quant_config(cfg, quant)):
        mlp = Qwen2MLP(H_, I_, "silu", quant_config=quant, prefix="model.layers.0.mlp")
    return H.method_name(mlp.gate_up_proj), H.method_name(mlp.down_proj)


def test_specguard_cannot_say_and_vllm_builds_fp8(qwen2: tuple[Path, Any, Any]) -> None:
    path, cfg, quant = qwen2
    assert {rt.verdict for rt in Resolver.open(path).routes() if rt.prefix.endswith("_proj")} == {UNKNOWN}
    with routing.vanilla():
        assert _mlp(cfg, quant) == ("Fp8LinearMethod", "Fp8LinearMethod")


def test_plugin_leaves_the_model_to_vllm_with_one_warning(qwen2: tuple[Path, Any, Any],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    _, cfg, quant = qwen2
    routing.take_decisions()
    with caplog.at_level(logging.WARNING, logger="vllm.specguard"), installed():
        assert _mlp(cfg, quant) == ("Fp8LinearMethod", "Fp8LinearMethod")
        assert _mlp(cfg, quant) == ("Fp8LinearMethod", "Fp8LinearMethod")  # a second build: no second warning
    assert routing.take_decisions() == []
    warnings = [r.getMessage() for r in caplog.records if r.name == "vllm.specguard" and r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "Qwen2ForCausalLM" in warnings[0] and "leaves this model's routing to vLLM" in warnings[0]
