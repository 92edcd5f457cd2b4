"""specguard's own verdict on the served checkpoint, shown beside the live numbers."""

from __future__ import annotations

from dataclasses import dataclass, field

from specguard.lint import lint
from specguard.resolve import MISROUTED, OK, Resolver, Route


@dataclass
class CheckpointVerdict:
    source: str
    findings: list[tuple[str, str]] = field(default_factory=list)  # (code, severity)
    causes: list[str] = field(default_factory=list)  # draft modules vLLM 0.33 builds wrong

    def lines(self) -> list[str]:
        if not self.findings:
            return [f"checkpoint {self.source}: specguard finds nothing wrong in it; a collapse comes "
                    "from outside the checkpoint (engine version, driver, allocator)"]
        codes = ", ".join(f"{c} {s}" for c, s in self.findings)
        out = [f"checkpoint {self.source}: {codes}"]
        out += [f"  {cause}" for cause in self.causes]
        if self.causes:
            out.append(f"  likely cause of a collapse; fix: `specguard fix {self.source} --out DIR`, "
                       "or serve with the specguard vLLM plugin")
        return out

    def as_dict(self) -> dict:
        return {"source": self.source, "findings": [{"code": c, "severity": s} for c, s in self.findings],
                "draft_causes": self.causes}


def _cause(rt: Route) -> str:
    kind = rt.kind.replace("_", " ")
    if rt.verdict == MISROUTED and rt.stored is not None and rt.vllm is not None:
        return (f"draft {kind} stored {rt.stored.format.upper()}, vLLM 0.33 builds "
                f"{rt.vllm.scheme.format.upper()} ({rt.vllm.method})")
    return f"draft {kind} {rt.verdict}: {rt.reason}"


def checkpoint_verdict(resolvers: list[Resolver]) -> CheckpointVerdict:
    """Lint findings, and one cause per kind of draft module vLLM 0.33 gets wrong."""
    result = lint(resolvers)
    causes = [_cause(rt) for r in resolvers for rt in r.routes() if rt.role.is_draft and rt.verdict != OK]
    return CheckpointVerdict(" + ".join(r.checkpoint.name for r in resolvers),
                             [(f.code, f.severity) for f in result.findings], list(dict.fromkeys(causes)))
