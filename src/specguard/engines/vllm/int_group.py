"""vLLM 0.33's GPTQ / AWQ layer selection, including what it derives from the weights.

- ``auto_gptq.py AutoGPTQConfig.maybe_update_config``: an empty
  ``modules_in_block_to_quantize`` becomes every module (tensor name minus its
  last part) holding a tensor of a non-float dtype
  (``get_safetensors_params_metadata``); ``utils/gptq_utils.py
  is_layer_gptq_quantized``: substring match, a merged layer (``qkv_proj``)
  expanded to its shards, which must agree (else ValueError); an empty list
  means quantized. engines/vllm/gptq.py decides GPTQ layers on these.
- ``auto_awq.py AutoAWQConfig.maybe_update_config``: an empty
  ``modules_to_not_convert`` becomes every module all of whose tensors are
  F16/BF16/F32; ``utils/quant_utils.py is_layer_skipped(match_mode="substring")``
  with the same shard expansion (a merged name listed as such wins).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

FLOAT_DTYPES = frozenset({"F16", "BF16", "F32"})


class ShardsDisagree(ValueError):
    """vLLM raises: some but not all shards of a merged layer are quantized."""


def modules_by_dtype(tensor_dtypes: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """(modules with a non-float tensor, modules whose tensors are all float), as vLLM derives them."""
    layers = {n.rsplit(".", 1)[0] for n in tensor_dtypes}
    quant = {n.rsplit(".", 1)[0] for n, dt in tensor_dtypes.items() if dt not in FLOAT_DTYPES}
    return sorted(quant), sorted(layers - quant)


def _shards(prefix: str, packed: Mapping[str, Sequence[str]]) -> list[str] | None:
    proj = prefix.split(".")[-1]
    if proj not in packed:
        return None
    return [prefix.replace(proj, sh) for sh in packed[proj]]


def _agree(prefix: str, hits: list[bool]) -> bool:
    if any(hits) and not all(hits):
        raise ShardsDisagree(f"Detected some but not all shards of {prefix} are quantized")
    return all(hits)


def gptq_quantized(prefix: str, quantized_layers: Sequence[str], packed: Mapping[str, Sequence[str]]) -> bool:
    """``is_layer_gptq_quantized``."""
    if not quantized_layers:
        return True
    shards = _shards(prefix, packed)
    if shards is None:
        return any(q in prefix for q in quantized_layers)
    return _agree(prefix, [any(q in sh for q in quantized_layers) for sh in shards])


def awq_skipped(prefix: str, ignored: Sequence[str], packed: Mapping[str, Sequence[str]]) -> bool:
    """``is_layer_skipped(..., match_mode="substring")``."""
    def hit(name: str) -> bool:
        return any(x in name for x in ignored)

    shards = _shards(prefix, packed)
    if shards is None or hit(prefix):
        return hit(prefix)
    return _agree(prefix, [hit(sh) for sh in shards])
