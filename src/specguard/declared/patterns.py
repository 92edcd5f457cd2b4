"""Each stack's own pattern semantics, one pure function per stack.

These are re-implementations, kept byte-for-byte faithful to the code that
consumes the patterns (differential tests in tests/declared/ compare them with
the installed libraries on generated names):

- ``vllm_is_layer_skipped``: vllm/model_executor/layers/quantization/utils/
  quant_utils.py ``is_layer_skipped`` (Fp8Config.ignored_layers,
  DeepseekV4FP8Config, AWQ ``modules_to_not_convert`` in substring mode).
- ``modelopt_is_excluded``: vllm/model_executor/layers/quantization/modelopt.py
  ``ModelOptQuantConfigBase.is_layer_excluded`` after ``apply_vllm_mapper``'s
  ``x*`` -> ``x``, ``x.*`` rewrite.
- ``ct_match_name``: compressed_tensors/utils/match.py ``match_name``.
- ``transformers_not_converted``: transformers/quantizers/quantizers_utils.py
  ``should_convert_module`` (negated).
- ``gptq_dynamic_rule``: vllm/model_executor/layers/quantization/utils/
  gptq_utils.py ``get_dynamic_override``.
- ``fnmatchcase`` (V4.1 ``_is_nvfp4_expert_layer``) is the stdlib's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from fnmatch import translate
from functools import lru_cache

NO_FUSION: Mapping[str, Sequence[str]] = {}


class FusedShardMismatch(ValueError):
    """Some but not all shards of a fused layer match (vLLM raises the same)."""


def vllm_is_layer_skipped(
    prefix: str,
    ignored_layers: Sequence[str],
    fused_mapping: Mapping[str, Sequence[str]] = NO_FUSION,
    match_mode: str = "exact",
) -> bool:
    """vLLM 0.33 ``is_layer_skipped``.

    exact: ``prefix in ignored_layers`` -- except that a prefix containing
    ``experts`` (and no fused projection name) is skipped when it is a
    *substring* of an ignored entry that contains ``experts``; substring:
    an entry is a substring of the prefix; suffix: equal, or the prefix ends
    with ``.entry``. A fused projection (``qkv_proj``) is skipped when the
    fused name matches, else when all its shards match.
    """
    if match_mode == "exact":
        def match(p: str) -> bool:
            return p in ignored_layers
    elif match_mode == "substring":
        def match(p: str) -> bool:
            return any(layer in p for layer in ignored_layers)
    elif match_mode == "suffix":
        def match(p: str) -> bool:
            return any(p == layer or p.endswith(f".{layer}") for layer in ignored_layers)
    else:
        raise ValueError(f"Unsupported layer skip match mode: {match_mode}")

    proj_name = prefix.split(".")[-1]
    if proj_name in fused_mapping:
        if match(prefix):
            return True
        shards = [match(prefix.replace(proj_name, shard)) for shard in fused_mapping[proj_name]]
        if any(shards) and not all(shards):
            raise FusedShardMismatch(
                f"Detected some but not all shards of {prefix} are quantized."
            )
        return bool(shards) and all(shards)
    if "experts" in prefix and match_mode == "exact":
        return any(prefix in layer for layer in ignored_layers if "experts" in layer)
    return match(prefix)


def modelopt_rewrite(exclude_modules: Iterable[str]) -> list[str]:
    """``apply_vllm_mapper``'s workaround: ``x*`` -> ``x`` and ``x.*`` (not ``x.*``)."""
    out: list[str] = []
    for exclude in exclude_modules:
        if len(exclude) >= 2 and exclude[-1] == "*" and exclude[-2] != ".":
            out += [exclude[:-1], exclude[:-1] + ".*"]
        else:
            out.append(exclude)
    return out


def modelopt_is_excluded(
    prefix: str,
    exclude_modules: Sequence[str],
    packed_modules_mapping: Mapping[str, Sequence[str]] = NO_FUSION,
) -> bool:
    """vLLM 0.33 ``ModelOptQuantConfigBase.is_layer_excluded``: exact (with fused
    shards), then the legacy substring test, then ``fnmatch`` wildcards.

    Pass the list *after* ``modelopt_rewrite`` where the model class has an
    ``hf_to_vllm_mapper`` (vLLM applies the rewrite only then).
    """
    if not exclude_modules:
        return False
    if vllm_is_layer_skipped(prefix, exclude_modules, packed_modules_mapping):
        return True
    # the legacy substring test (``exclude != prefix and (exclude in prefix or ... in the prefix less
    # ``language_model.``)``): hundreds of layers ask it of 100+ entries, so one scan for any entry
    # inside the name rules out the common case before the entries are tested one by one
    entries = tuple(exclude_modules)
    scan = _any_inside(entries)
    if scan.search(prefix) is not None and any(exclude != prefix for exclude in [e for e in entries if e in prefix]):
        return True
    if prefix.startswith("language_model."):
        bare = prefix.removeprefix("language_model.")
        if scan.search(bare) is not None and any(exclude != prefix for exclude in [e for e in entries if e in bare]):
            return True
    return _any_fnmatch(entries).match(prefix) is not None


@lru_cache(maxsize=64)
def _any_inside(entries: tuple[str, ...]) -> re.Pattern[str]:
    """Finds a name that holds any of ``entries`` as a substring (an empty entry: every name)."""
    return re.compile("|".join(map(re.escape, entries)))


@lru_cache(maxsize=64)
def _any_fnmatch(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """``any(fnmatch(name, p) for p in patterns)`` as one compiled match (POSIX: ``fnmatch``
    is ``fnmatchcase``, i.e. ``fnmatch.translate``): a lint asks it for hundreds of layers
    against 100+ entries (benchmarks/lint_export.py)."""
    return re.compile("|".join(translate(p) for p in patterns))


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def regex_match(pattern: str, name: str) -> bool:
    """``re.match`` (anchored at the start, not a full match); a bad regex matches nothing."""
    rx = _compiled(pattern)
    return rx is not None and rx.match(name) is not None


def ct_match_name(name: str, target: str) -> bool:
    """compressed-tensors ``match_name``: ``re:`` + ``re.match``, else equality."""
    if target.startswith("re:"):
        return regex_match(target.removeprefix("re:"), name)
    return target == name


def transformers_not_converted(name: str, key: str) -> bool:
    """transformers ``should_convert_module`` is False for this key."""
    return regex_match(f"{key}\\.", name) or regex_match(key, name) or name.endswith(key)


def gptq_dynamic_rule(name: str, pattern: str) -> bool:
    """A GPTQModel ``dynamic`` key matches (``-:`` negative, ``+:``/bare positive)."""
    return regex_match(pattern.removeprefix("-:").removeprefix("+:"), name)



_INC_REGEX_CHARS = frozenset(r"*+?^$()[]{}|\\")  # inc/config_parser.py REGEX_SPECIAL_CHARS


def inc_extra_regex(key: str, name: str) -> bool:
    """An INC ``extra_config`` key with a regex character, ``re.search``-ed (a bad regex matches nothing)."""
    if not any(c in _INC_REGEX_CHARS for c in key):
        return False
    rx = _compiled(key)
    return rx is not None and rx.search(name) is not None
