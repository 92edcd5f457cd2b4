"""Small DeepSeek-V4 checkpoints in the scenario layouts (SCENARIOS.md), real bytes.

Temporary stand-in until ``specguard.factory`` lands: names, dtypes and shapes
as the publishers write them; values are seeded random bytes of the right
kind (E2M1 nibbles, E8M0 exponents near 2^0, E4M3 scales, FP32 per-tensor
scales), enough for routing and loading, not for a forward pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

from specguard.checkpoint.writer import save_file

HIDDEN = 256
INTER = 128
EXPERTS = 4
MAIN_LAYERS = 2

FP8_BLOCK_CONFIG = {
    "quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "activation_scheme": "dynamic",
    "weight_block_size": [128, 128],
}


def config(draft_layers: int, quantization: dict | None) -> dict:
    cfg: dict = {
        "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
        "vocab_size": 512, "hidden_size": HIDDEN, "moe_intermediate_size": INTER,
        "num_hidden_layers": MAIN_LAYERS, "num_attention_heads": 4, "num_key_value_heads": 1,
        "head_dim": 128, "q_lora_rank": 128, "num_experts_per_tok": 2,
        "n_routed_experts": EXPERTS, "n_shared_experts": 1, "o_groups": 2, "o_lora_rank": 128,
        "index_n_heads": 4, "index_head_dim": 128, "index_topk": 64,
        "num_nextn_predict_layers": draft_layers, "expert_dtype": "fp4",
        "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
    }
    if quantization is not None:
        cfg["quantization_config"] = quantization
    return cfg


class _Tensors:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.out: dict[str, np.ndarray] = {}

    def fp4_bytes(self, rows: int, cols: int) -> np.ndarray:
        return self.rng.integers(0, 256, (rows, cols // 2), dtype=np.uint8)

    def mxfp4(self, name: str, rows: int, cols: int) -> None:
        """DeepSeek's native MXFP4 expert: packed E2M1 + E8M0 `.scale` per 32."""
        self.out[f"{name}.weight"] = self.fp4_bytes(rows, cols)
        exps = self.rng.integers(120, 130, (rows, cols // 32), dtype=np.uint8)
        self.out[f"{name}.scale"] = exps.view(ml_dtypes.float8_e8m0fnu)

    def nvfp4(self, name: str, rows: int, cols: int) -> None:
        """ModelOpt NVFP4: packed E2M1, E4M3 scale per 16, FP32 weight_scale_2 and input_scale."""
        self.out[f"{name}.weight"] = self.fp4_bytes(rows, cols)
        scale = self.rng.uniform(0.5, 4.0, (rows, cols // 16)).astype(ml_dtypes.float8_e4m3fn)
        self.out[f"{name}.weight_scale"] = scale
        self.out[f"{name}.weight_scale_2"] = np.array(self.rng.uniform(1e-4, 1e-3), np.float32)
        self.out[f"{name}.input_scale"] = np.array(self.rng.uniform(1e-3, 1e-2), np.float32)

    def nvfp4_ct(self, name: str, rows: int, cols: int) -> None:
        """compressed-tensors NVFP4: weight_packed, E4M3 weight_scale, reciprocal global scales."""
        self.out[f"{name}.weight_packed"] = self.fp4_bytes(rows, cols)
        scale = self.rng.uniform(0.5, 4.0, (rows, cols // 16)).astype(ml_dtypes.float8_e4m3fn)
        self.out[f"{name}.weight_scale"] = scale
        self.out[f"{name}.weight_global_scale"] = self.rng.uniform(1e3, 1e4, (1,)).astype(np.float32)
        self.out[f"{name}.input_global_scale"] = self.rng.uniform(1e2, 1e3, (1,)).astype(np.float32)

    def fp8_block_ct(self, name: str, rows: int, cols: int) -> None:
        """compressed-tensors FP8_BLOCK: weight + F32 weight_scale per 128x128 block."""
        self.out[f"{name}.weight"] = self.rng.normal(0, 1, (rows, cols)).astype(ml_dtypes.float8_e4m3fn)
        grid = (-(-rows // 128), -(-cols // 128))
        self.out[f"{name}.weight_scale"] = self.rng.uniform(1e-3, 1e-2, grid).astype(np.float32)

    def bf16_linear(self, name: str, rows: int, cols: int) -> None:
        self.bf16(f"{name}.weight", rows, cols)

    def fp8_block(self, name: str, rows: int, cols: int) -> None:
        """FP8 E4M3 block-128 weight with DeepSeek-V4's bare E8M0 `.scale`."""
        w = self.rng.normal(0, 1, (rows, cols)).astype(ml_dtypes.float8_e4m3fn)
        self.out[f"{name}.weight"] = w
        exps = self.rng.integers(118, 124, (-(-rows // 128), -(-cols // 128)), dtype=np.uint8)
        self.out[f"{name}.scale"] = exps.view(ml_dtypes.float8_e8m0fnu)

    def bf16(self, name: str, *shape: int) -> None:
        self.out[name] = self.rng.normal(0, 0.02, shape).astype(ml_dtypes.bfloat16)

    def block(self, base: str, experts: str, linears: str, draft: bool) -> None:
        """One decoder block's FFN (+ the MTP projections for a draft block)."""
        fmt = {"mxfp4": self.mxfp4, "nvfp4": self.nvfp4, "nvfp4_ct": self.nvfp4_ct,
               "bf16": self.bf16_linear}[experts]
        for e in range(EXPERTS):
            fmt(f"{base}.ffn.experts.{e}.w1", INTER, HIDDEN)
            fmt(f"{base}.ffn.experts.{e}.w3", INTER, HIDDEN)
            fmt(f"{base}.ffn.experts.{e}.w2", HIDDEN, INTER)
        lin = {"fp8_block": self.fp8_block, "fp8_block_ct": self.fp8_block_ct,
               "bf16": self.bf16_linear}[linears]
        lin(f"{base}.ffn.shared_experts.w1", INTER, HIDDEN)
        lin(f"{base}.ffn.shared_experts.w3", INTER, HIDDEN)
        lin(f"{base}.ffn.shared_experts.w2", HIDDEN, INTER)
        self.out[f"{base}.ffn.gate.weight"] = self.rng.normal(0, 0.02, (EXPERTS, HIDDEN)).astype(
            ml_dtypes.bfloat16
        )
        if draft:
            lin(f"{base}.e_proj", HIDDEN, HIDDEN)
            lin(f"{base}.h_proj", HIDDEN, HIDDEN)
            self.bf16(f"{base}.enorm.weight", HIDDEN)
            self.bf16(f"{base}.hnorm.weight", HIDDEN)


def write(
    outdir: Path, *, main: str, draft: str, draft_layers: int = 1,
    quantization: dict | None = None, seed: int = 0, main_linears: str = "fp8_block",
    draft_linears: str = "fp8_block",
) -> Path:
    """A checkpoint whose main / draft experts and linears are stored as named."""
    t = _Tensors(seed)
    for layer in range(MAIN_LAYERS):
        t.block(f"layers.{layer}", main, main_linears, draft=False)
    for i in range(draft_layers):
        t.block(f"mtp.{i}", draft, draft_linears, draft=True)
    outdir.mkdir(parents=True, exist_ok=True)
    save_file(t.out, outdir / "model.safetensors")
    cfg = config(draft_layers, quantization)
    (outdir / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return outdir


def s1(outdir: Path, draft_layers: int = 1, ignore: list[str] | None = None) -> Path:
    """NVFP4 conversion whose draft experts stay MXFP4; `ignored_layers: ["mtp.*"]`."""
    q = {**FP8_BLOCK_CONFIG, "moe_quant_algo": "NVFP4", "ignored_layers": ["mtp.*"]}
    if ignore is not None:
        q["ignore"] = ignore  # the ModelOpt-style list the V4.1 class honours
    return write(outdir, main="nvfp4", draft="mxfp4", draft_layers=draft_layers, quantization=q)


def s3(outdir: Path) -> Path:
    """Native DeepSeek-V4: MXFP4 experts everywhere, FP8 block linears with `.scale`."""
    return write(outdir, main="mxfp4", draft="mxfp4", quantization=dict(FP8_BLOCK_CONFIG))


def s8_nvfp4(outdir: Path) -> Path:
    """Clean: NVFP4 target whose draft experts are NVFP4 too, declared so."""
    q = {**FP8_BLOCK_CONFIG, "moe_quant_algo": "NVFP4"}
    return write(outdir, main="nvfp4", draft="nvfp4", quantization=q)


NVFP4_CT_ARGS = {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
                 "symmetric": True, "dynamic": False, "observer": "minmax"}
FP8_BLOCK_CT_ARGS = {"num_bits": 8, "type": "float", "strategy": "block",
                     "block_structure": [128, 128], "symmetric": True, "dynamic": False,
                     "observer": "minmax"}


def s2(outdir: Path) -> Path:
    """llm-compressor: NVFP4 experts, FP8 block linears, MTP block left BF16 by `re:.*mtp\\..*`."""
    q = {
        "quant_method": "compressed-tensors", "format": "mixed-precision",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["re:.*ffn\\.experts\\.\\d+\\.w[123]$"], "format": "nvfp4-pack-quantized",
                "weights": NVFP4_CT_ARGS,
                "input_activations": {**NVFP4_CT_ARGS, "dynamic": "local"},
            },
            "group_1": {
                "targets": ["re:.*(shared_experts\\.(w[123]|down_proj)|e_proj|h_proj)$"],
                "format": "float-quantized", "weights": FP8_BLOCK_CT_ARGS,
                "input_activations": {"num_bits": 8, "type": "float", "strategy": "group",
                                      "group_size": 128, "symmetric": True, "dynamic": True},
            },
        },
        "ignore": ["re:.*mtp\\..*", "lm_head"],
    }
    return write(outdir, main="nvfp4_ct", draft="bf16", quantization=q,
                 main_linears="fp8_block_ct", draft_linears="bf16")


DRAFT_LINEARS = ("e_proj", "h_proj", "ffn.shared_experts.w1", "ffn.shared_experts.w3",
                 "ffn.shared_experts.w2")


def s1_bf16_linears(outdir: Path) -> Path:
    """S1 whose draft linears are BF16 and listed by checkpoint name in ``ignored_layers``.

    vLLM 0.33 re-keys such ``mtp.0.*`` entries onto the draft layer only on ROCm.
    """
    ignored = ["mtp.*", *(f"mtp.0.{name}" for name in DRAFT_LINEARS)]
    q = {**FP8_BLOCK_CONFIG, "moe_quant_algo": "NVFP4", "ignored_layers": ignored}
    return write(outdir, main="nvfp4", draft="mxfp4", quantization=q, draft_linears="bf16")
