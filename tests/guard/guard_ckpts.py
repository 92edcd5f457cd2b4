"""Small S1/S5-shaped DeepSeek-V4 checkpoints with real bytes.

Written here with specguard's own safetensors writer until the factory lands:
packed FP4 (U8 / I8 nibbles), E4M3 block-16 scales, F32 per-tensor scales for
the ModelOpt NVFP4 main experts; E8M0 block-32 ``.scale`` for MXFP4 draft
experts; FP8 block-128 attention with ``.scale`` so the loader has tensors to skip.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np

from specguard.checkpoint.writer import save_file

N_LAYERS, N_DRAFT, E, H, INTER = 2, 1, 4, 64, 32
DRAFT = N_LAYERS  # runtime index of the MTP layer
DRAFT_PREFIX = f"model.layers.{DRAFT}.mtp_block.ffn.experts.routed_experts"
NEVER_LOADED = tuple(
    f"{DRAFT_PREFIX}.{p}"
    for p in ("w13_input_scale", "w13_weight_scale_2", "w2_input_scale", "w2_weight_scale_2")
)


def _fp4(rng: np.random.Generator, rows: int, cols: int, dtype=np.uint8) -> np.ndarray:
    return rng.integers(0, 256, size=(rows, cols // 2), dtype=np.uint8).view(dtype)


def _nvfp4(rng: np.random.Generator, name: str, rows: int, cols: int, full: bool) -> dict:
    out = {
        f"{name}.weight": _fp4(rng, rows, cols),
        f"{name}.weight_scale": rng.uniform(0.5, 448, (rows, cols // 16)).astype(
            ml_dtypes.float8_e4m3fn
        ),
    }
    if full:
        out[f"{name}.weight_scale_2"] = np.array(rng.uniform(1e-4, 6e-3), dtype=np.float32)
        out[f"{name}.input_scale"] = np.array(rng.uniform(1e-3, 1e-2), dtype=np.float32)
    return out


def _mxfp4(rng: np.random.Generator, name: str, rows: int, cols: int) -> dict:
    exps = rng.integers(118, 125, size=(rows, cols // 32)).astype(np.float32)
    return {
        f"{name}.weight": _fp4(rng, rows, cols, np.int8),  # DeepSeek ships I8
        f"{name}.scale": np.exp2(exps - 127).astype(ml_dtypes.float8_e8m0fnu),
    }


def _experts(rng, stem: str, fmt: str) -> dict:
    out: dict = {}
    for e in range(E):
        for shard, (rows, cols) in (("w1", (INTER, H)), ("w3", (INTER, H)), ("w2", (H, INTER))):
            name = f"{stem}.ffn.experts.{e}.{shard}"
            if fmt == "mxfp4":
                out.update(_mxfp4(rng, name, rows, cols))
            else:
                out.update(_nvfp4(rng, name, rows, cols, full=fmt == "nvfp4"))
    return out


def _fp8_linear(rng, name: str, rows: int, cols: int) -> dict:
    w = rng.normal(0, 1, (rows, cols)).astype(ml_dtypes.float8_e4m3fn)
    s = np.exp2(rng.integers(-8, -2, size=(-(-rows // 128), -(-cols // 128))).astype(np.float32))
    return {f"{name}.weight": w, f"{name}.scale": s.astype(ml_dtypes.float8_e8m0fnu)}


def write_checkpoint(outdir: Path, draft_fmt: str, seed: int = 0) -> Path:
    """S1 (draft_fmt="mxfp4") or S5 (draft_fmt="nvfp4-no-global-scales")."""
    rng = np.random.default_rng(seed)
    tensors: dict = {}
    for layer in range(N_LAYERS):
        tensors.update(_experts(rng, f"layers.{layer}", "nvfp4"))
        tensors.update(_fp8_linear(rng, f"layers.{layer}.attn.wq_a", H, H))
    tensors.update(_experts(rng, "mtp.0", draft_fmt))
    tensors.update(_fp8_linear(rng, "mtp.0.e_proj", H, H))
    save_file(tensors, outdir / "model.safetensors")
    config = {
        "model_type": "deepseek_v4", "num_hidden_layers": N_LAYERS,
        "num_nextn_predict_layers": N_DRAFT, "n_routed_experts": E, "hidden_size": H,
        "moe_intermediate_size": INTER, "expert_dtype": "fp4",
        "quantization_config": {
            "quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
            "weight_block_size": [128, 128], "moe_quant_algo": "NVFP4",
            "ignored_layers": ["mtp.*"],
        },
    }
    (outdir / "config.json").write_text(json.dumps(config, indent=2))
    return outdir
