"""What vLLM 0.33's ``INCConfig.get_quant_method`` builds for one layer (auto-round / INC).

The per-layer decision is declared/inc.py's ``IncDeclared.layer_config`` (the
config parser's semantics); this module names the method vLLM builds from it:
``quantization/inc/inc.py`` ``get_quant_method`` and ``inc/schemes/*.py``:

- unquantized (``bits >= 16``): ``UnquantizedLinearMethod`` for linears and LM
  heads, ``UnquantizedFusedMoEMethod`` for routed experts, None otherwise;
- ``int``: ``INCLinearMethod`` (WNA16); experts ``INCWNA16MoEScheme.get_method``:
  on CPU ``UnquantizedFusedMoEMethod`` (``_build_cpu_method``), else a GPTQ/AWQ
  MoE method (``AutoGPTQMoEMethod``/``MoeWNA16Method``);
- ``fp`` block: ``INCLinearMethod`` (``INCFp8LinearScheme``); experts raise
  NotImplementedError (startup.py refuses such a checkpoint);
- ``mx_fp``: ``INCLinearMethod`` / ``INCMxfp4MoEMethod`` / ``INCMxfp8MoEMethod``;
- embeddings (``VocabParallelEmbedding``, not an LM head): None.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from specguard.declared.inc import IncDeclared
from specguard.engines import EngineChoice
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r

WHERE = "inc.py INCConfig.get_quant_method"


def inc_builds(d: IncDeclared, cls: str, prefix: str, kind: str, packed: Mapping[str, Sequence[str]],
               platform: str) -> EngineChoice:
    """The method ``INCConfig.get_quant_method`` returns for the layer at ``prefix``."""
    if kind == r.EMBEDDING_KIND:
        return EngineChoice(d.unquantized, "UnquantizedEmbeddingMethod", f"{WHERE}: no method for embeddings", cls)
    try:
        lc = d.layer_config(prefix, kind, packed if kind == r.LINEAR else None)
    except ValueError as exc:
        return EngineChoice(Scheme(s.UNKNOWN, reason=str(exc)), "ValueError", f"inc: config_parser raises: {exc}",
                            cls)
    experts = kind == r.ROUTED_EXPERTS
    if not lc.quantized:
        method = "UnquantizedFusedMoEMethod" if experts else "UnquantizedLinearMethod"
        return EngineChoice(d.unquantized, method, f"inc: {lc.source}: not quantized", cls)
    scheme = d.scheme_of(lc)
    if not experts:
        return EngineChoice(scheme, "INCLinearMethod", f"inc: {lc.source}", cls)
    if d.data_type == "int" and platform == "cpu":
        return EngineChoice(d.unquantized, "UnquantizedFusedMoEMethod",
                            f"inc: {lc.source}; INCWNA16MoEScheme._build_cpu_method builds experts unquantized "
                            "on CPU", cls)
    method = {s.MXFP4: "INCMxfp4MoEMethod", s.MXFP8: "INCMxfp8MoEMethod"}.get(
        scheme.format, "MoeWNA16Method" if d.data_type == "int" else "NotImplementedError")
    return EngineChoice(scheme, method, f"inc: {lc.source}", cls)
