"""The layers and the direction of their imports, read from the source (every import, lazy ones too).

core (wetqa.console, io, config, home) <- corpus <- retrieval <- generation <- serve;
evaluation reads records beside them and may import the stages below serve, but only the top
layer (wetqa.cli, wetqa.experiment, wetqa.doctor, and the ``__main__`` entry points) imports it.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "wetqa": "wetqa",
    "corpus": "wetqa.corpus",
    "retrieval": "wetqa.retrieval",
    "generation": "wetqa.generation",
    "evaluation": "wetqa.evaluation",
    "serve": "wetqa.serve",
}
TOP = {"wetqa.cli", "wetqa.config", "wetqa.experiment", "wetqa.doctor"}
ORDER = ["core", "corpus", "retrieval", "generation", "serve"]
ALLOWED = {
    "core": {"core"},
    "corpus": {"core", "corpus"},
    "retrieval": {"core", "corpus", "retrieval"},
    "generation": {"core", "corpus", "retrieval", "generation"},
    "serve": {"core", "corpus", "retrieval", "generation", "serve"},
    "evaluation": {"core", "corpus", "retrieval", "generation", "evaluation"},
}


def layer(module: str) -> str:
    if module in TOP or module.endswith(".__main__"):
        return "top"
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in {"corpus", "retrieval", "generation", "evaluation", "serve"}:
        return parts[1]
    return "core"


def modules() -> dict[str, Path]:
    out = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def imports_of(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{a.name}" for a in node.names)  # `from . import x` imports a module
    return found


def test_sources_use_one_namespace():
    bare = []
    for module, path in modules().items():
        for target in imports_of(module, path):
            if target.split(".")[0] in {"corpus", "retrieval", "generation", "evaluation", "serve"}:
                bare.append(f"{module} imports {target}")
    assert not bare, bare


def test_imports_point_one_way():
    known = modules()
    wrong = []
    for module, path in known.items():
        here = layer(module)
        if here == "top":
            continue
        for target in imports_of(module, path):
            if not target.startswith("wetqa") or target == "wetqa":
                continue
            if target not in known and target.rsplit(".", 1)[0] not in known:
                continue
            there = layer(target if target in known else target.rsplit(".", 1)[0])
            if there not in ALLOWED[here]:
                wrong.append(f"{module} ({here}) imports {target} ({there})")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_back_edge(tmp_path):
    # The checker itself: a retrieval module importing generation must be reported.
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from wetqa.generation import Pipeline\n")
    targets = imports_of("wetqa.retrieval.bad", bad)
    assert "wetqa.generation" in targets and layer("wetqa.generation") not in ALLOWED["retrieval"]


def test_serving_imports_no_evaluation():
    code = (
        "import sys, wetqa.serve, wetqa.serve.cli; print([m for m in sys.modules if m.startswith('wetqa.evaluation')])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert out.stdout.strip() == "[]"


def _graph() -> dict[str, set[str]]:
    """Module -> the wetqa modules it imports (every import, lazy and type-checking ones too)."""
    known = modules()
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        edges = set()
        for target in imports_of(module, path):
            if target in known:
                edges.add(target)
            elif target.rsplit(".", 1)[0] in known:
                edges.add(target.rsplit(".", 1)[0])
        edges.discard(module)
        graph[module] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_cycle_check_sees_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_stage_imports_another_stages_cli():
    wrong = []
    for module, path in modules().items():
        here = layer(module)
        for target in imports_of(module, path):
            parts = target.split(".")
            if len(parts) >= 3 and parts[0] == "wetqa" and parts[2] == "cli" and parts[1] != module.split(".")[1]:
                if here != "top":
                    wrong.append(f"{module} imports {target}")
    assert wrong == []


def test_wetqa_help_imports_no_stage_and_no_heavy_package():
    code = (
        "import sys\nfrom wetqa.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = ['fastapi', 'uvicorn', 'torch', 'transformers', 'sentence_transformers', 'lxml', 'numpy']\n"
        "print([m for m in heavy if m in sys.modules], sorted(m for m in sys.modules if m.startswith('wetqa')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    heavy, ours = out.stdout.strip().splitlines()[-1].split("] [")
    assert heavy == "[" and ours == "'wetqa', 'wetqa.cli', 'wetqa.console']", out.stdout


def _functions(tree: ast.AST):
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_the_server_is_made_of_small_functions():
    long = []
    for path in sorted((ROOT / "serve").glob("*.py")):
        for fn in _functions(ast.parse(path.read_text(encoding="utf-8"))):
            n = fn.end_lineno - fn.lineno + 1
            if n > 80:
                long.append(f"{path.name}:{fn.name} ({n} lines)")
    assert long == []
    app = ast.parse((ROOT / "serve" / "app.py").read_text(encoding="utf-8"))
    create = next(f for f in _functions(app) if f.name == "create_app")
    assert create.end_lineno - create.lineno + 1 < 40
    assert [f.name for f in _functions(create) if f is not create] == []  # no nested functions


def test_the_experiment_imports_no_cli():
    # The experiment builds its scorers from the metrics' registry, as `eval generation` does, not
    # from a command's module.
    module = "wetqa.experiment"
    found = imports_of(module, modules()[module])
    assert [t for t in found if t == "wetqa.cli" or t.endswith(".cli") or ".cli." in t] == []


def _part_names() -> set[str]:
    """The names of evaluation's swappable parts: metrics, attribution and claim-support methods,
    claim units, p-value corrections, and the generator backends a judge or an LLM runs on."""
    from wetqa.evaluation.claims import UNITS
    from wetqa.evaluation.methods import ATTRIBUTION, SUPPORT
    from wetqa.evaluation.metrics import metrics
    from wetqa.evaluation.significance import CORRECTIONS
    from wetqa.generation.registry import backends

    return {*metrics(), *ATTRIBUTION.all(), *SUPPORT.all(), *UNITS, *CORRECTIONS, *backends()}


def _literals(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def name_ladders(source: str, names: set[str]) -> list[str]:
    """Places that pick a part by comparing its name with a string literal (``method == "nli"``,
    ``m in ("embedding", ...)``, ``spec.startswith("transformers:")``, ``case "geval":``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        spelled: list[str] = []
        if isinstance(node, ast.Compare):
            spelled = [s for part in (node.left, *node.comparators) for s in _literals(part) if s in names]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in ("startswith", "endswith"):
                spelled = [s for a in node.args for s in _literals(a) if s.rstrip(":") in names]
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
            spelled = [s for s in _literals(node.pattern.value) if s in names]
        line = node.pattern.lineno if isinstance(node, ast.match_case) else getattr(node, "lineno", 0)
        found += [f"line {line}: {s!r}" for s in spelled]
    return found


def test_no_metric_or_method_is_picked_by_its_name_in_evaluation_or_the_experiment():
    names = _part_names()
    paths = [*sorted((ROOT / "evaluation").glob("*.py")), ROOT / "wetqa" / "experiment.py"]
    ladders = {str(p.relative_to(ROOT)): name_ladders(p.read_text(encoding="utf-8"), names) for p in paths}
    assert {p: lines for p, lines in ladders.items() if lines} == {}


def test_the_ladder_check_sees_a_ladder():
    names = {"nli", "embedding", "transformers", "geval"}
    source = (
        'if method == "nli": pass\n'
        'if m in ("embedding", "x"): pass\n'
        'if spec.startswith("transformers:"): pass\n'
        'match name:\n    case "geval": pass\n'
        'if unit == "other": pass\n'
    )
    found = name_ladders(source, names)
    assert [f.split(":")[0] for f in found] == ["line 1", "line 2", "line 3", "line 5"]


# What only the BWB source may know: its id field and its id pattern.
_BWB_WORDS = ("bwb_id", "BWBR")


def bwb_spellings(text: str) -> list[str]:
    return [f"line {n}: {w}" for n, line in enumerate(text.splitlines(), 1) for w in _BWB_WORDS if w in line]


def test_only_the_corpus_knows_the_bwb():
    # Storing, retrieving, citing and serving a document go through corpus.sources: a second collection
    # (case law, municipal regulations) touches no stage but corpus/. The page's script counts too.
    files = [p for folder in FOLDERS if folder != "corpus" for p in sorted((ROOT / folder).rglob("*.py"))]
    files += sorted((ROOT / "serve" / "static").glob("*"))
    found = {str(p.relative_to(ROOT)): bwb_spellings(p.read_text(encoding="utf-8")) for p in files if p.is_file()}
    assert {p: lines for p, lines in found.items() if lines} == {}


def test_the_bwb_check_sees_a_spelling():
    assert bwb_spellings('x = chunk.law_id\ny = row["bwb_id"]\nz = "BWBR0001854"') == ["line 2: bwb_id", "line 3: BWBR"]


# ----------------------------------------------------------------------- private parts and the query path


def private_imports() -> list[str]:
    """Imports of another stage's private parts: a module or a name starting with one underscore (``_base``,
    ``_row``), from outside the stage (core's included: a stage may read only what core exports)."""
    known = modules()
    wrong = []
    for module, path in known.items():
        here = layer(module)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("wetqa.") or layer(target) == here:
                continue
            private_module = any(p.startswith("_") and not p.startswith("__") for p in target.split("."))
            private_names = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private_module or private_names:
                wrong.append(f"{module} imports {target} {private_names or ''}".rstrip())
    return wrong


def test_no_module_imports_another_stages_private_parts():
    assert private_imports() == []


def named_modules(path: Path) -> set[str]:
    """The modules a registry entry names as text (``"wetqa.retrieval.articles.stage_list:stages_for"``): imported
    when the entry is used, so an edge of the import graph too."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = re.fullmatch(r"(wetqa(?:\.\w+)+):\w+", node.value)
            if match:
                found.add(match.group(1))
    return found


def closure(start: str) -> set[str]:
    """Every wetqa module ``start`` can import (lazy imports and modules named by registry entries included), the
    stages' CLIs left out."""
    known = modules()
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module in seen or module not in known:
            continue
        seen.add(module)
        for target in imports_of(module, known[module]) | named_modules(known[module]):
            target = target if target in known else target.rsplit(".", 1)[0]
            if target in known and not target.endswith(".cli") and target not in TOP:
                todo.append(target)
    return seen


def test_the_query_path_imports_no_model_tooling_and_no_fitting():
    """A question's path (the server, the answer pipeline, retrieval) never reaches the offline model tooling
    (export, fetch, convert, training) or the fitting: they live in rooms of their own."""
    reached = closure("wetqa.serve.app") | closure("wetqa.generation.pipeline") | closure("wetqa.retrieval.pipeline")
    assert {"wetqa.retrieval.articles.stages", "wetqa.retrieval.articles.stage_list"} <= reached  # the stages
    offline = sorted(m for m in reached if m.startswith(("wetqa.retrieval.tooling", "wetqa.retrieval.fitting")))
    assert offline == []


# What the protocols declare (Retriever, Backend, Stage, Encoder): read, never probed for.
DECLARED_ABILITIES = {
    "chunks", "retrievers", "laws", "calls_model", "features", "scope", "inline", "warm",
    "supports", "structured", "uses_model", "inline_safe", "schedules", "model_name", "generate_stream",
    "kind", "needs", "fitted", "depth", "begin",
    "dim", "query_prefix", "prompts", "passage_variant", "document", "encode_prompted", "encode_formatted",
}  # fmt: skip


def probes(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in {"getattr", "hasattr"}:
            if (
                len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in DECLARED_ABILITIES
            ):
                found.append(f"{node.func.id}(..., {node.args[1].value!r}) at line {node.lineno}")
    return found


def test_no_part_is_probed_for_what_its_protocol_declares():
    wrong = [f"{module}: {p}" for module, path in modules().items() for p in probes(path.read_text(encoding="utf-8"))]
    assert wrong == []


def test_the_probe_check_sees_a_probe():
    assert probes("def f(r):\n    return getattr(r, 'scope', None)\n") == ["getattr(..., 'scope') at line 2"]
    assert probes("def f(r):\n    return getattr(r, 'something_else', None)\n") == []
