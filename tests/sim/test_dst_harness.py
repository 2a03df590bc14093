"""The simulation's harness without running a world (fast: no subprocess,
no seed): what ``python -m simulations.dst fuzz`` prints per seed."""

from __future__ import annotations

import json

import pytest

import simulations.dst.__main__ as dst_cli
from simulations.dst.config import Faults, Result, Shape


def _result(seed: int, shape: Shape, faults: Faults, only_faults: frozenset[int] | None = None) -> Result:
    return Result(
        seed,
        violations=[],
        events=[],
        simulated_s=30.0,
        wall_s=1.0,
        steps=1_000,
        acked=10,
        verified=10,
        faults={},
        errors_logged=[],
        digest=f"digest-of-{seed}",
    )


def test_fuzz_prints_each_seeds_digest(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """One line per seed, ending in its digest: the check that a change
    kept behaviour is a diff of these lines (issue 27)."""
    monkeypatch.setattr(dst_cli, "run", _result)
    args = dst_cli.build_parser().parse_args(["fuzz", "--seeds", "3", "--first-seed", "5"])
    assert dst_cli.cmd_fuzz(args) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("seed ")]
    assert [(ln.split(":")[0], ln.rsplit("; ", 1)[1]) for ln in lines] == [
        ("seed 5", "digest digest-of-5"),
        ("seed 6", "digest digest-of-6"),
        ("seed 7", "digest digest-of-7"),
    ]


def test_fuzz_json_maps_each_seed_to_its_digest(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(dst_cli, "run", _result)
    args = dst_cli.build_parser().parse_args(["fuzz", "--seeds", "2", "--json"])
    assert dst_cli.cmd_fuzz(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["digests"] == {"1": "digest-of-1", "2": "digest-of-2"}
