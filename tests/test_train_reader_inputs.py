"""`wetqa models train-reader` checks its arguments and its --out before minutes of training, not after them
(issue 55, items 13 and 22)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def wetqa(*argv):
    return subprocess.run([sys.executable, "-m", "wetqa", *argv], capture_output=True, text=True, timeout=300)


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"id": "1", "question": "Wanneer eindigt het gezag?",
                                "articles": [{"law_id": "BWBR9990001", "article": "Artikel 266"}]}) + "\n", "utf-8")  # fmt: skip
    return path


@pytest.mark.parametrize("minutes", ["nan", "inf", "-1"])
def test_a_time_budget_that_bounds_nothing_is_refused(data, articles_index, minutes, tmp_path):
    run = wetqa("models", "train-reader", str(data), "--index", str(articles_index), "--minutes", minutes,
                "--out", str(tmp_path / "trained"))  # fmt: skip
    assert run.returncode == 2 and "--minutes" in run.stderr and run.stderr.count("\n") == 1, run.stderr


def test_an_out_inside_an_index_or_the_model_itself_is_refused_before_training(data, articles_index, tmp_path):
    run = wetqa("models", "train-reader", str(data), "--index", str(articles_index), "--out",
                str(articles_index / "reader"))  # fmt: skip
    assert run.returncode == 2 and "inside" in run.stderr and run.stderr.count("\n") == 1, run.stderr
    model = tmp_path / "base"
    model.mkdir()
    run = wetqa("models", "train-reader", str(data), "--index", str(articles_index), "--model", str(model),
                "--out", str(model))  # fmt: skip
    assert run.returncode == 2 and "would replace the model it starts from" in run.stderr, run.stderr
