"""SG1xx: ignore / exclude patterns against the names they can actually meet."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

from specguard.declared import CT_MATCH, FNMATCHCASE, VLLM_EXACT, VLLM_SUBSTRING, VLLM_SUFFIX, Fp8Declared, Pattern
from specguard.declared.edits import Applicability, ConfigEdit, Fix, at_key
from specguard.declared.index import NameIndex
from specguard.layouts.registry import DEEPSEEK_V4_TYPES, is_deepseek_v41, model_type_of
from specguard.layouts.roles import EMBEDDING_KIND, HEAD_KIND, LINEAR, ROUTED_EXPERTS
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, WARNING, Finding
from specguard.lint.fixes import checked, in_files, plan
from specguard.lint.registry import rule
from specguard.repair.plan import combined
from specguard.resolve import OK, Resolver

_VLLM = (VLLM_EXACT, VLLM_SUBSTRING, VLLM_SUFFIX)
MODELOPT_GLOB = FNMATCHCASE  # the entry read as a plain glob


def engine_names(r: Resolver, pat: Pattern, runtime: list[str]) -> list[str]:
    """The names the engine tests ``pat`` against: the runtime prefixes, or for the
    V4.1 ``ignore`` list the ``mtp.{k}.ffn.experts`` names it rebuilds from them."""
    if pat.semantics != FNMATCHCASE:
        return runtime
    n = r.layout.num_hidden_layers
    return [x for x in (r.vllm.v41_ignore_name(p, n) for p in runtime) if x is not None]


def _engine_spellings(r: Resolver, pat: Pattern) -> list[Pattern]:
    """The pattern as the engine matches it: vLLM renames ignored_layers through the
    DeepSeek-V4 weights mapper first (``mtp.*`` -> ``model.mtp.*``)."""
    out = [pat]
    if pat.semantics in _VLLM and model_type_of(r.config) in DEEPSEEK_V4_TYPES:
        renamed = r.vllm.exclusion_rename(pat.text, v41=is_deepseek_v41(r.config))
        if renamed != pat.text:
            out.append(Pattern(renamed, pat.semantics, pat.key, pat.effect, pat.group))
    return out


SG101 = rule("SG101", "exclusion-pattern-misses-runtime-names", WARNING,
      "An ignore/exclude pattern matches no runtime prefix the engine builds, so it excludes nothing, and a "
      "module it names does not load as stored.")


@SG101
def dead_exclusions(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        patterns = r.declared_config.exclusions
        if not patterns or _never_starts(r) or _matching_unmodelled(r):
            continue
        built: tuple[str, ...] = tuple(getattr(r.vllm, "built_prefixes", tuple)())  # built though not stored
        runtime = r.stored_runtime_prefixes
        if built:
            runtime = sorted(set(runtime).union(built))
        # One index per name set: each pattern is then a scan of a joined text, not a
        # Python loop over 45,000 names (issue 12 item 10).
        indexes: dict[object, NameIndex] = {False: NameIndex(runtime)}
        shards = {sh for rt in ctx.routes(r) for sh in rt.shards}
        checkpoint = r.checkpoint_index()
        for pat in patterns:
            v41 = pat.semantics == FNMATCHCASE
            key: object = "asked" if _regex(pat) else v41
            if key not in indexes:
                indexes[key] = NameIndex(_asked(ctx, r) if key == "asked" else engine_names(r, pat, runtime))
            if any(indexes[key].any(q) for q in _engine_spellings(r, pat)):
                continue
            if pat.matches_a_shard(shards):  # vLLM tests a fused layer's shards too
                continue
            hits = checkpoint.matching(pat)
            if _regex(pat) and not any(_is_asked(r, m) for m in hits):
                continue  # it reaches only layers no quant config quantizes (routers, norms): nothing to undo
            if v41:
                # deepseek_v41 quant_config.py consults ``ignore`` for routed experts only (by their
                # checkpoint-style names): an entry for anything else is never read and changes nothing.
                hits = [m for m in hits if r.layout.module_kind(m) == ROUTED_EXPERTS]
                if not hits:
                    continue
            meant = _written_for(r, pat, hits, checkpoint)
            if not _harmful(ctx, r, meant):
                continue  # what it names loads as stored anyway (or it names nothing stored): no wrong build
            yield _finding(ctx, r, pat, hits, checkpoint)


def _harmful(ctx: LintContext, r: Resolver, hits: list[str]) -> bool:
    """Some module the entry was written for does not route ok: the entry's deadness matters.
    (Publishers' lists name biases and draft embeddings vLLM never asks about; GLM-4.5-Air's
    holds ~141 such entries, all harmless: tests/data/published/TRIAGE.md.)"""
    named = set(hits)
    return any(rt.verdict != OK and named.intersection(rt.checkpoint_names) for rt in ctx.routes(r))


def _regex(pat: Pattern) -> bool:
    """A compressed-tensors ``re:`` entry: written to reach a set of layers, so it is live only
    where it reaches one the quant config is asked about."""
    return pat.semantics == CT_MATCH and pat.text.startswith("re:")


def _asked(ctx: LintContext, r: Resolver) -> list[str]:
    """Runtime prefixes vLLM 0.33's quant config is asked about: compressed_tensors.py
    ``get_quant_method`` consults ``ignore`` for linear, LM-head, embedding and routed-expert
    layers only, and a layer built with ``quant_config=None`` (ERNIE's ``mtp_linear_proj``, a
    plain ``nn.Linear`` in ernie_mtp.py) never reaches it; norms never do."""
    return sorted({rt.prefix for rt in ctx.routes(r) if rt.kind in _ASKED and not _plain(r, rt.prefix, rt.kind)})


_ASKED = (LINEAR, ROUTED_EXPERTS, EMBEDDING_KIND, HEAD_KIND)


def _is_asked(r: Resolver, module: str) -> bool:
    """Is checkpoint module ``module`` built by a layer the quant config is asked about?"""
    kind = r.layout.module_kind(module)
    return kind in _ASKED and not all(_plain(r, p, kind) for p in r.layout.runtime_prefixes(module))


def _plain(r: Resolver, prefix: str, kind: str) -> bool:
    """Built with ``quant_config=None`` (the engine model says so where it can)."""
    check = getattr(r.vllm, "built_without_quant_config", None)
    return bool(check is not None and check(prefix, kind))


def _matching_unmodelled(r: Resolver) -> bool:
    """The engine model restates no matching for this checkpoint's stack (SGLang's compressed-tensors:
    SG205 says so): whether an entry is dead there is not known, so SG101 does not speak."""
    check = getattr(r.vllm, "unmodelled", None)
    return check is not None and check() is not None


def _never_starts(r: Resolver) -> bool:
    """The engine refuses the architecture itself (SG701): it matches no pattern against anything."""
    check = getattr(r.vllm, "unsupported_architecture", None)
    return check is not None and check() is not None


def _written_for(r: Resolver, pat: Pattern, hits: list[str], checkpoint: NameIndex) -> list[str]:
    """The checkpoint modules the author meant: what the entry matches, else what it names read
    as a glob, as a ``re:`` regex where its stack has none (FP8 ``ignored_layers``), or as a
    ``.weight`` tensor's name; empty where it names no stored module under any reading."""
    for found in (hits, _as_glob(pat, checkpoint), _as_regex(r, pat), _as_tensor(r, pat)):
        if found:
            return found
    return []


