"""The checkpoints the rule pages' examples run on, and how an example's output is taken.

Shared by tests/lint/test_docs.py (every page's `specguard lint` output is what
lint prints today) and scripts/refresh_rule_docs.py (rewrites that output): the
factory scenarios with their default seed, the producer checkpoints under
tests/data/producers, and copies of them corrupted in one precise way (VARIANTS),
rebuilt here so a changed rule message fails until the page is updated.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import numpy as np

from specguard import codecs
from specguard.checkpoint.dtypes import NUMPY
from specguard.checkpoint.header import read_header
from specguard.checkpoint.writer import save_file, save_index
from specguard.cli import main
from specguard.formats import scheme as s

REPO = Path(__file__).resolve().parents[1]
PRODUCERS = REPO / "tests" / "data" / "producers"
COMMAND = re.compile(r"^\$ specguard lint (\S+) --select (\S+)$")


def _load(path: Path) -> dict[str, np.ndarray]:
    h = read_header(path)
    raw = path.read_bytes()
    return {n: np.frombuffer(raw[t.offsets[0]:t.offsets[1]], NUMPY[t.dtype]).reshape(t.shape)
            for n, t in h.tensors.items()}


def _shards(d: Path) -> list[Path]:
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    return [d / f for f in sorted(set(idx["weight_map"].values()))]


def _edit_tensors(d: Path, fn: Callable[[dict[str, np.ndarray]], None]) -> None:
    """Apply ``fn`` to every shard's tensors in place and rewrite the index to match."""
    weight_map, total = {}, 0
    for shard in _shards(d):
        ts = _load(shard)
        fn(ts)
        save_file(ts, shard, read_header(shard).metadata)
        weight_map |= {n: shard.name for n in ts}
        total += sum(a.nbytes for a in ts.values())
    save_index(weight_map, d, total)


def _edit_config(d: Path, fn: Callable[[dict], None]) -> None:
    cfg = json.loads((d / "config.json").read_text())
    fn(cfg)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))


def _ignore_mtp(cfg: dict) -> None:
    q = cfg["quantization_config"]
    del q["ignored_layers"]
    q["ignore"] = ["mtp.*"]


def _garbage_scale(ts: dict) -> None:
    name = "layers.1.ffn.experts.2.w2.weight_scale_2"
    if name in ts:
        ts[name] = np.full(ts[name].shape, 1e31, np.float32)


def _relabel_e8m0(ts: dict) -> None:
    for n in [n for n in ts if n.startswith("layers.0.ffn.experts.") and n.endswith(".weight_scale")]:
        ts[n] = ts[n].view(ml_dtypes.float8_e8m0fnu)  # same bytes, F8_E8M0 label


def _bf16_wkv(ts: dict) -> None:
    w = "layers.0.attn.wkv.weight"
    if w in ts:
        x = codecs.dequantize(s.FP8_BLOCK, {"weight": ts[w], "scale": ts.pop("layers.0.attn.wkv.scale")},
                              convention=s.DEEPSEEK, scale_name="scale")
        ts[w] = x.astype(ml_dtypes.bfloat16)


def _unshared_w13(ts: dict) -> None:
    """Re-quantize expert 0 of layer 0's w1 and w3 each against its own amax (an NVFP4
    export that skipped the fused-layer amax unification); input scales kept."""
    for proj in ("w1", "w3"):
        m = f"layers.0.ffn.experts.0.{proj}"
        if f"{m}.weight" not in ts:
            continue
        parts = {k: ts[f"{m}.{k}"] for k in ("weight", "weight_scale", "weight_scale_2")}
        w = codecs.dequantize(s.NVFP4, parts, convention=s.MODELOPT)
        for k, a in codecs.quantize(s.NVFP4, w, convention=s.MODELOPT).items():
            ts[f"{m}.{k}"] = a


def _drop_e_proj(ts: dict) -> None:
    for n in [n for n in ts if n.startswith("mtp.0.e_proj.")]:
        del ts[n]


def _stray_mtp_shard(d: Path) -> None:
    """Move the MTP tensors into a shard the index never names."""
    moved, weight_map, total = {}, {}, 0
    for shard in _shards(d):
        ts = _load(shard)
        moved |= {n: a for n, a in ts.items() if n.startswith("mtp.")}
        keep = {n: a for n, a in ts.items() if not n.startswith("mtp.")}
        if keep:
            save_file(keep, shard, read_header(shard).metadata)
            weight_map |= {n: shard.name for n in keep}
            total += sum(a.nbytes for a in keep.values())
        else:
            shard.unlink()
    save_file(moved, d / "model-mtp.safetensors")
    save_index(weight_map, d, total)


def _pack_int4(u: np.ndarray) -> np.ndarray:
    """[R, C] nibbles -> int32 [R, C/8], first element in the low bits (GPTQ)."""
    u = u.astype(np.uint32).reshape(u.shape[0], -1, 8)
    return sum(u[..., i] << np.uint32(4 * i) for i in range(8)).astype(np.uint32).view(np.int32)


