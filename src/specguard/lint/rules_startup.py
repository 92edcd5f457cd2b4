"""SG7xx: the engine will not start on this checkpoint."""

from __future__ import annotations

from collections.abc import Iterator

from specguard.lint.context import LintContext, describe
from specguard.lint.finding import ERROR, Finding
from specguard.lint.registry import rule


@rule("SG701", "engine-will-not-start", ERROR,
      "vLLM 0.33 refuses this checkpoint at start-up or while loading its weights: it will not serve.")
def will_not_start(ctx: LintContext) -> Iterator[Finding]:
    for res in ctx.resolvers:
        for why in res.vllm.refusals(res.table.modules):
            where = f": {describe(why.names)}" if why.names else ""
            yield Finding(
                "SG701", ERROR,
                f"{res.vllm.name} will not start: it stops at {why.stage} with {why.raises}, because "
                f"{why.because}{where}",
                why.names,
                "store the checkpoint in a format this engine loads (`specguard rule SG701`)",
                data={"stage": why.stage, "raises": why.raises},
            )
