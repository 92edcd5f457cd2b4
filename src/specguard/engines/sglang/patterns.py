"""SGLang 0.5.23's own matching of exclusion lists, restated (no SGLang import at run time).

Each function cites the SGLang function it restates (site-packages ``sglang/srt/``);
tests/engines/test_sglang_engine.py checks them against what SGLang's real functions
answered for the factory scenarios (recorded by engines/sglang/recorder.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

# layers/quantization/utils.py ``_FALLBACK_FUSED_SHARDS``
_FALLBACK_FUSED = {"qkv_proj": ["q_proj", "k_proj", "v_proj"], "gate_up_proj": ["gate_proj", "up_proj"]}
# modelopt_quant.py ``ModelOptQuantConfig.is_layer_excluded``: exclude entries ending in one of
# these also match a prefix whose last part contains it (fused_qkv_a_proj_with_mqa)
_MODELOPT_FUSED = frozenset({"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"})
# modelopt_quant.py ``HybridFp8NvFp4Config``: the NVFP4 half excludes the NextN and DSpark drafts
HYBRID_DRAFT_EXCLUDES = ("model.decoder.*", "stages.*")


class ShardsDisagree(ValueError):
    """SGLang raises ValueError: some but not all shards of a fused layer are skipped."""


def module_path_match(ignored: str, prefix: str) -> bool:
    """utils.py ``_module_path_match``: equal, a dotted ancestor, or a dotted sub-path
    (``mlp.gate`` matches ``model.layers.0.mlp.gate`` but not ``mlp.gate_up_proj``); no globs."""
    ignored, prefix = ignored.rstrip("."), prefix.rstrip(".")
    return ignored == prefix or prefix.startswith(ignored + ".") or f".{ignored}." in f".{prefix}."


def is_layer_skipped(prefix: str, ignored: Sequence[str], fused: Mapping[str, Sequence[str]] = {}) -> bool:
    """utils.py ``is_layer_skipped`` (Fp8Config's ``ignored_layers``; ModelOpt linears)."""
    proj = prefix.split(".")[-1]
    mapping = fused if proj in fused else _FALLBACK_FUSED
    if proj in mapping:
        hits = {any(module_path_match(x, prefix.replace(proj, shard)) for x in ignored) for shard in mapping[proj]}
        if len(hits) > 1:
            raise ShardsDisagree(f"Detected some but not all shards of {prefix} are quantized")
        return hits.pop()
    skipped = any(module_path_match(x, prefix) for x in ignored)
    if "gate_up_proj" in prefix:
        gate, up = prefix.replace("gate_up_proj", "gate_proj"), prefix.replace("gate_up_proj", "up_proj")
        skipped = skipped or (gate in ignored and up in ignored)
    elif "experts" in prefix:
        skipped = skipped or any(prefix in x for x in ignored if "experts" in x)
    return skipped


def skipping_entries(prefix: str, fused: Mapping[str, Sequence[str]] = {}) -> list[str]:
    """Exact ``ignored_layers`` entries that make ``is_layer_skipped`` skip ``prefix``: a fused
    layer is matched by its shards' names only (``model.decoder.mlp.shared_experts.gate_up_proj``
    by ``...gate_proj`` and ``...up_proj``; an entry naming the fused layer matches no shard)."""
    proj = prefix.split(".")[-1]
    mapping = fused if proj in fused else _FALLBACK_FUSED
    return [prefix.replace(proj, shard) for shard in mapping[proj]] if proj in mapping else [prefix]


def fp8_ignored_layers(config: Mapping) -> list[str]:
    """fp8.py ``Fp8Config.from_config``: ``ignored_layers`` (else ``modules_to_not_convert``),
    each kept with and without its ``model.`` root."""
    raw = config.get("ignored_layers") or config.get("modules_to_not_convert") or []
    out: list[str] = []
    for x in raw:
        base = str(x).removeprefix("model.")
        out += [base, f"model.{base}"]
    return out


def _compiled(pattern: str) -> re.Pattern[str]:
    """modelopt_quant.py ``_compile_exclusion_pattern``: ``.`` literal, ``*`` any run."""
    return re.compile(pattern.replace(".", r"\.").replace("*", r".*"))


def is_layer_excluded(prefix: str, exclude: Iterable[str]) -> bool:
    """modelopt_quant.py ``ModelOptQuantConfig.is_layer_excluded``: a pattern that fullmatches
    the prefix (or it without ``language_model.``) or any one of its dotted parts, or a fused
    attention shard named at the end of the pattern inside the prefix's last part."""
    prefixes = [prefix] + ([prefix.removeprefix("language_model.")] if prefix.startswith("language_model.") else [])
    for pattern in exclude:
        rx = _compiled(pattern)
        for p in prefixes:
            if rx.fullmatch(p) or any(rx.fullmatch(part) for part in p.split(".")):
                return True
        tail = pattern.rsplit(".", 1)[-1]
        if tail in _MODELOPT_FUSED and any(tail in p.rsplit(".", 1)[-1] for p in prefixes):
            return True
    return False


def modelopt_excludes(config: Mapping, nested: bool) -> list[str]:
    """modelopt_quant.py ``ModelOptFp4Config.from_config``: config.json's flat block reads
    ``ignore``, else ``modules_to_not_convert``, else ``exclude_modules``; hf_quant_config.json's
    nested one ``quantization.exclude_modules``."""
    if nested:
        section = config.get("quantization") or {}
        return [str(x) for x in section.get("exclude_modules") or []]
    raw = config.get("ignore", config.get("modules_to_not_convert", config.get("exclude_modules", [])))
    return [str(x) for x in raw or []]
