"""Settings are declared once: every generator setting and retriever option has a flag and a TOML key."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from wetqa.cli import build_parser
from wetqa.settings import SettingError, add_arguments, build, coerce, given, setting, settings_of

pytestmark = pytest.mark.unit


def _example(info):
    """A valid value of a setting, written as a flag value and as a TOML value."""
    if info.choices:
        return info.choices[-1], info.choices[-1]
    if info.kind is tuple:
        return "1,2,3", [1.0, 2.0, 3.0]
    if info.kind is bool:
        return None, True
    if info.kind is int:
        value = max(2, int(info.minimum or 0) + 1)
        return str(value), value
    if info.kind is float:
        value = info.maximum if info.maximum is not None else (info.minimum or 0) + 0.5
        return str(value), value
    return "x", "x"


def _flag_values(argv):
    parser = build_parser(argv)
    return vars(parser.parse_args(argv))


def test_every_generator_setting_has_a_flag_and_a_toml_key(tmp_path):
    from wetqa.config import load_experiment
    from wetqa.generation.registry import backends

    for name, info in backends().items():
        assert info.infos or name == "extractive"
        for s in info.infos:
            text, value = _example(s)
            argv = ["ask", "q", s.flag, text] if text is not None else ["ask", "q", s.flag]
            assert _flag_values(argv)[s.name] is not None, f"{name}: {s.flag}"
            table = {"model": "m"} if info.uses_model and s.name != "model" else {}
            body = f'[generators.g]\ngenerator = "{name}"\n'
            for key, v in {**table, s.key: value}.items():
                body += f"{key} = {v!r}\n".replace("True", "true").replace("'", '"')
            cfg = tmp_path / f"{name}-{s.name}.toml"
            cfg.write_text(f'dataset = "d.jsonl"\ncorpus = "c"\n[retrievers.r]\nretriever = "bm25s"\n{body}')
            loaded = load_experiment(cfg)
            assert loaded.generators[0].table[s.key] == value


def test_every_retriever_option_has_a_flag_and_a_toml_key(tmp_path):
    from wetqa.config import load_experiment
    from wetqa.retrieval.registry import retrievers

    for name, info in retrievers().items():
        for s in info.infos:
            text, value = _example(s)
            assert _flag_values(["index", "--retriever", name, s.flag, text])[s.name] is not None
            cfg = tmp_path / f"{name}-{s.name}.toml"
            v = f'"{value}"' if isinstance(value, str) else value
            cfg.write_text(
                f'dataset = "d.jsonl"\ncorpus = "c"\n[retrievers.r]\nretriever = "{name}"\n{s.key} = {v}\n'
                '[generators.g]\ngenerator = "extractive"\n'
            )
            assert load_experiment(cfg).retrievers[0].options == {s.key: value}


def test_every_metric_setting_has_an_eval_flag_and_an_experiment_key(tmp_path):
    from wetqa.config import load_experiment
    from wetqa.evaluation.metrics import metrics
    from wetqa.evaluation.scoring import settings_from

    owned = [(name, s) for name, m in metrics().items() if m.settings for s in settings_of(m.settings)]
    assert {s.name for _, s in owned} >= {"judge", "judge_base_url", "judge_concurrency", "nli_model"}
    for name, s in owned:
        text, value = _example(s)
        argv = ["eval", "generation", "--runs", "r", "--dataset", "d", s.flag, text]
        assert _flag_values(argv)[s.name] is not None, f"{name}: {s.flag}"
        cfg = tmp_path / f"{name}-{s.name}.toml"
        v = f'"{value}"' if isinstance(value, str) else value
        cfg.write_text(
            f'dataset = "d.jsonl"\ncorpus = "c"\n{s.key} = {v}\n[retrievers.r]\nretriever = "bm25s"\n'
            '[generators.g]\ngenerator = "extractive"\n'
        )
        loaded = load_experiment(cfg)
        assert getattr(settings_from(loaded.metric_settings)[name], s.name) == value
        assert loaded.to_json()[s.key] == value  # the resolved config keeps the TOML's shape


def test_every_method_setting_has_a_flag():
    from wetqa.evaluation.methods import ATTRIBUTION, SUPPORT

    for command, methods in (("references", ATTRIBUTION), ("claims", SUPPORT)):
        for name, method in methods.all().items():
            for s in settings_of(method.settings):
                text, _ = _example(s)
                argv = ["eval", command, "--data", "d", "--method", name, s.flag, text]
                assert _flag_values(argv)[s.name] is not None, f"{command} {name}: {s.flag}"


def test_pipeline_and_server_settings_have_flags():
    from wetqa.generation.spec import PIPELINE_SETTINGS
    from wetqa.retrieval.spec import RETRIEVAL_SETTINGS
    from wetqa.serve.config import SERVER_SETTINGS

    for command, infos in (("ask", PIPELINE_SETTINGS), ("serve", [*RETRIEVAL_SETTINGS, *SERVER_SETTINGS])):
        for s in infos:
            text, _ = _example(s)
            argv = [command, *(["q"] if command == "ask" else []), s.flag, *([text] if text is not None else [])]
            assert _flag_values(argv)[s.name] is not None, s.flag


def test_unknown_settings_and_bad_values_are_named():
    from wetqa.generation import GenerationError
    from wetqa.generation.spec import PipelineSpec

    with pytest.raises(GenerationError, match="unknown key"):
        PipelineSpec.from_values({"generator": "gpt-4o", "temprature": 0.5})
    with pytest.raises(GenerationError, match="concurrency must be >= 1"):
        PipelineSpec.from_values({"generator": "openai", "model": "m", "concurrency": 0})
    with pytest.raises(GenerationError, match="does not apply to the openai generator"):
        PipelineSpec.from_values({"generator": "gpt-4o", "dtype": "float16"})


@dataclass(frozen=True, slots=True)
class Example:
    rate: float = setting(0.5, "a share", minimum=0, maximum=1, output=True)
    names: tuple[str, ...] = setting((), "repeatable")
    size: int | None = setting(None, "optional", minimum=1)
    on: bool = setting(True, "a switch")


def test_flags_and_values_from_a_settings_class():
    p = argparse.ArgumentParser()
    add_arguments(p, settings_of(Example))
    args = p.parse_args(["--rate", "0.25", "--names", "a", "--names", "b", "--no-on"])
    assert given(args, settings_of(Example)) == {"rate": 0.25, "names": ("a", "b"), "on": False}
    assert build(Example, {"rate": 1, "size": 3}) == Example(rate=1.0, size=3)
    with pytest.raises(SettingError, match="rate must be >= 0 and <= 1, got 2"):
        build(Example, {"rate": 2})
    with pytest.raises(SettingError, match="unknown setting"):
        build(Example, {"speed": 1})
    with pytest.raises(SettingError, match="expected int"):
        coerce(settings_of(Example)[2], 2.5)
    with pytest.raises(SystemExit):
        p.parse_args(["--rate", "x"])


def test_which_extra_provides_a_package_is_declared_once():
    # EXTRA_OF is the one table: backends' extras, install hints and `requires` read it, and every
    # extra it names is one that pyproject.toml offers.
    import tomllib
    from pathlib import Path

    from wetqa.console import EXTRA_OF, UnavailableError, install_command, requires
    from wetqa.generation.registry import backends

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert set(EXTRA_OF.values()) <= set(pyproject["project"]["optional-dependencies"])
    assert {name: info.extra for name, info in backends().items()} == {
        "extractive": None,
        "openai": "openai",
        "transformers": "dense",
        "vllm": "gpu",
    }
    assert install_command("sentence_transformers.models") == "pip install 'wetqa[dense]'"
    assert install_command("no_such_package") == "pip install no_such_package"
    with pytest.raises(UnavailableError, match=r"^wetqa x needs no_such_package: pip install no_such_package$"):
        requires("json", "no_such_package", command="wetqa x")


@dataclass(frozen=True, slots=True)
class Lists:
    kinds: tuple[str, ...] = setting((), "a comma list, or the flag again", split=",")
    paths: tuple[str, ...] = setting((), "a comma may be part of a value")


def test_a_comma_list_and_repeated_flags_are_the_same_where_a_setting_splits():
    """Issue 40: the documented `--laws ID,ID` and `--kind K1,K2` were one value each."""
    kinds, paths = settings_of(Lists)
    p = argparse.ArgumentParser()
    add_arguments(p, settings_of(Lists))
    args = p.parse_args(["--kinds", "wet,AMvB", "--kinds", " KB ", "--paths", "data/a,b", "--paths", "c"])
    assert given(args, settings_of(Lists)) == {"kinds": ("wet", "AMvB", "KB"), "paths": ("data/a,b", "c")}
    assert coerce(kinds, "wet,AMvB") == ("wet", "AMvB") and coerce(kinds, ["wet,AMvB", "KB"]) == ("wet", "AMvB", "KB")
    assert coerce(paths, "data/a,b") == ("data/a,b",)  # an index path or model id is never split
    with pytest.raises(SystemExit):
        p.parse_args(["--kinds", "wet,,AMvB"])
    with pytest.raises(SettingError, match=r"^kinds: an empty value in 'wet,'"):
        coerce(kinds, "wet,")


def test_laws_and_kind_take_comma_lists_on_the_command_line_and_in_toml(articles_index, tmp_path, capsys):
    import json

    from wetqa.cli import main

    question = ["search", "gezag ouder rechtbank vreemdeling verblijfsvergunning", "--index", str(articles_index)]
    both = {"BWBR9990001", "BWBR9990002"}
    config = tmp_path / "pipeline.toml"
    config.write_text('laws = "BWBR9990001,BWBR9990002"\nkind = "wet,AMvB"\n', encoding="utf-8")
    for scope in (
        ["--laws", "BWBR9990001,BWBR9990002"],
        ["--laws", "BWBR9990001", "--laws", "BWBR9990002"],
        ["--kind", "wet,AMvB"],
        ["--kind", "wet", "--kind", "AMvB"],
    ):
        capsys.readouterr()
        assert main([*question, *scope, "--output", "json"]) == 0, capsys.readouterr()
        assert {h["law_id"] for h in json.loads(capsys.readouterr().out)["hits"]} == both, scope
    ask = ["ask", "Wanneer kan de rechtbank het gezag van een ouder beëindigen?", "--index", str(articles_index)]
    assert main([*ask, "--config", str(config), "--output", "json"]) == 0, capsys.readouterr()
