"""SG7xx: what the engine does with the checkpoint at start-up and while loading: it refuses it
(SG701), or its weight loader maps tensors to no parameter (SG702)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

from specguard.engines import Refusal
from specguard.formats import scheme as s
from specguard.layouts import roles as r
from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, Finding
from specguard.lint.registry import rule
from specguard.resolve import Route

SG701 = rule("SG701", "engine-will-not-start", ERROR,
      "vLLM 0.33 refuses this checkpoint at start-up or while loading its weights: it will not serve.")


@SG701
def will_not_start(ctx: LintContext) -> Iterator[Finding]:
    for res in ctx.resolvers:
        # the packed-parameter inference restates vLLM's loader; SGLang's refusals are its own (recorded)
        packed = _packed_over_unpacked(ctx.routes(res)) if res.vllm.name.startswith("vLLM") else []
        for why in [*res.vllm.refusals(res.table.modules), *packed]:
            where = f": {describe(why.names)}" if why.names else ""
            yield SG701.finding(f"{res.vllm.name} will not start: it stops at {why.stage} with {why.raises}, because "
                f"{why.because}{where}",
                why.names,
                _fix(why),
                data={"stage": why.stage, "raises": why.raises},
            )


def _fix(why: Refusal) -> str:
    if "are not supported" in why.raises:  # the registry lookup: no storage change helps
        return ("name an architecture this engine's registry has in config.json `architectures`, or serve "
                "with an engine that has it (`specguard route --engine all`)")
    return "store the checkpoint in a format this engine loads (`specguard rule SG701`)"


_LOAD = "weight loading"  # the stage name of engines' refusals (engines/vllm/startup.py LOAD)


def _packed_over_unpacked(routes: list[Route]) -> list[Refusal]:
    """An unquantized weight loaded into a layer vLLM 0.33 builds ModelOpt NVFP4: the parameter is
    packed (quantization/modelopt.py ``KNvfp4Static.create_weights``: uint8
    ``[out, in // 2]``), so the loader's shape check fails (parameter.py
    ``assert self.data.shape == loaded_weight.shape``; an LM head's ``copy_``,
    vocab_parallel_embedding.py ``weight_loader``). An FP8 layer has the stored shape and
    ``copy_`` converts: it loads (and computes garbage), which is SG203's, not a refusal."""
    names = tuple(n for rt in routes
                  if rt.verdict == "misrouted" and rt.stored is not None and not rt.stored.quantized
                  and rt.vllm is not None and rt.vllm.scheme.format == s.NVFP4
                  and rt.vllm.method.startswith("ModelOpt")  # the create_weights cited; Quark's loads (producer test)
                  for n in rt.checkpoint_names)
    if not names:
        return []
    return [Refusal(_LOAD, "AssertionError (a weight's shape is not its parameter's)",
                    "it builds these layers NVFP4, whose weight parameter is packed uint8 [out, in/2], "
                    "and the checkpoint stores them unquantized [out, in]", names)]


def _expert_tensors(ctx: LintContext) -> Iterator[tuple[ModuleType, str, str, bool]]:
    """(the engine's loader model, tensor name, its part after the layer's ``experts.``, is 3-D) of
    every routed-expert tensor."""
    # per loader, (separator, part after it) of the modules the loop below skips
    known_by: dict[ModuleType, set[tuple[str, str]]] = {}
    for res, rt in ctx.all_routes():
        if rt.kind != r.ROUTED_EXPERTS:
            continue
        # with a quant config, AutoWeightsLoader drops ``.g_idx`` before any layer sees it
        # (QuantizationConfig.get_checkpoint_weight_mapper)
        dropped = ("g_idx",) if res.declared_config.stack != "none" else ()
        loader = getattr(res.vllm, "loader", None)
        if loader is None:
            continue  # no model of this engine's expert loader
        # The loop below skips a module whose ``{e}.{proj}`` the loader maps: a layer's few hundred of
        # them (the same in every layer), found with C-level maps, less those already known to map,
        # skip the whole layer when the rest map (45,000 expert modules in a DeepSeek export)
        known = known_by.setdefault(loader, set())
        cut = res.expert_parts(rt.prefix) - known
        if all(not sep or loader.expert_module_mapped(rest.lstrip(".")) for sep, rest in cut):
            known |= cut
            continue
        if loader.all_mapped(rt.checkpoint_names):
            continue  # every expert named as it maps them
        for module in rt.checkpoint_names:
            mod = res.table.modules.get(module)
            if mod is None or ".experts." not in f"{module}.":
                continue
            if mod.scheme.convention == s.GPT_OSS:
                # all experts of a projection in one tensor (``experts.gate_up_proj_blocks``):
                # gpt_oss.py GptOssForCausalLM.hf_to_vllm_mapper renames them onto w13_*/w2_*
                continue
            below = module.split(".experts", 1)[1].lstrip(".")
            if loader.expert_module_mapped(below):
                continue
            for param in mod.params:
                if param in dropped:
                    continue
                # param "": a tensor named by its module (a fused [E, ...] ``experts.down_proj``)
                name = f"{module}.{param}" if param else module
                t = res.checkpoint.tensors.get(name)
                yield loader, name, ".".join(x for x in (below, param) if x), t is not None and len(t.shape) == 3


SG702 = rule("SG702", "tensors-no-engine-parameter-takes", ERROR,
      "Tensors are stored under names the engine's weight loader maps to no parameter: they stop the load "
      "or are silently dropped, leaving the parameters they were meant for unwritten.")


@SG702
def unmappable_names(ctx: LintContext) -> Iterator[Finding]:
    fails: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    loader = None
    for loader, name, rest, is_3d in _expert_tensors(ctx):
        got = loader.expert_load(rest, is_3d)
        if got is not None and got.outcome == loader.FAILS:
            fails.append((name, got.parameter or ""))
        elif got is not None and got.outcome == loader.SKIPPED:
            skipped.append((name, ""))
    if loader is None or (not fails and not skipped):
        return
    names = tuple(n for n, _ in fails + skipped)
    example = next((n for n in names if n.endswith(("qweight", ".weight"))), names[0])
    head, _, rest = example.partition(".experts.")
    fixed = f"{head}.experts.{loader.renamed(rest) or rest}"
    parts = []
    if fails:
        parts.append(f"{ctx.engine_name} fails to start on {len(fails)} (RoutedExperts.load_weights: no parameter "
                     f"{dict(fails).get(example, fails[0][1])!r}, AttributeError)")
    if skipped:
        parts.append(f"{len(skipped)} match nothing and are skipped (w13 parameters unwritten)")
    yield SG702.finding(f"{len(names)} routed-expert tensor(s) put the expert index after the projection "
        f"({example}); {'; '.join(parts)}: {describe(names)}",
        names,
        f"store them as experts.<e>.<projection>.<tensor> (e.g. {fixed})",
        data={"fails": [n for n, _ in fails], "skipped": [n for n, _ in skipped]},
    )
