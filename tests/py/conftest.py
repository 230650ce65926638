"""Shared pytest fixtures: where the mla binary and the third-party test data live."""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def mla_bin() -> str:
    path = os.environ.get("MLA_BIN") or str(REPO / "build" / "mla")
    if not Path(path).exists():
        pytest.fail(f"mla binary not found at {path}: build first (make test does)")
    return path


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """tests/fixtures: vocabularies, tokenizer files and chat templates (see its README.md)."""
    if not (FIXTURES / "vocab").is_dir():
        pytest.fail(f"test fixtures missing: expected {FIXTURES}/vocab")
    return FIXTURES


def run_mla(mla_bin: str, *args, check: bool = True, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """`mla ARGS` (each made a str) with stdout and stderr captured as text. env: variables set on top
    of this process's; check: fail unless it exits 0."""
    full_env = None if env is None else {**os.environ, **env}
    p = subprocess.run([mla_bin, *map(str, args)], capture_output=True, check=False, text=True, env=full_env, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"mla {' '.join(map(str, args))} failed ({p.returncode}): {p.stderr}")
    return p


# A test file whose every test skipped (or that skipped itself whole) has tested nothing; pytest
# would exit 0 (or 5, "no tests collected"), which ctest reports as Passed (or Failed). Exit 77
# instead: tests/CMakeLists.txt gives the py.* tests SKIP_RETURN_CODE 77, so ctest lists the file
# as "Skipped" in its summary, and -rs prints each skip's reason in the log.
ALL_SKIPPED_EXIT_CODE = 77
_outcomes = {"passed": 0, "failed": 0, "skipped": 0}  # tests that ran, failed, skipped; collection errors count as failed


def pytest_collectreport(report):
    if report.outcome != "passed":  # a module that skipped itself whole, or failed to import
        _outcomes[report.outcome] += 1


def pytest_runtest_logreport(report):
    if hasattr(report, "wasxfail"):  # an expected failure (or strict pass) ran: not a skip
        _outcomes["passed" if report.outcome == "skipped" else report.outcome] += 1
    elif report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] += 1


def pytest_sessionfinish(session, exitstatus):
    ran_nothing = _outcomes["skipped"] and not _outcomes["passed"] and not _outcomes["failed"]
    if ran_nothing and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = ALL_SKIPPED_EXIT_CODE
