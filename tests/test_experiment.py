import json

import pytest

from wetqa.config import ConfigError, load_experiment
from wetqa.experiment import run_experiment

from .conftest import FIXTURES

pytestmark = pytest.mark.unit


def _write(tmp_path, body: str):
    (tmp_path / "qa.jsonl").write_text(
        json.dumps(
            {
                "id": 1,
                "question": "Wanneer kan de rechtbank het gezag van een ouder beëindigen?",
                "answer": "De rechtbank kan het gezag beëindigen indien de ouder het gezag misbruikt.",
                "articles": [{"law_id": "BWBR9990001", "article": "Artikel 266"}],
            }
        )
        + "\n"
        + json.dumps(
            {
                "id": 2,
                "question": "Wanneer heeft een vreemdeling rechtmatig verblijf?",
                "answer": "Met een geldige verblijfsvergunning.",
                "articles": [{"law_id": "BWBR9990002", "article": "Artikel 2b"}],
            }
        )
        + "\n"
    )
    cfg = tmp_path / "grid.toml"
    cfg.write_text(body.replace("BWB", str(FIXTURES / "bwb")))
    return cfg


GRID = """
name = "fixture-grid"
dataset = "qa.jsonl"
corpus = "BWB"
out = "out"
runs = 2
k = [1, 3]
[retrievers.bm25s]
retriever = "bm25s"
[retrievers.strict]
retriever = "bm25s"
[retrievers.hybrid]
components = ["bm25s", "strict"]
[generators.extractive]
generator = "extractive"
"""


def test_grid_runs_and_tables(tmp_path):
    cfg = load_experiment(_write(tmp_path, GRID))
    assert cfg.out == str(tmp_path / "out") and cfg.k == [1, 3] and len(cfg.retrievers) == 3
    result = run_experiment(cfg)
    assert len(result["generation"]) == 3 * 2
    table = (tmp_path / "out" / "table.md").read_text()
    assert "| configuration | answered | COH | FLU | ROU | MET | CON | REL | R | P | Hit |" in table
    assert "| bm25s+extractive@k3 | 2/2 |" in table
    row = result["generation"]["bm25s+extractive@k3"]
    assert row["article_hit"]["runs"] == 2 and row["article_hit"]["mean"] == 100.0
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["runs"] == 2 and saved["retrievers"][2]["components"] == ["bm25s", "strict"]
    run = tmp_path / "out" / "runs" / "bm25s__extractive__k3" / "run-1.jsonl"
    before = run.read_text()
    run_experiment(load_experiment(tmp_path / "grid.toml", {"only_generators": ["extractive"]}))
    assert run.read_text() == before  # nothing regenerated


def test_overrides_and_config_errors(tmp_path):
    path = _write(tmp_path, GRID)
    cfg = load_experiment(path, {"runs": 5, "k": [2], "only_retrievers": ["bm25s"]})
    assert cfg.runs == 5 and cfg.k == [2] and [r.name for r in cfg.retrievers] == ["bm25s"]
    with pytest.raises(ConfigError, match="unknown key"):
        load_experiment(_write(tmp_path, GRID + "\nbogus = 1\n"))
    with pytest.raises(ConfigError, match="unknown components"):
        load_experiment(_write(tmp_path, GRID.replace('["bm25s", "strict"]', '["bm25s", "nope"]')))
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_experiment(_write(tmp_path, "name = "))
    with pytest.raises(ConfigError, match="config file not found"):
        load_experiment(tmp_path / "missing.toml")


def test_an_experiment_file_is_read_as_a_pipeline_file_is(tmp_path):
    # One TOML reader for both: a file that is not UTF-8 is named as not valid TOML, and a TOML date inside a
    # generator's table reads as the text a flag gives (both were an error of their own before).
    path = _write(tmp_path, GRID)
    path.write_bytes(path.read_bytes().replace(b'name = "fixture-grid"', b'name = "fixture-\xffgrid"'))
    with pytest.raises(ConfigError, match=r"grid\.toml: not valid TOML"):
        load_experiment(path)
    path = _write(tmp_path, GRID.replace('generator = "extractive"', 'generator = "extractive"\ndate = 2012-10-04'))
    cfg = load_experiment(path)
    assert cfg.generators[0].table == {"date": "2012-10-04"}


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('runs = "one"', "runs must be a whole number"),
        ('k = ["3"]', "k must be a whole number or a list of them"),
        ("dataset = 5", "dataset must be a text"),
        ("runs = true", "runs must be a whole number"),
        ('baseline = ["a"]', "baseline must be a text"),
        ("metrics = []", "metrics must be a list of metric names"),
        ("retrievers = 5", "retrievers must be tables"),
        ('generators = "x"', "generators must be tables"),
    ],
)
def test_values_of_the_wrong_type_are_named(tmp_path, line, says):
    """Bug: `runs = "one"`, `k = ["3"]` or `dataset = 5` ended in an internal error (exit 70) inside the grid."""
    key = line.split(" =")[0]
    body = "\n".join(x for x in GRID.splitlines() if not x.startswith(f"{key} ="))
    if key in ("retrievers", "generators"):  # the grid's own tables of that name left out
        body = GRID.split("[retrievers.")[0] + (
            '[generators.extractive]\ngenerator = "extractive"\n'
            if key == "retrievers"
            else '[retrievers.bm25s]\nretriever = "bm25s"\n'
        )
    with pytest.raises(ConfigError, match=says):
        load_experiment(_write(tmp_path, line + "\n" + body))


