"""`specguard fix`: a repaired checkpoint next to the original, never touching it.

``make_plan`` decides what to change (repair/plan.py, strategies/), ``write_repair``
writes it as a directory of links plus the changed files (repair/write.py) and
proves it with the same route and lint a user would run (repair/verify.py).
"""

from specguard.repair.plan import ALL, Overlay, Plan, Problem, Unrepairable, make_plan, platforms_for

__all__ = ["ALL", "Overlay", "Plan", "Problem", "Unrepairable", "make_plan", "platforms_for"]