def _gptq_group48(d: Path) -> None:
    """Re-quantize every GPTQ linear with group 48 (partial last group), scales ceil(in / 48)."""
    g = 48
    _edit_config(d, lambda c: c["quantization_config"].update(group_size=g))
    qc = d / "quantization_config.json"
    qc.write_text(json.dumps(json.loads(qc.read_text()) | {"group_size": g}, indent=2))
    path = d / "model.safetensors"
    ts = _load(path)
    for m in [n.removesuffix(".qweight") for n in ts if n.endswith(".qweight")]:
        parts = {k: ts[f"{m}.{k}"] for k in ("qweight", "scales", "qzeros", "g_idx")}
        x = codecs.dequantize(s.INT4_GROUP, parts, convention=s.GPTQ, group_size=128)
        out, inp = x.shape
        groups = -(-inp // g)
        padded = np.zeros((out, groups * g), np.float32)
        padded[:, :inp] = x
        scale = np.maximum(np.abs(padded.reshape(out, groups, g)).max(-1) / 7.5, 1e-4).astype(np.float16)
        q = np.clip(np.rint(x / np.repeat(scale.astype(np.float32), g, axis=1)[:, :inp]), -8, 7) + 8
        ts[f"{m}.qweight"] = np.ascontiguousarray(_pack_int4(q).T)
        ts[f"{m}.scales"] = np.ascontiguousarray(scale.T)
        ts[f"{m}.qzeros"] = _pack_int4(np.full((groups, out), 7))  # v1: zero point 8 stored minus one
        ts[f"{m}.g_idx"] = (np.arange(inp) // g).astype(np.int32)
    save_file(ts, path, read_header(path).metadata)


def _index_extra_file(d: Path) -> None:
    """Name model_extra_tensors.safetensors's tensors in the index (add-mtp-weights.py does this)."""
    extra = d / "model_extra_tensors.safetensors"
    index = json.loads((d / "model.safetensors.index.json").read_text())
    tensors = read_header(extra).tensors
    index["weight_map"] |= {n: extra.name for n in tensors}
    index["metadata"]["total_size"] += sum(t.offsets[1] - t.offsets[0] for t in tensors.values())
    (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _expert_first(ts: dict) -> None:
    """``experts.{proj}.{e}.x`` -> ``experts.{e}.{proj}.x`` (the names vLLM's loader maps)."""
    for n in [n for n in ts if re.search(r"\.experts\.[a-z_]+_proj\.\d+\.", n)]:
        head, rest = n.split(".experts.")
        proj, e, tail = rest.split(".", 2)
        ts[f"{head}.experts.{e}.{proj}.{tail}"] = ts.pop(n)


# name -> (base checkpoint, edit)
VARIANTS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "s2-fixed": ("s2", lambda d: _edit_config(
        d, lambda c: c["quantization_config"].update(ignore=["lm_head", r"re:model\.layers\.2\."]))),
    "s1-ignore": ("s1", lambda d: _edit_config(d, _ignore_mtp)),
    "s1-bf16experts": ("s1", lambda d: _edit_config(
        d, lambda c: c["quantization_config"].update(ignored_layers=["model.layers.2.ffn.experts"]))),
    "s7-fixed": ("s7", lambda d: _edit_config(d, lambda c: c.update(num_nextn_predict_layers=0))),
    "s1-two-mtp": ("s1", lambda d: _edit_config(d, lambda c: c.update(num_nextn_predict_layers=2))),
    "s1-garbage-scale": ("s1", lambda d: _edit_tensors(d, _garbage_scale)),
    "s1-relabelled": ("s1", lambda d: _edit_tensors(d, _relabel_e8m0)),
    "s3-mixed-wqa-wkv": ("s3", lambda d: _edit_tensors(d, _bf16_wkv)),
    "s1-unshared-w13": ("s1", lambda d: _edit_tensors(d, _unshared_w13)),
    "s1-stray-shard": ("s1", _stray_mtp_shard),
    "s1-no-e_proj": ("s1", lambda d: _edit_tensors(d, _drop_e_proj)),
    "mo_nvfp4-stale-config": ("mo_nvfp4", lambda d: _edit_config(
        d, lambda c: c["quantization_config"].update(ignore=["model.embed_tokens", "model.layers.1.mlp.gate"]))),
    "gptq-g48": ("ar_w4g128_gptq", _gptq_group48),
    "q2-fixed": ("q2", _index_extra_file),
    "q3-fixed": ("q3", lambda d: _edit_tensors(d, _expert_first)),
    # Meta's FBGEMM FP8 releases' quantization_config (a stack specguard does not model: SG205)
    "ct_fp8_dynamic-fbgemm": ("ct_fp8_dynamic", lambda d: _edit_config(d, lambda c: c.update(quantization_config={
        "quant_method": "fbgemm_fp8", "modules_to_not_convert": ["model.layers.1.mlp.gate", "lm_head"],
        "activation_scale_ub": 1200.0}))),
}


def example_builder(scenario_path: Callable[[str], Path | None], root: Path) -> Callable[[str], Path]:
    """``get(name)``: the directory a page's command runs on, named as the page names it.

    A factory scenario (``scenario_path(name)``), else a producer checkpoint under
    tests/data/producers; a VARIANTS name is a copy of its base under ``root``,
    edited on first use.
    """
    def base(name: str) -> Path:
        return scenario_path(name) or PRODUCERS / name

    def get(name: str) -> Path:
        if name not in VARIANTS:
            return base(name)
        d = root / name
        if not d.exists():
            src, edit = VARIANTS[name]
            shutil.copytree(base(src), d)
            edit(d)
        return d

    return get


def lint_transcript(path: Path, name: str, select: str) -> str:
    """What ``specguard lint PATH --select SELECT`` prints (piped), with PATH shown as ``name``."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["lint", str(path), "--select", select])
    return out.getvalue().replace(str(path), name)