def _as_regex(r: Resolver, pat: Pattern) -> list[str]:
    if pat.semantics == CT_MATCH or not pat.text.startswith("re:"):
        return []
    try:
        rx = re.compile(pat.text[3:])
    except re.error:
        return []
    return [m for m in r.table.modules if rx.match(m)]


def _as_tensor(r: Resolver, pat: Pattern) -> list[str]:
    """A ``.weight`` entry means its module; a bias or scale entry means a tensor no quant
    config quantizes (GLM-4.5-Air-FP8 lists q/k/v biases): it names no module to harm."""
    module, _, param = pat.text.rpartition(".")
    return [module] if param == "weight" and module in r.table.modules else []


def _as_glob(pat: Pattern, checkpoint: NameIndex) -> list[str]:
    """The checkpoint modules a vLLM-matched entry names when read as a glob (``mtp.*``)."""
    if pat.semantics not in _VLLM:
        return []
    return checkpoint.matching(Pattern(pat.text, MODELOPT_GLOB, pat.key, pat.effect, pat.group))


def _finding(ctx: LintContext, r: Resolver, pat: Pattern, hits: list[str], checkpoint: NameIndex) -> Finding:
    where = "matches checkpoint names only" if hits else "matches no module name at all"
    if not hits:
        hits = _as_glob(pat, checkpoint)
        if hits:
            where = f"matches nothing under vLLM's {pat.semantics} matching; as a glob it matches checkpoint names only"
    intended = sorted({r.layout.runtime_prefixes(m)[0] for m in hits})
    fix = _fix(ctx, r, pat, hits, intended)
    msg = f"{pat} {where}"
    if pat.semantics == FNMATCHCASE:
        msg += f" ({r.vllm.name}'s DeepSeek-V4.1 quant config matches it against routed-expert names only)"
    if hits:
        layers = sorted({_layer_of(p) for p in intended})
        msg += (f": it names {len(hits)} checkpoint module(s) ({describe(hits, limit=2)}), "
                f"which the engine builds under {', '.join(layers)}")
    return SG101.finding(msg, tuple(hits), fix, data={
        "pattern": pat.text, "key": pat.key, "semantics": pat.semantics, "runtime_prefixes": intended,
    })


