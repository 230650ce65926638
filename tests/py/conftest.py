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
