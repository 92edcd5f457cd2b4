"""Type checks of a quantization config before any parser reads it.

Every stack's parser assumes the shapes its producer writes; a hostile or
hand-edited config (a string where a list belongs) must become one clear
line naming the key, not a TypeError deep in a parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specguard.errors import ConfigError

STR_LISTS = ("ignored_layers", "ignore", "exclude_modules", "modules_to_not_convert", "targets")
STRINGS = ("quant_method", "quant_algo", "moe_quant_algo", "kv_cache_quant_algo", "format", "fmt", "scale_fmt",
           "expert_dtype")
INTS = ("bits", "num_bits", "group_size")
OBJECTS = ("weights", "input_activations", "output_activations", "quantization", "kv_cache_scheme")


def check_quant_config(qc: object, key: str = "quantization_config") -> None:
    """Raise ConfigError for the first value whose type no producer writes."""
    if not isinstance(qc, Mapping):
        raise ConfigError(key, f"must be an object, not {type(qc).__name__}")
    _check_mapping(qc, key)


def _check_mapping(obj: Mapping[str, Any], key: str) -> None:
    for k, v in obj.items():
        path = f"{key}.{k}"
        if k in STR_LISTS and v is not None and not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise ConfigError(path, "must be a list of strings")
        if k in STRINGS and v is not None and not isinstance(v, str):
            raise ConfigError(path, "must be a string")
        if k in INTS and v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ConfigError(path, "must be an integer")
        if k == "weight_block_size" and v is not None and not (
            isinstance(v, list) and len(v) == 2 and all(isinstance(x, int) and x > 0 for x in v)
        ):
            raise ConfigError(path, "must be two positive integers")
        if k in ("config_groups", "quantized_layers") and v is not None and (
            not isinstance(v, Mapping) or not all(isinstance(g, Mapping) for g in v.values())
        ):
            raise ConfigError(path, "must map names to objects")
        if k in OBJECTS and v is not None and not isinstance(v, Mapping):
            raise ConfigError(path, "must be an object")
        if isinstance(v, Mapping):
            _check_mapping(v, path)
