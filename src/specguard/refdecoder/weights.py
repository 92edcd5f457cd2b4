"""The trained reference weights: save, load, and locate the packaged copy.

Stored as one BF16 safetensors file with DeepSeek-V4 native names and the
model config in the safetensors metadata (key ``config``), written and read
with the checkpoint stage's one safetensors writer and header reader.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

from specguard.checkpoint.header import read_header
from specguard.checkpoint.writer import save_file
from specguard.factory.models import Sizes
from specguard.refdecoder.model import DSparkDrafter, Transformer, sizes_from_json, sizes_json


def packaged_weights(name: str = "model.safetensors") -> Path:
    """Path of a trained file shipped in ``specguard/data/refdecoder/``."""
    return Path(str(resources.files("specguard") / "data" / "refdecoder" / name))


def to_numpy_bf16(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.bfloat16).cpu().contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)


def save_weights(
    model: Transformer | DSparkDrafter, path: Path, metadata: Mapping[str, str] | None = None
) -> None:
    """BF16 safetensors (sorted names, 8-byte aligned header) with the config in the metadata."""
    state = model.state_dict()
    save_file({name: to_numpy_bf16(x) for name, x in state.items()}, path,
              {"config": sizes_json(model.cfg), **(metadata or {})})


def save_dspark(drafter: DSparkDrafter, path: Path, metadata: Mapping[str, str] | None = None) -> None:
    shape = {"n_stages": len(drafter.mtp), "target_layers": list(drafter.target_layers)}
    save_weights(drafter, path, {"dspark": json.dumps(shape), **(metadata or {})})


def read_bf16_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Read a BF16-only safetensors file written by :func:`save_weights`."""
    header = read_header(path)
    raw = Path(path).read_bytes()
    tensors = {}
    for name, info in header.tensors.items():
        if info.dtype != "BF16":
            raise ValueError(f"{path}: {name} is {info.dtype}, expected BF16")
        begin, end = info.offsets
        arr = np.frombuffer(raw, dtype=np.int16, count=(end - begin) // 2, offset=begin)
        tensors[name] = torch.from_numpy(arr.copy()).view(torch.bfloat16).reshape(info.shape)
    return tensors, header.metadata


def load_weights(
    path: Path | None = None, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> Transformer:
    """Build the model from a BF16 file (default: the packaged one), computing in ``dtype``."""
    tensors, meta = read_bf16_safetensors(path or packaged_weights())
    model = Transformer(sizes_from_json(meta["config"]))
    model.load_state_dict(tensors)
    return model.to(device=device, dtype=dtype).eval()


def load_dspark(
    path: Path | None = None, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
) -> DSparkDrafter:
    """The DSpark-style drafter (default: the packaged one)."""
    tensors, meta = read_bf16_safetensors(path or packaged_weights("dspark.safetensors"))
    shape = json.loads(meta["dspark"])
    drafter = DSparkDrafter(sizes_from_json(meta["config"]), shape["n_stages"],
                            tuple(shape["target_layers"]))
    drafter.load_state_dict(tensors)
    return drafter.to(device=device, dtype=dtype).eval()


def bf16_state_dict(path: Path | None = None) -> tuple[Sizes, dict[str, torch.Tensor]]:
    """Config and BF16 tensors of the trained model, by checkpoint name (what the factory exports)."""
    tensors, meta = read_bf16_safetensors(path or packaged_weights())
    return sizes_from_json(meta["config"]), tensors
