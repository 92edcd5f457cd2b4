"""What a config claims: patterns with their stack's semantics, and per-module claims."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence, Set
from dataclasses import dataclass, field
from fnmatch import fnmatch, fnmatchcase
from functools import cached_property

from specguard.declared import patterns as p
from specguard.formats import scheme as s
from specguard.formats.scheme import Scheme
from specguard.layouts import roles as r
from specguard.vocabulary import Vocabulary


class Semantics(Vocabulary):
    """How a stack matches its ignore / exclude / target entries (stable names; lint prints them)."""

    VLLM_EXACT = "vllm-exact"  # is_layer_skipped(match_mode="exact")
    VLLM_SUBSTRING = "vllm-substring"
    VLLM_SUFFIX = "vllm-suffix"
    MODELOPT_EXCLUDE = "modelopt-exclude"  # exact + legacy substring + fnmatch, after the x* rewrite
    FNMATCHCASE = "fnmatchcase"  # DeepSeek-V4.1 quant config's ModelOpt-style ``ignore``
    CT_MATCH = "compressed-tensors"  # exact, or re: + re.match; class names
    TRANSFORMERS_MATCH = "transformers"  # re.match(key + "\\.") or re.match(key) or endswith(key)
    GPTQ_DYNAMIC = "gptq-dynamic"  # -:/+: + re.match
    GPTQ_IN_BLOCK = "gptq-in-block"  # substring
    INC_EXTRA = "inc-extra-config"  # INC: exact, ``.key`` suffix, or re.search for a key with regex characters
    INC_BLOCK = "inc-block"  # INC block_name_to_quantize: startswith


class Effect(Vocabulary):
    """What a match claims about the module."""

    UNQUANTIZED = "unquantized"  # left in the original float dtype
    NATIVE = "native"  # left in the checkpoint's native format (V4 ``ignore``: MXFP4 experts)
    TARGET = "target"  # selects the scheme of a config group
    QUANTIZED = "quantized"  # selects a per-layer algo (quantized_layers, gptq +:)


# The members under the short names the parsers use.
VLLM_EXACT, VLLM_SUBSTRING, VLLM_SUFFIX = Semantics.VLLM_EXACT, Semantics.VLLM_SUBSTRING, Semantics.VLLM_SUFFIX
# (named apart from the formats' Convention members: a matching rule is not an on-disk convention)
MODELOPT_EXCLUDE, FNMATCHCASE, CT_MATCH = Semantics.MODELOPT_EXCLUDE, Semantics.FNMATCHCASE, Semantics.CT_MATCH
TRANSFORMERS_MATCH, GPTQ_DYNAMIC = Semantics.TRANSFORMERS_MATCH, Semantics.GPTQ_DYNAMIC
GPTQ_IN_BLOCK = Semantics.GPTQ_IN_BLOCK
INC_EXTRA, INC_BLOCK = Semantics.INC_EXTRA, Semantics.INC_BLOCK
SEMANTICS = tuple(Semantics)
UNQUANTIZED, NATIVE, TARGET, QUANTIZED = Effect.UNQUANTIZED, Effect.NATIVE, Effect.TARGET, Effect.QUANTIZED

# compressed-tensors class targets, by module kind (the producer's torch classes:
# experts and lm_head are nn.Linear in the HF model that llm-compressor walks).
_CLASS_KINDS = {
    "linear": frozenset({r.LINEAR, r.ROUTED_EXPERTS, r.HEAD_KIND}),
    "embedding": frozenset({r.EMBEDDING_KIND}),
    "routedexperts": frozenset({r.ROUTED_EXPERTS}),
    "fusedmoe": frozenset({r.ROUTED_EXPERTS}),
}
_LAYER_RE = re.compile(r"^(.*?layers\.\d+)(?:\.|$)")


@dataclass(frozen=True)
class Pattern:
    """One ignore / exclude / target entry as written, with its stack's semantics.

    ``key`` says where it was written (``quantization_config.ignored_layers[0]``);
    ``effect`` what a match claims (``unquantized``, ``native``, ``target``,
    ``quantized``); ``group`` the config group a target selects.
    """

    text: str
    semantics: Semantics
    key: str
    effect: Effect = UNQUANTIZED
    group: str | None = None

    def matches(self, name: str) -> bool:
        """Does this entry match ``name`` (a checkpoint name or a runtime prefix)?"""
        t, sem = self.text, self.semantics
        if sem == VLLM_EXACT:
            return p.vllm_is_layer_skipped(name, (t,))
        if sem == VLLM_SUBSTRING:
            return t in name
        if sem == VLLM_SUFFIX:
            return name == t or name.endswith(f".{t}")
        if sem == MODELOPT_EXCLUDE:
            return self._modelopt_matches(name)
        if sem == FNMATCHCASE:
            return fnmatchcase(name, t)
        if sem == CT_MATCH:
            return p.ct_match_name(name, t)
        if sem == TRANSFORMERS_MATCH:
            return p.transformers_not_converted(name, t)
        if sem == GPTQ_DYNAMIC:
            return p.gptq_dynamic_rule(name, t)
        if sem == GPTQ_IN_BLOCK:
            return t in name
        if sem == INC_EXTRA:
            return name == t or name.endswith(f".{t}") or p.inc_extra_regex(t, name)
        if sem == INC_BLOCK:
            return name.startswith(t)
        raise ValueError(f"unknown pattern semantics {sem!r}")

    @cached_property
    def modelopt_entries(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The entry after ModelOpt's ``x*`` rewrite, and those of it that are globs."""
        entries = tuple(p.modelopt_rewrite((self.text,)))
        return entries, tuple(e for e in entries if any(c in e for c in "*?["))

    def _modelopt_matches(self, name: str) -> bool:
        """``modelopt_is_excluded(name, modelopt_rewrite([text]))`` without its call
        stack (lint asks it for every module): exact and the legacy substring test
        are one ``in``; ``fnmatch`` can add a match only for an entry with ``*?[``."""
        entries, globs = self.modelopt_entries
        if any(e in name for e in entries):
            return True
        if "experts" in name and any(name in e for e in entries if "experts" in e):
            return True
        return any(fnmatch(name, g) for g in globs)

    def matches_shard(self, name: str) -> bool:
        """Does this entry match ``name`` as one shard of a fused layer? vLLM tests
        shards with exact equality only (``is_layer_skipped``'s ``match_func`` in
        exact mode, after ModelOpt's ``x*`` rewrite; compressed-tensors'
        ``is_equal_or_regex_match``), never with wildcards or substrings."""
        t, sem = self.text, self.semantics
        if sem in (VLLM_EXACT, MODELOPT_EXCLUDE):
            entries = self.modelopt_entries[0] if sem == MODELOPT_EXCLUDE else (t,)
            return name in entries
        if sem == CT_MATCH:
            return p.ct_match_name(name, t)
        return False

    def matches_a_shard(self, names: Collection[str]) -> bool:
        """``any(self.matches_shard(n) for n in names)``; an exact entry is one set test (SG101 asks
        it of every shard of an export's 424 fused layers, for each of 123 entries)."""
        if self.semantics in (VLLM_EXACT, MODELOPT_EXCLUDE):
            entries = self.modelopt_entries[0] if self.semantics == MODELOPT_EXCLUDE else (self.text,)
            wanted = names if isinstance(names, Set) else set(names)
            return any(e in wanted for e in entries)
        return any(self.matches_shard(n) for n in names)

    @property
    def is_class_target(self) -> bool:
        """A compressed-tensors class name (``Linear``) rather than a module name."""
        return self.semantics == CT_MATCH and not self.text.startswith("re:") and (
            self.text[:1].isupper() and "." not in self.text
        )

    def matches_kind(self, kind: str) -> bool:
        """A class target matches every module of that kind."""
        if not self.is_class_target:
            return False
        return kind in _CLASS_KINDS.get(self.text.lower(), frozenset())

    def applies(self, name: str, kind: str | None = None) -> bool:
        return self.matches(name) or (kind is not None and self.matches_kind(kind))

    def matching(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if self.matches(n)]

    def propose(self, runtime_prefixes: Iterable[str]) -> list[str]:
        """Entries in this stack's own syntax that match the given runtime prefixes.

        For an entry that matched checkpoint names only (``mtp.*``): pass the
        runtime prefixes of the names it matched; layer groups become one
        wildcard where the syntax has one (``model.layers.43.*``), exact names
        otherwise. Every proposal is checked to match what it is meant for.
        """
        prefixes = sorted(set(runtime_prefixes))
        groups: dict[str, list[str]] = {}
        for prefix in prefixes:
            m = _LAYER_RE.match(prefix)
            groups.setdefault(m.group(1) if m else prefix, []).append(prefix)
        out: list[str] = []
        for parent, members in groups.items():
            for text in self._render(parent, members):
                if text not in out:
                    out.append(text)
        proposed = [Pattern(t, self.semantics, self.key, self.effect, self.group) for t in out]
        if not all(any(q.matches(x) for q in proposed) for x in prefixes):  # a bug in _render, not bad input
            raise RuntimeError(f"proposal {out} for {self} does not match all of {prefixes}")
        return out

    def _render(self, parent: str, members: list[str]) -> list[str]:
        sem, esc = self.semantics, re.escape(parent)
        if members == [parent]:
            exact = {CT_MATCH: parent, TRANSFORMERS_MATCH: f"{esc}$", GPTQ_DYNAMIC: f"-:{esc}$"}
            return [exact.get(sem, parent)]
        if sem in (MODELOPT_EXCLUDE, FNMATCHCASE):
            return [f"{parent}.*"]
        if sem == CT_MATCH:
            return [f"re:{esc}\\."]
        if sem == TRANSFORMERS_MATCH:
            return [f"{esc}\\."]
        if sem == GPTQ_DYNAMIC:
            return [f"-:{esc}\\."]
        if sem in (VLLM_SUBSTRING, GPTQ_IN_BLOCK):
            return [f"{parent}."]
        return list(members)  # exact / suffix modes have no wildcard

    def __str__(self) -> str:
        return f"{self.key} {self.text!r} ({self.semantics})"


