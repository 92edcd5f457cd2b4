"""Verdict statuses and the default alert levels of `specguard watch`, with where each number
comes from (no imports: the CLI parser reads them)."""

OK, ALERT, IDLE = "ok", "alert", "idle"

# Default alert levels, from the project's own figures (docs/watch.md lists them with their sources):
# healthy drafters accept >= 34 % of draft tokens (lowest: seed 000's DSpark drafter, k = 5,
# after the routing fix, 34-39 %; the demo's resolver S1 52.6 %, S4 75.7 %; seed 002's MTP
# 78-92 %), collapsed ones <= 1.82 % (a V4-Pro NVFP4 MTP report, 240 / 13,180; seeds 000,
# 001 and the demo's global policy: 0 %). 10 % sits 3.4x below the lowest healthy figure and
# 5.5x above the highest collapsed one.
MIN_ACCEPTANCE = 0.10
# One drafter's acceptance across workloads moves by 7 % relative in the seeds (seed 002:
# 81.6 % on AIME, 88.0 % on HumanEval, +-0.4 points across concurrency); the allocator-dependent
# degradation of seed 001 (79 % vs 57 % with no config change) is a 28 % drop.
MAX_DROP = 0.25
# Below this many draft tokens in the window the acceptance is not judged (binomial noise of
# a 35 % rate over 200 tokens: +-3.4 points, well inside the 25 % drop).
MIN_DRAFT_TOKENS = 200
# Mean acceptance length under which speculation costs more than it saves: the verify step
# costs at least one plain decoding step and the drafter's passes come on top; at 1.00 the
# demo ran at 0.44x of plain decoding, seed 000 at 0.34x.
COSTLY_MEAN_LENGTH = 1.1
