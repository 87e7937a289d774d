"""JSON-Schema-Test-Suite conformance must not regress.

Re-runs the whole suite (drafts 2020-12, 7 and 4: required, optional and optional/format tests;
about 45 s on 2 cores) with `tests/conformance/run_conformance.py` and compares every instance's
outcome with `tests/conformance/expected_results.json`. It fails when an instance that passed no
longer passes, on any new false positive, and on any new crash; other changes (improvements)
are printed with a request to refresh the file (`python tests/conformance/run_conformance.py
--update`), which also rewrites `tests/conformance/REPORT.md`.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from shared_data import LLAMA3_DIR as TOKENIZER_DIR
from shared_data import SUITE_DIR

CONFORMANCE_DIR = Path(__file__).resolve().parent / "conformance"
# Per-group cap: generous, as the CI machine may be busy (timed-out groups are retried once
# with three times the cap before they count).
GROUP_TIMEOUT = 30.0


def _runner() -> ModuleType:
    if str(CONFORMANCE_DIR) not in sys.path:
        sys.path.insert(0, str(CONFORMANCE_DIR))  # the worker processes import it from here too
    import run_conformance

    return run_conformance


@pytest.fixture(scope="module")
def runner() -> ModuleType:
    return _runner()


@pytest.fixture(scope="module")
def suite_run(runner: ModuleType) -> tuple[dict[str, Any], float]:
    if not SUITE_DIR.is_dir():
        pytest.skip(f"{SUITE_DIR} not found: the conformance test needs ../shared/data")
    if not (TOKENIZER_DIR / "tokenizer.json").is_file():
        pytest.skip(f"{TOKENIZER_DIR} not found: the conformance test needs the Llama 3 tokenizer")
    pytest.importorskip("tokenizers")
    start = time.monotonic()
    _, doc, _ = runner.run(
        jobs=2,
        timeout=GROUP_TIMEOUT,
        classify=False,
        suite=SUITE_DIR,
        tokenizer_dir=TOKENIZER_DIR,
    )
    return doc, time.monotonic() - start


def test_no_conformance_regressions(
    runner: ModuleType, suite_run: tuple[dict[str, Any], float]
) -> None:
    doc, elapsed = suite_run
    expected = json.loads(runner.EXPECTED_PATH.read_text())
    regressions, improvements = runner.compare(expected, doc)
    req = doc["totals"]["draft2020-12"]["required"]
    print(
        f"conformance: {req['pass']} of {req['instances']} required draft2020-12 instances pass; "
        f"whole suite in {elapsed:.0f} s"
    )
    if improvements:
        note = (
            f"{len(improvements)} conformance outcome(s) improved: refresh the expected file "
            "with `python tests/conformance/run_conformance.py --update`:\n  "
            + "\n  ".join(improvements[:50])
        )
        print(note)
        warnings.warn(note, stacklevel=1)
    assert not regressions, (
        f"{len(regressions)} conformance regression(s) against "
        "tests/conformance/expected_results.json:\n  " + "\n  ".join(regressions[:100])
    )


def test_expected_file_covers_the_suite(runner: ModuleType) -> None:
    """The expected file has every instance of the suite (the required draft2020-12 set has
    1,299), so a regression cannot hide in an instance it lacks."""
    if not SUITE_DIR.is_dir():
        pytest.skip(f"{SUITE_DIR} not found: the conformance test needs ../shared/data")
    expected = json.loads(runner.EXPECTED_PATH.read_text())
    for key in runner.suite_files(SUITE_DIR):
        groups = json.loads((SUITE_DIR / key).read_text())
        got = expected["files"].get(key)
        assert got is not None, f"{key} is missing from expected_results.json"
        assert [len(g["tests"]) for g in got["groups"]] == [len(g["tests"]) for g in groups], key
    assert expected["totals"]["draft2020-12"]["required"]["instances"] == 1299


def _doc(outcomes: list[str]) -> dict[str, Any]:
    tests = [{"description": f"t{i}", "valid": True, "outcome": o} for i, o in enumerate(outcomes)]
    return {"files": {"d/x.json": {"groups": [{"description": "g", "tests": tests}]}}}


def test_compare_rules(runner: ModuleType) -> None:
    """What counts as a regression and what as an improvement (no data needed)."""
    old = ["pass", "false_negative", "unsupported", "false_positive", "unsupported", "pass"]
    new = ["false_negative", "pass", "false_positive", "false_positive", "error", "pass"]
    regressions, improvements = runner.compare(_doc(old), _doc(new))
    assert len(regressions) == 3  # pass -> FN, new FP, new error
    assert any("pass -> false_negative" in r for r in regressions)
    assert any("unsupported -> false_positive" in r for r in regressions)
    assert any("unsupported -> error" in r for r in regressions)
    assert improvements == [
        "d/x.json group 0 ('g') test 1 ('t1'): false_negative -> pass",
    ]
    missing = {"files": {"d/x.json": {"groups": []}}}
    regressions, _ = runner.compare(missing, _doc(["pass"]))
    assert regressions and "not in the expected file" in regressions[0]
