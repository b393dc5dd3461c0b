from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# No model hub here: models are built inside the tests or shipped in packages.
# Set before anything imports huggingface_hub, which reads it once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Converted models and passage-vector caches of the tests stay out of the user's ~/.cache.
os.environ.setdefault("WETQA_CACHE", tempfile.mkdtemp(prefix="wetqa-test-cache-"))

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Real data stands beside the project (../shared/data), never inside it.
SHARED = Path(os.environ.get("WETQA_SHARED_DATA", ROOT.parent / "shared" / "data"))
BWB_DIR = SHARED / "bwb"
DEV = SHARED / "legalqa" / "dev.jsonl"
REFERENCES = SHARED / "references"


def require_shared() -> None:
    if not BWB_DIR.is_dir():
        pytest.skip(f"real data not found at {SHARED} (set WETQA_SHARED_DATA)")


@pytest.fixture(scope="session")
def fixture_corpus(tmp_path_factory) -> Path:
    from wetqa.corpus import BuildOptions, build_corpus

    out = tmp_path_factory.mktemp("fixture-corpus") / "corpus"
    build_corpus([FIXTURES / "bwb"], out, BuildOptions(workers=1), progress=False)
    return out


@pytest.fixture(scope="session")
def real_corpus(tmp_path_factory) -> Path:
    """The 272 shared laws built once per test session with words150 chunks."""
    require_shared()
    from wetqa.corpus import BuildOptions, build_corpus

    out = tmp_path_factory.mktemp("real-corpus") / "words150"
    build_corpus([BWB_DIR], out, BuildOptions(), progress=False)
    return out
