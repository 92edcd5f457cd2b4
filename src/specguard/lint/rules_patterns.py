"""SG1xx: ignore / exclude patterns against the names they can actually meet."""

from __future__ import annotations

from collections.abc import Iterator
from fnmatch import fnmatchcase

from specguard.declared import FNMATCHCASE, VLLM_EXACT, VLLM_SUBSTRING, VLLM_SUFFIX, Fp8Declared, Pattern
from specguard.engines.vllm.v0_33 import deepseek_v4_rename, v41_ignore_name
from specguard.layouts.registry import DEEPSEEK_V4_TYPES, is_deepseek_v41, model_type_of
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import WARNING, Finding
from specguard.lint.registry import rule
from specguard.resolve import Resolver

_VLLM = (VLLM_EXACT, VLLM_SUBSTRING, VLLM_SUFFIX)


def engine_names(r: Resolver, pat: Pattern, runtime: list[str]) -> list[str]:
    """The names the engine tests ``pat`` against: the runtime prefixes, or for the
    V4.1 ``ignore`` list the ``mtp.{k}.ffn.experts`` names it rebuilds from them."""
    if pat.semantics != FNMATCHCASE:
        return runtime
    n = r.layout.num_hidden_layers
    return [x for x in (v41_ignore_name(p, n) for p in runtime) if x is not None]


def _engine_spellings(r: Resolver, pat: Pattern) -> list[Pattern]:
    """The pattern as the engine matches it: vLLM renames ignored_layers through the
    DeepSeek-V4 weights mapper first (``mtp.*`` -> ``model.mtp.*``)."""
    out = [pat]
    if pat.semantics in _VLLM and model_type_of(r.config) in DEEPSEEK_V4_TYPES:
        renamed = deepseek_v4_rename(pat.text, v41=is_deepseek_v41(r.config))
        if renamed != pat.text:
            out.append(Pattern(renamed, pat.semantics, pat.key, pat.effect, pat.group))
    return out


@rule("SG101", "exclusion-pattern-misses-runtime-names", WARNING,
      "An ignore/exclude pattern matches no runtime prefix the engine builds, so it excludes nothing.")
def dead_exclusions(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        modules = list(r.table.modules)
        spellings = {m: r.layout.runtime_prefixes(m) for m in modules}
        runtime = sorted({p for ps in spellings.values() for p in ps})
        for pat in r.declared_config.exclusions:
            if any(q.matches(p) for q in _engine_spellings(r, pat) for p in engine_names(r, pat, runtime)):
                continue
            yield _finding(r, pat, modules, spellings)


def _finding(r: Resolver, pat: Pattern, modules: list[str], spellings: dict) -> Finding:
    hits = [m for m in modules if pat.matches(m)]
    where = "matches checkpoint names only" if hits else "matches no module name at all"
    if not hits and pat.semantics in _VLLM:
        hits = [m for m in modules if fnmatchcase(m, pat.text)]
        if hits:
            where = f"matches nothing under vLLM's {pat.semantics} matching; as a glob it matches checkpoint names only"
    intended = sorted({spellings[m][0] for m in hits})
    fix = _fix(r, pat, hits, intended) if intended else None
    msg = f"{pat} {where}"
    if hits:
        layers = sorted({_layer_of(p) for p in intended})
        msg += (f": it names {len(hits)} checkpoint module(s) ({describe(hits, limit=2)}), "
                f"which the engine builds under {', '.join(layers)}")
    return Finding("SG101", WARNING, msg, tuple(hits), fix, data={"pattern": pat.text, "key": pat.key,
                                                                    "semantics": pat.semantics,
                                                                    "runtime_prefixes": intended})


def _fix(r: Resolver, pat: Pattern, hits: list[str], intended: list[str]) -> str:
    d = r.declared_config
    draft = r.layout.num_draft_layers and all(r.layout.role(m).is_draft for m in hits)
    if isinstance(d, Fp8Declared) and d.deepseek_v4 and d.moe_quant_algo.upper() == "NVFP4" and draft:
        # An ignored_layers hit makes vLLM build BF16 layers, not the MXFP4 the draft experts hold.
        return (f'drop it and add `"ignore": ["mtp.*"]` to quantization_config: {r.vllm.name}\'s DeepSeek-V4.1 quant '
                "config (CUDA/ROCm) then routes the draft experts to MXFP4; an ignored_layers entry that matched "
                "would load them as BF16. Or serve with the specguard vLLM plugin.")
    proposal = pat.propose(intended)
    shown = ", ".join(repr(x) for x in proposal[:3]) + (f" (+{len(proposal) - 3} more)" if len(proposal) > 3 else "")
    fix = f"match the runtime prefixes instead: {shown}"
    if draft:
        fix += "; or serve with the specguard vLLM plugin, which applies draft exclusions by runtime layer"
    return fix


def _layer_of(prefix: str) -> str:
    """``model.layers.2.ffn.experts`` -> ``model.layers.2.*``; other prefixes as they are."""
    parts = prefix.split(".")
    for i, part in enumerate(parts[:-1]):
        if part == "layers" and parts[i + 1].isdigit():
            return ".".join(parts[: i + 2]) + ".*"
    return prefix
