"""Zero false alarms on checkpoints written by real quantizers (llm-compressor, ModelOpt, auto-round).

Every fixture in tests/data/producers/ is a correct checkpoint as its tool wrote it
(quantization methods specguard does not model included): lint must find nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from specguard.lint import lint
from specguard.resolve import Resolver

DATA = Path(__file__).resolve().parents[1] / "data" / "producers"
FIXTURES = sorted(p.name for p in DATA.iterdir() if (p / "config.json").exists())


def test_fixtures_present():
    assert len(FIXTURES) >= 15


@pytest.mark.parametrize("name", FIXTURES)
def test_real_checkpoint_lints_clean(name):
    r = Resolver.open(DATA / name)
    findings = lint([r]).findings
    assert not findings, [f"{f.code}: {f.message}" for f in findings]
    assert all(rt.verdict == "ok" for rt in r.routes()), [
        (rt.prefix, rt.verdict, rt.reason) for rt in r.routes() if rt.verdict != "ok"]
