"""`specguard fix`: overlay checkpoints that stock engines load as stored.

``make_plan`` decides what to change (repair/plan.py, one module per strategy in
strategies/), ``write_repair`` writes it as a directory of links plus the
changed files (repair/write.py) and keeps it only once ``verify`` routes it
right (repair/verify.py). It sits beside lint (docs/architecture.md): it uses
resolve, engines and the stages below them, the commands call it, and it never
writes into the checkpoint it reads.
"""

from specguard.repair.plan import ALL, Overlay, Plan, Problem, Unrepairable, make_plan, platforms_for

__all__ = ["ALL", "Overlay", "Plan", "Problem", "Unrepairable", "make_plan", "platforms_for"]