def test_one_metric_may_be_given_as_text(tmp_path):
    """Bug: `metrics = "rouge"` was read letter by letter ("unknown metric 'r'")."""
    assert load_experiment(_write(tmp_path, 'metrics = "rouge"\n' + GRID)).metrics == ["rouge"]


def test_an_empty_metrics_override_is_refused(tmp_path, capsys):
    """Bug: `wetqa experiment --metrics ,` ran the grid with no metric and printed a table of dashes, exit 0."""
    from wetqa.cli import main

    assert main(["experiment", "--config", str(_write(tmp_path, GRID)), "--metrics", ","]) == 2
    assert "metrics names no metric" in capsys.readouterr().err


def test_a_k_override_that_is_not_numbers_is_named(tmp_path, capsys):
    """Bug: `wetqa experiment -k abc` said only "invalid literal for int() with base 10: 'abc'"."""
    from wetqa.cli import main

    assert main(["experiment", "--config", str(_write(tmp_path, GRID)), "-k", "1,abc"]) == 2
    assert "-k 1,abc: whole numbers separated by commas" in capsys.readouterr().err


def test_a_changed_chunking_is_refused_then_rebuilt_with_force(tmp_path):
    cfg_path = _write(tmp_path, GRID.replace("runs = 2", "runs = 1").replace("k = [1, 3]", "k = [1]"))
    run_experiment(load_experiment(cfg_path))
    changed = load_experiment(cfg_path, {"chunking": "structured"})
    with pytest.raises(ConfigError, match="built with other chunking/build options .* --force rebuilds it"):
        run_experiment(changed)
    run_experiment(changed, force=True)
    manifest = json.loads((tmp_path / "out" / "corpus" / "manifest.json").read_text())
    assert manifest["options"]["chunking"]["strategy"] == "structured"


def test_one_backend_per_generator_released_before_the_next(tmp_path, monkeypatch):
    from wetqa import experiment
    from wetqa.generation import BackendBase
    from wetqa.generation import make_backend as real_make_backend

    made, closed = [], []

    class Tracked(BackendBase):
        def __init__(self, cfg):
            self.inner = real_make_backend(cfg)
            self.name = self.inner.name
            made.append(self)

        def generate(self, requests):
            assert not closed or closed[-1] is not self, "used after close"
            return self.inner.generate(requests)

        def close(self):
            closed.append(self)

    monkeypatch.setattr(experiment, "make_backend", Tracked)
    body = GRID + '[generators.second]\ngenerator = "extractive"\n'
    run_experiment(load_experiment(_write(tmp_path, body)))
    # 2 generators x 3 retrievers x 2 k x 2 runs: two backends, each closed once, in order.
    assert len(made) == 2 and closed == made


def test_metric_settings_are_checked_when_read_and_a_model_is_loaded_once_per_grid(tmp_path, monkeypatch):
    import wetqa.evaluation.nli as nli_module
    from wetqa.evaluation.metrics import MetricError

    from .tiny_models import tiny_bert_dir

    with pytest.raises(ConfigError, match="judge_concurrency must be >= 1"):
        load_experiment(_write(tmp_path, "judge_concurrency = 0\n" + GRID))
    with pytest.raises(ConfigError, match="unknown key"):
        load_experiment(_write(tmp_path, 'judge_modle = "m"\n' + GRID))
    with pytest.raises(MetricError, match="the geval metric needs a judge"):  # named before anything runs
        run_experiment(load_experiment(_write(tmp_path, GRID), {"metrics": ["rouge", "geval"]}))
    assert not (tmp_path / "out" / "runs").exists()
    loaded = []

    class Counted(nli_module.NLIModel):
        def __init__(self, *a, **k):
            loaded.append(a)
            super().__init__(*a, **k)

    monkeypatch.setattr(nli_module, "NLIModel", Counted)
    model = tiny_bert_dir(tmp_path / "nli", num_labels=3)
    grid = f'metrics = ["citations", "nli"]\nnli_model = "{model}"\n' + GRID.replace("runs = 2", "runs = 1")
    result = run_experiment(load_experiment(_write(tmp_path, grid)))
    assert len(result["generation"]) == 6 and len(loaded) == 1  # one NLI model serves the six cells
    assert all(0 <= row["nli_citation_recall"]["mean"] <= 100 for row in result["generation"].values())


def test_retrieval_rows_leave_out_questions_without_gold_articles(tmp_path):
    """Review: the grid's retrieval rows counted a question without gold articles as a miss in every mean."""
    cfg_path = _write(tmp_path, GRID.replace("runs = 2", "runs = 1").replace("k = [1, 3]", "k = [3]"))
    with open(tmp_path / "qa.jsonl", "a") as fh:
        fh.write(
            json.dumps({"id": 3, "question": "Wat regelt deze wet?", "answer": "Het gezag.", "laws": ["BWBR9990001"]})
            + "\n"
        )
    cfg = load_experiment(cfg_path, {"only_retrievers": ["bm25s"]})
    row = run_experiment(cfg)["retrieval"]["bm25s"]
    assert row["n_questions"] == 2 and row["n_without_gold"] == 1
    assert row["article"]["Hit@3"] == 1.0  # both graded questions found; the third is not a miss
