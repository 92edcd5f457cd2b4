"""What vLLM 0.33's ``AutoGPTQConfig`` builds for a runtime prefix (``quant_method: gptq``).

Sources (vllm 0.33.0): model_executor/layers/quantization/auto_gptq.py
``AutoGPTQConfig.get_quant_method`` / ``get_moe_quant_method`` /
``maybe_update_config``; quantization/utils/gptq_utils.py
``get_dynamic_override`` / ``override_config`` / ``is_layer_gptq_quantized`` /
``get_linear_quant_method``.

- ``dynamic`` rules are tried in dict order and the first whose regex
  ``match``es the runtime prefix decides: ``-:`` leaves the module
  unquantized, ``+:`` or a bare key quantizes it with the rule's ``bits`` /
  ``group_size`` / ``sym`` / ``desc_act`` overriding the base values.
- A linear (and a quantized ``lm_head``) is quantized only if
  ``is_layer_gptq_quantized`` also says so: some entry of
  ``modules_in_block_to_quantize`` is a *substring* of the prefix (all shards
  of a fused layer must agree, else ``ValueError``). Without that key,
  ``maybe_update_config`` fills it from the safetensors headers of every
  ``*.safetensors`` in the directory: the module of every non-float tensor.
  Both facts live in engines/vllm/int_group.py (shared with AWQ).
- Routed experts skip that check: only a ``-:`` rule keeps them unquantized.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specguard.declared.patterns import regex_match
from specguard.engines.vllm.int_group import gptq_quantized
from specguard.layouts.roles import HEAD_KIND as HEAD
from specguard.layouts.roles import LINEAR, ROUTED_EXPERTS


@dataclass(frozen=True)
class GptqDecision:
    quantized: bool
    bits: int
    group_size: int
    why: str


def dynamic_override(dynamic: Mapping[str, object], prefix: str, key: str | None = None, default=None):
    """gptq_utils.get_dynamic_override: first rule (dict order) whose regex ``match``es decides."""
    for pattern, value in dynamic.items():
        if pattern.startswith("-:"):
            if _match(pattern[2:], prefix):
                return False
        elif _match(pattern.removeprefix("+:"), prefix):
            if key is None:
                return value
            return value.get(key, default) if isinstance(value, Mapping) else default
    return default


def first_rule(dynamic: Mapping[str, object], prefix: str) -> str | None:
    for pattern in dynamic:
        body = pattern[2:] if pattern.startswith(("-:", "+:")) else pattern
        if _match(body, prefix):
            return pattern
    return None


def _match(pattern: str, name: str) -> bool:
    # vLLM uses the ``regex`` package; for these patterns ``re`` agrees
    return regex_match(pattern, name)


def gptq_builds(qc: Mapping[str, Any], prefix: str, kind: str, quantized_layers: Sequence[str],
                packed: Mapping[str, Sequence[str]]) -> GptqDecision:
    dynamic: Mapping[str, Any] = qc.get("dynamic") or {}
    # a non-integer bits/group_size stops vLLM before it serves (startup.py ``_gptq``): the
    # answer here only has to exist, the verdict is ``refused``
    bits, group = _integer(qc.get("bits", 4), 4), _integer(qc.get("group_size", 128), -1)
    if kind == HEAD and not qc.get("lm_head"):
        return GptqDecision(False, 16, -1, "lm_head is false")
    if kind not in (LINEAR, ROUTED_EXPERTS, HEAD):
        return GptqDecision(False, 16, -1, "not a quantizable layer")
    # get_linear_quant_method computes is_layer_gptq_quantized first (it may raise ShardsDisagree)
    listed = kind == ROUTED_EXPERTS or gptq_quantized(prefix, quantized_layers, packed)
    rule = first_rule(dynamic, prefix)
    if rule is not None and rule.startswith("-:"):
        return GptqDecision(False, 16, -1, f"dynamic {rule!r} (first match) excludes it")
    if not listed:
        return GptqDecision(False, 16, -1, "no quantized tensor names it (modules_in_block_to_quantize)")
    b = dynamic_override(dynamic, prefix, "bits", bits)
    g = dynamic_override(dynamic, prefix, "group_size", group)
    why = f"dynamic {rule!r} (first match)" if rule else f"bits={bits}, group_size={group}"
    return GptqDecision(True, b if isinstance(b, int) else bits, g if isinstance(g, int) else group, why)


def _integer(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def gptq_dynamic_fix(dynamic: dict, prefixes: list[str], quantized: Sequence[str] = ()) -> dict | None:
    """``dynamic`` with the modules at ``prefixes`` excluded: a ``-:`` rule first (vLLM tries
    rules in order, the first match wins), positive rules that matched them dropped. An MTP
    drafter gets ``-:.*mtp.*``, which also makes qwen3_5_mtp.py build its layers unquantized.
    None when ``quantized`` (prefixes stored quantized) holds an MTP module too: any ``-:``
    rule naming ``mtp`` would build that one unquantized as well."""
    mtp = all(p.startswith("mtp.") for p in prefixes)
    if mtp and any(q.startswith("mtp.") for q in quantized):
        return None
    exclusions: dict[str, dict] = {"-:.*mtp.*": {}} if mtp else {f"-:^{re.escape(p)}$": {} for p in prefixes}

    def shadowed(rule: str) -> bool:  # a positive rule the exclusion now hides
        if rule.startswith("-:"):
            return False
        return ("mtp" in rule) if mtp else any(_match(rule.removeprefix("+:"), p) for p in prefixes)

    return {**exclusions, **{k: v for k, v in dynamic.items() if k not in exclusions and not shadowed(k)}}
