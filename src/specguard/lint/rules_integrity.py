"""SG6xx: index and shard facts the reader tolerates but a publisher should fix."""

from __future__ import annotations

from collections.abc import Iterator

from specguard.lint.context import LintContext, describe
from specguard.lint.finding import INFO, WARNING, Finding
from specguard.lint.registry import rule

SG601 = rule("SG601", "index-integrity", WARNING,
      "The sharded index disagrees with the shards: wrong total_size, tensors the index omits, or shards it "
      "never names.")


@SG601
def index_integrity(ctx: LintContext) -> Iterator[Finding]:
    for r in ctx.resolvers:
        c = r.checkpoint
        if c.index is None:
            continue
        total = c.index.get("total_size")
        outside = (c.tensors[n] for n in c.outside_index)  # a handful, if any: not a pass over every tensor
        actual = c.total_bytes - sum(t.offsets[1] - t.offsets[0] for t in outside)
        if isinstance(total, int) and total != actual:
            yield SG601.finding(f"index metadata total_size is {total:,} but the tensors hold {actual:,} bytes",
                                (), "write the tensors' byte total into metadata.total_size", severity=INFO)
        if c.unindexed:
            yield SG601.finding(f"{len(c.unindexed)} tensor(s) stored in shards but absent from the "
                          f"index (transformers skips them; vLLM, which reads whole shards, loads them): "
                          f"{describe(c.unindexed)}", c.unindexed,
                          "add them to weight_map, or drop them from the shards")
        if c.unreferenced:
            yield SG601.finding(f"shard file(s) the index never names: {', '.join(c.unreferenced)}",
                          c.unreferenced, "name every shard in weight_map, or delete the stray files")
