"""transformers MXFP4 configs (gpt-oss): only the MoE experts are converted."""

from __future__ import annotations

from dataclasses import dataclass

from specguard.declared.model import TRANSFORMERS_MATCH, UNQUANTIZED, Declared, DeclaredScheme, Pattern
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r


@dataclass(frozen=True, kw_only=True)
class Mxfp4Declared(Declared):
    """transformers ``Mxfp4Config``: only the MoE experts are converted
    (integrations/mxfp4.py ``replace_with_mxfp4_linear``); ``modules_to_not_convert``
    uses ``should_convert_module`` matching."""

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        if kind != r.ROUTED_EXPERTS:
            return self._plain("transformers mxfp4 converts MoE experts only")
        hit = self._first(name, None, (UNQUANTIZED,))
        if hit is not None:
            return self._plain("", hit)
        return DeclaredScheme(Scheme(s.MXFP4, s.GPT_OSS, group_size=32, scale_dtype="U8", weight_dtype="U8"),
                              "quantization_config.quant_method=mxfp4")


def parse_mxfp4(qc: dict, *, origin: str) -> Mxfp4Declared:
    keys = qc.get("modules_to_not_convert") or ()
    patterns = tuple(Pattern(t, TRANSFORMERS_MATCH, f"quantization_config.modules_to_not_convert[{i}]")
                     for i, t in enumerate(keys) if isinstance(t, str))
    return Mxfp4Declared(stack="mxfp4", quant_method="mxfp4", origin=origin, patterns=patterns)
