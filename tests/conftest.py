"""Shared fixtures: helpers that write real safetensors bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest


def raw_safetensors(path: Path, header: object, data: bytes = b"", *, length: int | None = None) -> Path:
    """Write a file with an arbitrary (possibly hostile) header, byte for byte."""
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(raw) if length is None else length
    path.write_bytes(struct.pack("<Q", n) + raw + data)
    return path


@pytest.fixture
def write_raw():
    return raw_safetensors


@pytest.fixture(scope="session")
def scenarios(tmp_path_factory: pytest.TempPathFactory):
    """Every factory scenario written once per session: name -> ScenarioInfo."""
    from specguard.factory import SCENARIOS, write_scenario

    root = tmp_path_factory.mktemp("scenarios")
    return {name: write_scenario(name, root / name) for name in SCENARIOS}


def resolvers_for(info):
    """The Resolver(s) a user gets for a scenario: the target, plus a separate drafter (S4)."""
    from specguard.resolve import Resolver

    method = info.facts.get("draft_kind")
    if info.drafter_path is None:
        return [Resolver.open(info.path, draft_method=method if method == "dspark" else None)]
    target = Resolver.open(info.path, own_draft=False)
    return [target, Resolver.open(info.drafter_path, draft_method=method, target=target)]
