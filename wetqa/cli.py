"""The ``wetqa`` console script: one command, a subcommand per pipeline stage.

Every package also runs on its own (``python -m corpus build ...`` is
``wetqa corpus build ...``). Commands that print results take
``--output json``; errors print one line naming the problem and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from . import __version__


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


def output_parent() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--output", choices=("text", "json"), default="text", help="print results as text or JSON")
    return p


def emit(args: argparse.Namespace, payload: object, text: Callable[[], str] | str) -> None:
    if getattr(args, "output", "text") == "json":
        print(json.dumps(payload, ensure_ascii=False, indent=2))
    else:
        print(text() if callable(text) else text)


def _registrars():
    # Imported here so that `wetqa --help` and light commands stay fast and
    # a missing optional dependency only breaks the command that needs it.
    from corpus import cli as corpus_cli

    from . import doctor

    yield corpus_cli.register
    yield doctor.register
    for module in ("retrieval.cli", "generation.cli", "evaluation.cli", "serve.cli"):
        try:
            mod = __import__(module, fromlist=["register"])
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.split(".")[0] in {"retrieval", "generation", "evaluation", "serve"}:
                continue  # that stage is not built yet
            raise
        yield mod.register
        if hasattr(mod, "register_attribute"):
            yield mod.register_attribute


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="wetqa", description="Attributed question answering over Dutch law.")
    parser.add_argument("--version", action="version", version=f"wetqa {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for register in _registrars():
        register(sub, output_parent())
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("wetqa: interrupted", file=sys.stderr)
        return 130
    except UsageError as exc:
        print(f"wetqa: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        # Library errors carry a message that names the problem; no traceback for users.
        print(f"wetqa: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
