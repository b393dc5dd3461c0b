"""The ``wetqa`` console script: one command, a subcommand per pipeline stage.

Every stage also runs on its own (``python -m wetqa.corpus build ...`` is
``wetqa corpus build ...``). Commands that print results take ``--output
json``; errors are one line (or ``{"error": ...}`` with ``--output json``) and
the exit codes are those of :mod:`wetqa.console`. ``--debug`` (or
``WETQA_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from wetqa import __version__
from wetqa.console import (
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_PIPE,
    EXIT_TERMINATED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    UnavailableError,
    UsageError,
    missing_package_message,
    output_parent,
    report_error,
)

# Every subcommand: (module, function that adds its parser, one-line help). A subcommand's module is
# imported only when that subcommand runs (or shows its help), so `wetqa --help` imports no stage and
# a base install without extras starts every command it can run.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "corpus": ("wetqa.corpus.cli", "register", "build and download the law corpus"),
    "models": ("wetqa.retrieval.cli", "register_models", "prepare models that run offline"),
    "index": ("wetqa.retrieval.cli", "register_index", "build a retrieval index over a corpus"),
    "search": ("wetqa.retrieval.cli", "register_search", "retrieve chunks for a question"),
    "diff": ("wetqa.retrieval.cli", "register_diff", "an article's versions and the words that changed"),
    "fit": ("wetqa.retrieval.cli", "register_fit", "fit the learned ranking or the confidence, cross-validated"),
    "questions": ("wetqa.generation.questions_cli", "register", "write and check the questions each article answers"),
    "ask": ("wetqa.generation.cli", "register_ask", "answer a question with cited law articles"),
    "chat": ("wetqa.generation.cli", "register_chat", "a conversation: follow-ups read with the questions before"),
    "generate": (
        "wetqa.generation.cli",
        "register_generate",
        "answer every question of a dataset, N runs, resumable",
    ),
    "experiment": (
        "wetqa.experiment",
        "register",
        "a grid of retrievers x generators x k x runs from a TOML file",
    ),
    "eval": ("wetqa.evaluation.cli", "register", "evaluate retrieval, generation or reference attribution"),
    "attribute": (
        "wetqa.evaluation.cli",
        "register_attribute",
        "add per-sentence or per-claim evidence to generated answers",
    ),
    "serve": ("wetqa.serve.cli", "register", "serve the OpenAI-compatible API and the web page"),
    "doctor": ("wetqa.doctor", "register", "report what is installed and usable"),
}


def _chosen(argv: Sequence[str]) -> str | None:
    """The subcommand named on the command line (the first argument that is one)."""
    for arg in argv:
        if arg in COMMANDS:
            return arg
        if arg == "--":
            break
    return None


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line (JSON with ``--output json``) and exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        argv = sys.argv[1:] if _ARGV is None else _ARGV
        json_out = "json" in argv and "--output" in argv or "--output=json" in argv
        # "wetqa: error: generate: argument -k: ..." (the top parser's own errors need no second "wetqa:")
        where = self.prog.removeprefix("wetqa").strip()
        report_error(
            argparse.Namespace(output="json" if json_out else "text"),
            "usage",
            f"{where}: {message}" if where else message,
        )
        sys.exit(EXIT_USAGE)


_ARGV: list[str] | None = None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; only the chosen subcommand's flags are built (``None``: every subcommand's)."""
    parser = _Parser(
        prog="wetqa",
        description="Attributed question answering over Dutch law.",
        epilog="exit codes: 0 done, 1 some items failed, 2 bad input, 3 missing component, "
        "70 internal error, 130 interrupted, 141 output pipe closed, 143 terminated",
    )
    parser.add_argument("--version", action="version", version=f"wetqa {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        default=os.environ.get("WETQA_DEBUG") == "1",
        help="show Python tracebacks (or WETQA_DEBUG=1)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    chosen = _chosen(argv) if argv is not None else None
    for name, (module, function, help_text) in COMMANDS.items():
        if argv is None or name == chosen:
            getattr(importlib.import_module(module), function)(sub, output_parent())
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    return parser


def _quiet_pipe() -> int:
    # The reader went away (`wetqa search ... | head -1`): say nothing more, and keep
    # Python from complaining again when it flushes stdout at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return EXIT_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    global _ARGV
    _ARGV = list(argv) if argv is not None else None
    words = list(argv) if argv is not None else sys.argv[1:]
    for n, word in enumerate(words, 1):
        try:
            word.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 reach Python as lone surrogates
            shown = word.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            # The arguments are not parsed yet: --output json is looked for as it is written.
            as_json = "--output=json" in words or any(a == "--output" and b == "json" for a, b in zip(words, words[1:]))
            report_error(argparse.Namespace(output="json") if as_json else None, "usage",
                         f"argument {n} ({shown!r}) is not valid UTF-8 text")  # fmt: skip
            return EXIT_USAGE
    args = None
    previous = _terminate_as_interrupt()
    try:
        # Inside the try: building the parser imports every stage's flags, a tenth of a second a Ctrl-C may hit.
        args = build_parser(words).parse_args(words)
        result = int(args.func(args) or 0)
        sys.stdout.flush()
        return result
    except Terminated:
        print("wetqa: terminated", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("wetqa: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _quiet_pipe()
    except Exception as exc:  # noqa: BLE001 - every error becomes one line; --debug shows the traceback
        if args is None or args.debug:  # an error while the parser was built is wetqa's own: its traceback
            raise
        code, kind = _classify(exc)
        report_error(args, kind, _message(exc))
        return code
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def run(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``wetqa`` command (the console script, ``python -m wetqa``): :func:`main`, and its exit code.

    After Ctrl-C (or SIGTERM) Python still joins, as it exits, the worker threads a model call left busy. A
    second Ctrl-C meanwhile interrupted that join: a traceback from threading's exit hook, and a native
    thread left running then aborted the process (exit 134). It now ends the process at once, quietly, with
    the first signal's exit code. (Not in :func:`main`: a program that calls it keeps its own handlers.)"""
    code = main(argv)
    if code in (EXIT_INTERRUPTED, EXIT_TERMINATED):

        def at_once(signum, frame):
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

        with contextlib.suppress(ValueError):  # not the main thread: nothing to set
            signal.signal(signal.SIGINT, at_once)
            signal.signal(signal.SIGTERM, at_once)
    sys.exit(code)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, so the work stops as at Ctrl-C: its clean-up runs."""


def _terminate_as_interrupt():
    """SIGTERM raises :class:`Terminated` in this process (the previous handler is returned, to put back);
    a process forked from it (a build's pool worker) dies of it as by default. None where no handler can
    be set (not the main thread)."""
    main_pid = os.getpid()

    def on_sigterm(signum, frame):
        if os.getpid() != main_pid:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated

    try:
        return signal.signal(signal.SIGTERM, on_sigterm)
    except ValueError:  # main() called from another thread (an embedding program's)
        return None


def _disk_full(exc: BaseException) -> bool:
    """A write that failed for want of space (or of a file size the system allows): sqlite says it its own way."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return True
    sqlite3 = sys.modules.get("sqlite3")
    return (
        sqlite3 is not None
        and isinstance(exc, sqlite3.OperationalError)
        and any(s in str(exc) for s in ("disk is full", "disk I/O error"))
    )


def _message(exc: BaseException) -> str:
    if _disk_full(exc):
        where = f" ({exc.filename})" if isinstance(exc, OSError) and exc.filename else ""
        return (
            f"cannot write{where}: no space left on the device, or a file too large for it ({exc}); "
            "free some space and run the command again (an interrupted build leaves the previous result intact)"
        )
    text = str(exc) or type(exc).__name__
    if _classify(exc)[0] == EXIT_INTERNAL:
        return f"internal error ({type(exc).__name__}: {text}); rerun with --debug for the traceback"
    if isinstance(exc, (ImportError, ModuleNotFoundError)) and getattr(exc, "name", None):
        return missing_package_message(str(exc.name))
    if isinstance(exc, NotADirectoryError) and exc.filename:  # an output under a file ("notes.txt/sub")
        from pathlib import Path

        wanted = Path(str(exc.filename))
        file = next((p for p in (wanted, *wanted.parents) if p.is_file()), None)
        if file is not None:
            return f"cannot make {wanted}: {file} is a file, not a folder"
    return text


def _classify(exc: BaseException) -> tuple[int, str]:
    if _disk_full(exc):
        return EXIT_USAGE, "error"
    if isinstance(exc, (UnavailableError, ImportError, ConnectionError)):
        return EXIT_UNAVAILABLE, "unavailable"
    if isinstance(exc, (UsageError, ValueError, OSError, RuntimeError)):
        # Every wetqa error type derives from these and names the problem in its message.
        return EXIT_USAGE, "invalid_input" if isinstance(exc, (UsageError, ValueError)) else "error"
    return EXIT_INTERNAL, "internal"


if __name__ == "__main__":
    run()