def _fix(ctx: LintContext, r: Resolver, pat: Pattern, hits: list[str],
         intended: list[str]) -> Fix | None:
    """The repair planner's drop of the entry where it repairs the modules the entry was meant
    for (what `specguard fix` writes); else the first config change that re-routes clean
    (lint/fixes.py), shown but not applied by `specguard fix` (display-only: fix repairs routing)."""
    drops = plan(ctx).drops_for(r.checkpoint, pat.key) if hits else []
    fix = combined(drops)
    if fix is not None:
        text = "; ".join(in_files(r, e) for e in fix.edits)
        return replace(fix, message=f"{text}: it excludes nothing; the modules it was meant for are "
                                    "repaired by the SG2xx fixes")
    file, path, index = at_key(pat.key)
    if index is None:
        return None
    d = r.declared_config
    draft = bool(r.layout.num_draft_layers) and bool(hits) and all(r.layout.role(m).is_draft for m in hits)
    drop = ConfigEdit(file, path, "remove", index=index)
    candidates: list[tuple[list[ConfigEdit], list[str], str]] = []
    if isinstance(d, Fp8Declared) and d.deepseek_v4 and d.moe_quant_algo.upper() == "NVFP4" and draft:
        # An ignored_layers hit makes vLLM build BF16 layers, not the MXFP4 the draft experts hold:
        # the V4.1 quant config's ModelOpt-style ``ignore`` routes matching experts to MXFP4.
        add = ConfigEdit(file, (*path[:-1], "ignore"), "extend", ["mtp.*"])
        candidates.append(([drop, add], intended, f"on {r.platform}, {r.vllm.name}'s DeepSeek-V4.1 quant config then "
                           "routes the draft experts to MXFP4 (an ignored_layers entry would load them as BF16)"))
    if intended and pat.semantics != FNMATCHCASE:
        proposal = pat.propose(intended)
        candidates.append(([ConfigEdit(file, path, "splice", proposal, index)], intended,
                           "the entry then matches the runtime prefixes the engine tests"))
    elif intended:
        names = sorted({x for x in (r.vllm.v41_ignore_name(p, r.layout.num_hidden_layers) for p in intended) if x})
        candidates.append(([ConfigEdit(file, path, "splice", names, index)], intended,
                           "the checkpoint-style expert names the V4.1 quant config matches"))
    candidates.append(([drop], [], "it excludes nothing"))
    for edits, targets, why in candidates:
        if checked(ctx, r, edits, targets):
            text = f"{'; '.join(in_files(r, e) for e in edits)}: {why} (re-routed with the change: " + (
                f"{len(targets)} runtime module(s) then route ok, nothing else changes)" if targets
                else "no module changes)")
            return Fix(text, tuple(edits), Applicability.DISPLAY, targets=tuple(targets))
    if draft and ctx.has_plugin:
        return Fix("serve with the specguard vLLM plugin, which applies draft exclusions by runtime layer")
    return None


def _layer_of(prefix: str) -> str:
    """``model.layers.2.ffn.experts`` -> ``model.layers.2.*``; other prefixes as they are."""
    parts = prefix.split(".")
    for i, part in enumerate(parts[:-1]):
        if part == "layers" and parts[i + 1].isdigit():
            return ".".join(parts[: i + 2]) + ".*"
    return prefix


SG103 = rule("SG103", "quant-config-files-disagree", WARNING,
      "config.json's quantization_config and hf_quant_config.json claim different schemes; the engine reads "
      "config.json's only, so the other file's claim has no effect.")


@SG103
def quant_files_disagree(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        qf = ctx.quant_files(r)
        if qf is None:
            continue
        msg = (f"config.json's quantization_config and hf_quant_config.json claim different schemes for "
               f"{len(qf.differ)} runtime module(s) ({describe(qf.differ)}); {r.vllm.name} reads config.json's "
               "(model_loader/weight_utils.py get_quant_config; hf_quant_config.json only without it)")
        if qf.explained:
            msg += (f": {len(qf.explained)} of them are built other than stored because of it "
                    f"({describe(sorted(qf.explained))}), reported here once instead of module by module")
        # an error when the engine misbuilds modules because of it (their SG2xx findings are folded in here)
        yield SG103.finding(msg, tuple(qf.differ),
                            "make config.json's quantization_config say what hf_quant_config.json says (the engine "
                            "reads config.json), or delete the stale file",
                            severity=ERROR if qf.explained else WARNING, data={"explained": sorted(qf.explained)})
