"""Config first: exclusion entries, in the stack's own syntax, that match the runtime
prefixes vLLM 0.33 tests them against, so modules stored unquantized load unquantized
(S2's BF16 MTP tower under a compressed-tensors config).

Per stack (declared/ models each stack's semantics):
- fp8 / deepseek_v4_fp8: ``ignored_layers``, exact match (``is_layer_skipped``
  with ``match_mode="exact"``) after the model's weights mapper renamed them;
- compressed-tensors: ``ignore``, an exact name or ``re:`` + ``re.match``
  (``should_ignore_layer``); ``re:`` entries are never renamed
  (``CompressedTensorsConfig.apply_vllm_mapper``);
- ModelOpt: ``ignore`` / ``exclude_modules`` (exact, substring or fnmatch,
  ``is_layer_excluded``), in the file the claim lives in;
- GPTQ: a ``-:`` rule first in ``dynamic`` (first match wins,
  ``get_dynamic_override``), the positive rules it shadows dropped
  (engines/vllm/gptq.py ``gptq_dynamic_fix``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from specguard.declared import CT_MATCH, MODELOPT_EXCLUDE, Pattern
from specguard.declared.edits import CONFIG_JSON, Applicability
from specguard.declared.model import Semantics
from specguard.engines.registry import engine as engine_of
from specguard.layouts import roles as r
from specguard.repair.plan import Overlay, Plan, Problem, Unrepairable
from specguard.repair.strategies.common import by_module, settle, stored_plain_built_quantized
from specguard.resolve import Resolver

_LAYER = re.compile(r"^(.*?layers\.\d+)\.")
QUANTIZABLE = (r.LINEAR, r.ROUTED_EXPERTS, r.HEAD_KIND, r.EMBEDDING_KIND)


def apply(plan: Plan, problems: list[Problem]) -> None:
    groups = by_module(p for p in problems if stored_plain_built_quantized(p))
    per_overlay: dict[int, list[list[Problem]]] = {}
    for ps in groups.values():
        per_overlay.setdefault(id(ps[0].overlay), []).append(ps)
    for modules in per_overlay.values():
        p = modules[0][0]
        # every engine that misroutes a module writes its own spelling (vLLM the fused name, SGLang its shards')
        exclude(p.overlay, p.resolver, [ps[0].route.prefix for ps in modules], "stored unquantized",
                engines=plan.engines, routed=[(q.route.prefix, q.resolver) for ps in modules for q in ps])
    settle(q for ps in groups.values() for q in ps)


def exclude(overlay: Overlay, resolver: Resolver, prefixes: list[str], why: str,
            applicability: Applicability = Applicability.SAFE, engines: Sequence[str] = (),
            routed: Sequence[tuple[str, Resolver]] = ()) -> None:
    """Add the entries that make vLLM build ``prefixes`` unquantized (under each of ``engines``).
    ``routed``: each (runtime prefix, Resolver) a problem was routed by, so every engine that
    misroutes a module gets its entries (``--engine all``); default: ``resolver`` for every prefix."""
    stack = resolver.declared_config.stack
    if stack in ("fp8", "deepseek_v4_fp8"):
        pairs = list(routed) or [(prefix, resolver) for prefix in prefixes]
        key, carried = _fp8_list(overlay.quant_block()[0])
        if carried:
            why += f"; the config's {len(carried)} modules_to_not_convert entries carried into ignored_layers, " \
                   "which vLLM and SGLang then read instead"
        overlay.add_entries(key, list(dict.fromkeys([*carried, *_exact(pairs)])), why, prefixes, applicability)
    elif stack == "compressed-tensors":
        entries = _grouped(resolver, prefixes, CT_MATCH)
        if any(k.startswith("sglang") for k in engines):
            entries = [_ct_experts_entry(resolver, e) for e in entries]
        overlay.add_entries("ignore", entries, why, prefixes, applicability)
    elif stack == "modelopt":
        block, file, _ = overlay.quant_block()
        entries = _grouped(resolver, prefixes, MODELOPT_EXCLUDE)
        key = "ignore" if "ignore" in block else "exclude_modules"
        if key == "exclude_modules" and file == CONFIG_JSON and not _read_exclude_modules(engines):
            # one list every engine reads: ``ignore`` (read first where both are), the old entries kept
            old = [str(e) for e in block.get("exclude_modules") or []]
            left = [p for p in prefixes if not any(Pattern(e, Semantics(MODELOPT_EXCLUDE), "").matches(p)
                                                   for e in old)]
            key, entries = "ignore", list(dict.fromkeys([*old, *_grouped(resolver, left, MODELOPT_EXCLUDE)]))
            why += "; config.json's exclude_modules as ignore, which every engine reads (vLLM 0.32 only that)"
        overlay.add_entries(key, entries, why, prefixes, applicability)
    elif stack == "gptq":
        block, _, _ = overlay.quant_block()
        quantized = [rt.prefix for rt in resolver.routes() if rt.stored is not None and rt.stored.quantized]
        fixed = resolver.vllm.gptq_dynamic_fix(dict(block.get("dynamic") or {}), prefixes, quantized)
        if fixed is None:
            raise Unrepairable(f"{overlay.checkpoint.name} [config.json]",
                               f"no dynamic rule excludes only {', '.join(prefixes)}: a '-:' rule naming mtp "
                               "builds every MTP layer unquantized (qwen3_5_mtp.py), quantized ones too")
        overlay.set_quant_key("dynamic", fixed, why, prefixes)
    else:
        raise Unrepairable(f"{overlay.checkpoint.name} [config.json]",
                           f"fix has no exclusion strategy for the {stack} stack yet ({', '.join(prefixes)})")


def _ct_experts_entry(resolver: Resolver, entry: str) -> str:
    """SGLang asks compressed-tensors' ``ignore`` about a routed-experts layer by expert 0's
    projections (``get_moe_scheme``: ``{prefix}.0.gate_proj``), which an exact entry never matches
    (``check_equal_or_regex_match``: equal or a dotted suffix): such a layer gets a ``re:`` entry
    that ``re.match``-es both the layer (vLLM asks the layer's own prefix) and its experts."""
    if entry.startswith("re:") or resolver.layout.module_kind(entry) != r.ROUTED_EXPERTS:
        return entry
    return f"re:{re.escape(entry)}(\\.|$)"


def _fp8_list(block: dict) -> tuple[str, list[str]]:
    """The list ``Fp8Config.from_config`` reads, and the entries to carry into it: vLLM reads
    ``ignored_layers`` unless it is empty, then ``modules_to_not_convert``; SGLang reads the
    first of the two keys present. Adding an ``ignored_layers`` beside a filled
    ``modules_to_not_convert`` would hide every entry of the latter (a published Qwen3.5 FP8
    release lists its BF16 modules there), so the fix extends the list the engines read."""
    ignored, legacy = block.get("ignored_layers"), block.get("modules_to_not_convert")
    if ignored or not legacy:
        return "ignored_layers", []
    if "ignored_layers" not in block:
        return "modules_to_not_convert", []
    return "ignored_layers", [str(x) for x in legacy]  # [] beside a filled list: the engines disagree


def _read_exclude_modules(engines: Sequence[str]) -> bool:
    """Does every engine read config.json's ModelOpt ``exclude_modules`` (vLLM 0.32 does not)?"""
    return all(getattr(engine_of(k).model, "reads_config_json_exclude_modules", True) for k in engines)


def _exact(routed: Sequence[tuple[str, Resolver]]) -> list[str]:
    """``ignored_layers`` entries: the runtime prefixes themselves. The target's and
    the MTP draft's lists go through DeepSeek-V4's weights mapper, which leaves
    ``model.layers.*`` as it is; a DSpark draft's fresh quant config keeps its list
    raw and builds its layers at ``model.layers.{N+i}`` (nvidia/amd/xpu dspark.py:
    ``DSparkDeepseekV4Model`` under prefix ``model``). An engine that matches a fused
    layer by its shards' names (SGLang: ``gate_up_proj`` -> ``gate_proj``, ``up_proj``)
    gets those names instead (its engine model's ``ignored_layers_entries``)."""
    out: list[str] = []
    for prefix, r_ in routed:
        entries = getattr(r_.vllm, "ignored_layers_entries", None)
        out += entries(prefix) if entries is not None else [prefix]
    return list(dict.fromkeys(out))


def _grouped(resolver: Resolver, prefixes: list[str], semantics: str) -> list[str]:
    """One wildcard per layer that stores nothing quantized (excluding all of it cannot
    misroute a module), exact names otherwise."""
    layers: dict[str, list[str]] = {}
    for prefix in prefixes:
        m = _LAYER.match(prefix)
        layers.setdefault(m.group(1) if m else prefix, []).append(prefix)
    out: list[str] = []
    for parent, members in layers.items():
        quantized = [rt for rt in resolver.routes() if rt.prefix.startswith(parent + ".")
                     and rt.kind in QUANTIZABLE and (rt.stored is None or rt.stored.quantized)]
        if len(members) > 1 and not quantized:
            out += Pattern(parent, Semantics(semantics), "").propose(members)
        else:  # an exact name matches itself in both stacks (propose would widen it to the layer)
            out += members
    return list(dict.fromkeys(out))