@dataclass(frozen=True)
class DeclaredScheme:
    """The scheme a config claims for one module, and what in the config decided it.

    ``scheme`` is never None: unquantized modules get the config's float dtype
    (``Scheme("bf16", "plain")``), so claims compare with stored schemes by
    ``format``. ``source`` names the config key (and pattern) that decided.
    """

    scheme: Scheme
    source: str
    pattern: Pattern | None = None

    @property
    def quantized(self) -> bool:
        return self.scheme.quantized


KINDS = tuple(r.ModuleKind)


@dataclass(frozen=True, kw_only=True)
class Declared:
    """What one checkpoint's config claims, with its stack's pattern semantics.

    ``stack``: fp8, deepseek_v4_fp8, modelopt, compressed-tensors, mxfp4, gptq,
    awq, none (no quantization config) or unknown (a quant_method specguard
    does not understand: every claim is ``unknown``, never a guess).
    """

    stack: str
    quant_method: str | None
    origin: str  # "config.json quantization_config" / "hf_quant_config.json" / "none"
    patterns: tuple[Pattern, ...] = ()
    notes: tuple[str, ...] = ()
    unquantized: Scheme = field(default_factory=lambda: Scheme(s.BF16, s.PLAIN))

    @property
    def understood(self) -> bool:
        return self.stack != "unknown"

    @cached_property  # asked once per route (lint: every fix's re-route too)
    def exclusions(self) -> tuple[Pattern, ...]:
        """The ignore / exclude entries (patterns whose match keeps a module out)."""
        return tuple(x for x in self.patterns if x.effect in (UNQUANTIZED, NATIVE))

    def scheme_for(self, name: str, *, kind: str, shards: Sequence[str] = ()) -> DeclaredScheme:
        """The claim for one module. ``name`` is matched verbatim with this
        stack's semantics (pass checkpoint names, runtime prefixes or both in
        turn: the difference is what lint reports); ``kind`` is a layouts
        module kind. ``shards``: for a fused layer, its shards' names as the
        engine spells them (``...self_attn.q_a_proj`` for ``...fused_qkv_a_proj``):
        the layer is excluded when every shard is (vLLM's ``is_layer_skipped``
        with the model's ``packed_modules_mapping``)."""
        if kind not in KINDS:
            raise ValueError(f"unknown module kind {kind!r}; expected one of {KINDS}")
        if kind in (r.NORM, r.OTHER):
            return DeclaredScheme(self.unquantized, "norms and mixing parameters are never quantized")
        claim = self._scheme_for(name, kind)
        if shards and claim.pattern is None:
            hits = list(map(self._shard_hit, shards))
            if all(hits):
                return DeclaredScheme(self.unquantized, " and ".join(dict.fromkeys(str(h) for h in hits)), hits[0])
        return claim

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        return DeclaredScheme(self.unquantized, f"{self.origin}: no quantization")

    def _shard_hit(self, shard: str) -> Pattern | None:
        """The first unquantizing entry that matches ``shard`` (``Pattern.matches_shard``): an
        exact entry found by one dict lookup, a compressed-tensors one by its test in order."""
        exact, tested = self._shard_entries
        i = exact.get(shard, len(self.patterns))
        return next((x for j, x in tested if j < i and x.matches_shard(shard)),
                    self.patterns[i] if i < len(self.patterns) else None)

    @cached_property
    def _shard_entries(self) -> tuple[dict[str, int], tuple[tuple[int, Pattern], ...]]:
        """By name, the first unquantizing entry that names it exactly (``matches_shard``'s
        equality test); and, in order, the entries whose shard test is not one (``re:``)."""
        exact: dict[str, int] = {}
        tested: list[tuple[int, Pattern]] = []
        for i, x in enumerate(self.patterns):
            if x.effect != UNQUANTIZED:
                continue
            if x.semantics in (VLLM_EXACT, MODELOPT_EXCLUDE):
                for name in x.modelopt_entries[0] if x.semantics == MODELOPT_EXCLUDE else (x.text,):
                    exact.setdefault(name, i)
            elif x.semantics == CT_MATCH:
                tested.append((i, x))
        return exact, tuple(tested)

    def _first(self, name: str, kind: str | None, effects: tuple[Effect, ...]) -> Pattern | None:
        return next((x for x in self.patterns if x.effect in effects and x.applies(name, kind)), None)

    def _plain(self, why: str, pattern: Pattern | None = None) -> DeclaredScheme:
        return DeclaredScheme(self.unquantized, why if pattern is None else f"{pattern}", pattern)


@dataclass(frozen=True, kw_only=True)
class UnknownDeclared(Declared):
    """A ``quant_method`` specguard does not understand: every claim is ``unknown``, with the reason."""

    def _scheme_for(self, name: str, kind: str) -> DeclaredScheme:
        reason = f"quant_method {self.quant_method!r} is not understood by specguard"
        return DeclaredScheme(Scheme(s.UNKNOWN, reason=reason), f"{self.origin}.quant_method")
