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


# -- compressed-tensors (layers/quantization/compressed_tensors/) ---------------------------

# compressed_tensors.py ``_add_fused_moe_to_target_scheme_map``: a ``Linear`` target also
# stands for the MoE layer classes, appended after the config's own targets
CT_MOE_CLASSES = ("FusedMoE", "DeepEPMoE")
# compressed_tensors.py ``get_moe_scheme``: a routed-experts layer is looked up by the names of
# expert 0's projections below its prefix, in this order
CT_MOE_SHARDS = (".0.gate_proj", ".0.up_proj", ".0.down_proj")


def ct_equal_or_regex(value: str, target: str, check_contains: bool = False) -> bool:
    """utils.py ``_is_equal_or_regex_match``: ``re:`` + ``re.match`` (anchored at the start
    only), else equal, else (class names) the target contained in the value, any case."""
    if target.startswith("re:"):
        return re.match(target[3:], value) is not None
    if check_contains:
        return target.lower() in value.lower()
    return target == value


def ct_check_equal_or_regex(name: str, targets: Iterable[str]) -> bool:
    """utils.py ``check_equal_or_regex_match`` (the ``ignore`` list): a ``re:`` entry by
    ``re.match``; a plain one equal to the name or to a dotted suffix of it
    (``self_attn.o_proj`` matches ``model.layers.0.self_attn.o_proj``), never a prefix of it."""
    return any(ct_equal_or_regex(name, t) if t.startswith("re:") else (t == name or name.endswith("." + t))
               for t in targets)


def ct_should_ignore(name: str, ignore: Sequence[str], fused: Mapping[str, Sequence[str]] = {}) -> bool:
    """utils.py ``should_ignore_layer``: a fused layer (by the config's ``packed_modules_mapping``)
    is ignored when its shards are, all alike (else SGLang raises ValueError)."""
    proj = name.split(".")[-1]
    if proj in fused and name not in ignore:
        hits = {ct_check_equal_or_regex(name.replace(proj, shard), ignore) for shard in fused[proj]}
        if len(hits) > 1:
            raise ShardsDisagree(f"Found different quantization schemes for {list(fused[proj])} in {name}")
        return hits.pop()
    return ct_check_equal_or_regex(name, ignore)


def ct_targets(targets: Sequence[str]) -> list[str]:
    """The target keys in the order SGLang holds them once a MoE layer was asked about."""
    out = list(targets)
    if "Linear" in out and "FusedMoE" not in out:
        out += [c for c in CT_MOE_CLASSES if c not in out]
    return out


def ct_find_target(name: str, class_name: str, targets: Sequence[str],
                   fused: Mapping[str, Sequence[str]] = {}) -> str | None:
    """utils.py ``find_matched_target``: the first target equal to (or ``re:``-matching) the
    layer name, else the first contained in the layer's class name, else a fused layer whose
    every shard matches (None: SGLang raises "Unable to find matching target")."""
    hit = (next((t for t in targets if ct_equal_or_regex(name, t)), None)
           or next((t for t in targets if ct_equal_or_regex(class_name, t, check_contains=True)), None))
    if hit is not None:
        return hit
    key = next((k for k in fused if name.endswith(k)), None)
    if key is None:
        return None
    shards = [next((t for t in targets if ct_equal_or_regex(name.replace(key, sh), t)), None) for sh in fused[key]]
    return shards[0] if all(shards) else None
