"""The README says only what the code does: every ``wetqa`` command and flag it names exists.

The README's fenced code blocks and inline code are read for ``wetqa <command> [<subcommand>]`` lines
and spans, and for flags: a flag on a ``wetqa`` line (or in a ``wetqa`` span) must be accepted by that
command's parser (``wetqa.cli.build_parser``); a flag in a span of its own (`` `--reader none` ``) by one of
the commands its section names. Also: the README has at most 250 lines, and every file it links exists.
The docs/ files are held to the same for their ``wetqa`` commands and the files they link.
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from wetqa.cli import COMMANDS, build_parser

from .conftest import ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_LINES = 250

pytestmark = pytest.mark.unit

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
FLAG = re.compile(r"^(--?[A-Za-z][A-Za-z0-9-]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s")


@dataclass(frozen=True)
class Mention:
    """One place the text names a command (``words``: ``["eval", "generation"]``) or a bare flag."""

    line: int
    text: str
    words: tuple[str, ...]  # the command and subcommand named (``wetqa --version``: none)
    flags: tuple[str, ...]  # the command's flags, or the bare flag
    section: int  # the heading the mention stands under
    command: bool = True  # a ``wetqa`` command; False: a flag on its own
    global_flags: tuple[str, ...] = ()  # flags before the command (``wetqa --debug ask``): the top parser's


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in prose: words are enough to find flags
        return text.split()


def _flags(tokens: list[str]) -> tuple[str, ...]:
    """The flags among the tokens: ``[--reader`` -> ``--reader``, ``--thinking/--no-thinking`` both,
    ``--out=DIR`` -> ``--out``."""
    found = []
    for token in tokens:
        for part in re.split(r"[|/]", token.strip("[](){},;")):
            m = FLAG.match(part.strip("[](){},;"))
            if m:
                found.append(m.group(1))
    return tuple(dict.fromkeys(found))


def _command(line: int, text: str, tokens: list[str], section: int) -> Mention:
    """``wetqa eval generation --runs X``: the command ("eval", "generation": the next word too when the
    command has subcommands), its flags, and the flags before it (``wetqa --debug ask "..."``)."""
    at = 1
    while at < len(tokens) and tokens[at].startswith("-"):
        at += 1
    words: list[str] = []
    for token in tokens[at : at + 2]:
        if token.startswith("-"):
            break
        words.append(token)
        if token not in COMMANDS or not _subcommands(token):
            break
    return Mention(line, text, tuple(words), _flags(tokens[at:]), section, True, _flags(tokens[1:at]))


def mentions(text: str) -> list[Mention]:
    """Every ``wetqa`` command and every bare flag the Markdown text names, with its line number."""
    out: list[Mention] = []
    fenced, section, pending, start = False, 0, "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced, pending = not fenced, ""
            continue
        if fenced:
            # A command continued on the next line with a trailing backslash is one command.
            if not pending:
                start = n
            pending += line.rstrip().removesuffix("\\") + " "
            if line.rstrip().endswith("\\"):
                continue
            logical, pending = " ".join(pending.split()).removeprefix("$ "), ""
            tokens = _tokens(logical)
            if len(tokens) > 1 and tokens[0] == "wetqa":
                out.append(_command(start, logical, tokens, section))
            continue
        if HEADING.match(line):
            section += 1
            continue
        for span in INLINE.findall(line):
            span = span.strip()
            tokens = _tokens(span)
            if not tokens:
                continue
            if tokens[0] == "wetqa" and len(tokens) > 1:  # `wetqa` alone is the package's name
                out.append(_command(n, span, tokens, section))
            elif FLAG.match(tokens[0]):
                out.append(Mention(n, span, (), _flags(tokens[:1]), section, command=False))
    return out


@cache
def parser() -> argparse.ArgumentParser:
    return build_parser()  # every subcommand's parser


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _subcommands(command: str) -> dict[str, argparse.ArgumentParser]:
    return _subparsers(_subparsers(parser())[command])


def _options(p: argparse.ArgumentParser) -> set[str]:
    return {s for action in p._actions for s in action.option_strings}


def parsers_of(words: tuple[str, ...]) -> tuple[list[argparse.ArgumentParser], str | None]:
    """The parsers a command's flags may belong to (a command with subcommands named without one: any of
    them), or None and the problem."""
    commands = _subparsers(parser())
    if not words:
        return [parser()], None
    if words[0] not in commands:
        return [], f"`wetqa {words[0]}` is no wetqa command (commands: {', '.join(commands)})"
    command = commands[words[0]]
    subs = _subparsers(command)
    if not subs:
        return [command], None
    if len(words) == 1:
        return list(subs.values()), None
    if words[1] not in subs:
        return (
            [],
            f"`wetqa {words[0]} {words[1]}`: {words[0]} has no subcommand {words[1]!r} (it has {', '.join(subs)})",
        )
    return [subs[words[1]]], None


def _named(words: tuple[str, ...]) -> str:
    return "wetqa " + " ".join(words)


def problems(text: str, name: str, bare_flags: bool = True) -> list[str]:
    """What the text names that the parser does not have, one line each (naming the command and the flag)."""
    found = mentions(text)
    out = []
    by_section: dict[int, list[Mention]] = {}
    for m in found:
        if m.command and m.words:
            by_section.setdefault(m.section, []).append(m)
    for m in found:
        if m.command:
            for flag in m.global_flags:
                if flag not in _options(parser()):
                    out.append(f"{name}:{m.line}: `wetqa` has no flag {flag} (before the command), in `{m.text}`")
            parsers, problem = parsers_of(m.words)
            if problem:
                out.append(f"{name}:{m.line}: {problem}, in `{m.text}`")
                continue
            for flag in m.flags:
                if not any(flag in _options(p) | {"-h", "--help"} for p in parsers):
                    out.append(f"{name}:{m.line}: `{_named(m.words)}` has no flag {flag}, in `{m.text}`")
        elif bare_flags:
            commands = [c.words for c in by_section.get(m.section, [])]
            pool = [p for words in commands for p in parsers_of(words)[0]]
            if not pool:  # a section that names no command: any wetqa command
                pool = [p for c in _subparsers(parser()).values() for p in [c, *_subparsers(c).values()]]
            for flag in m.flags:
                if not any(flag in _options(p) for p in pool):
                    where = ", ".join(sorted({f"`{_named(w)}`" for w in commands})) or "any wetqa command"
                    out.append(f"{name}:{m.line}: flag {flag} (in `{m.text}`) is accepted by none of {where}")
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Relative links, and docs/ files named in the text, that lead to no file (``root``: the repository)."""
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        links = {t.split("#")[0] for t in LINK.findall(line) if not re.match(r"^([a-z]+:|#)", t)}
        named = set(re.findall(r"(?<![\w/.])docs/[\w./-]+\.md", line)) - links
        missing = [t for t in links if not (path.parent / t).exists()] + [t for t in named if not (root / t).exists()]
        out += [f"{path.relative_to(root)}:{n}: links {t}, which does not exist" for t in sorted(missing)]
    return out


def test_the_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; at most {MAX_LINES} (the rest goes to docs/)"


def test_every_command_and_flag_the_readme_names_exists():
    text = README.read_text(encoding="utf-8")
    found = mentions(text)
    named = {m.words[0] for m in found if m.words}
    # The user's commands are each shown (a parse that found nothing would pass vacuously).
    assert {"ask", "search", "serve", "generate", "eval", "experiment", "models"} <= named, sorted(named)
    assert sum(len(m.flags) for m in found) >= 40, "the README's flags were not found"
    wrong = problems(text, "README.md")
    assert not wrong, "the README names what wetqa does not have:\n  " + "\n  ".join(wrong)


def test_every_command_the_docs_name_exists():
    wrong = []
    for path in sorted(DOCS.glob("*.md")):
        wrong += problems(path.read_text(encoding="utf-8"), f"docs/{path.name}", bare_flags=False)
    assert not wrong, "the docs name what wetqa does not have:\n  " + "\n  ".join(wrong)


def test_every_file_the_readme_and_docs_link_exists():
    text = README.read_text(encoding="utf-8")
    assert re.search(r"\]\(docs/[\w.-]+\.md\)", text), "the README links no docs/ file"
    wrong = broken_links(README) + [x for p in sorted(DOCS.glob("*.md")) for x in broken_links(p)]
    assert not wrong, "\n  ".join(["links to nothing:", *wrong])


def test_the_check_finds_what_is_missing():
    """The checks themselves: a made-up flag, subcommand and command are each named in one line."""
    text = (
        '## A\n\n```bash\nwetqa ask "..." --no-such-flag \\\n    -k 3\nwetqa eval nothing --dataset x\n```\n\n'
        "Use `wetqa frobnicate` or `wetqa serve --port 1 --colour red`; `--read-depth 5` and `--warp`.\n"
        '`wetqa --debug ask "..."` shows a traceback, `wetqa ask "..." --debug` does not parse.\n'
    )
    wrong = problems(text, "T")
    assert any("`wetqa ask` has no flag --no-such-flag" in w and w.startswith("T:4:") for w in wrong), wrong
    assert any("eval has no subcommand 'nothing'" in w for w in wrong), wrong
    assert any("`wetqa frobnicate` is no wetqa command" in w for w in wrong), wrong
    assert any("`wetqa serve` has no flag --colour" in w for w in wrong), wrong
    assert any("flag --warp" in w for w in wrong), wrong
    assert any("`wetqa ask` has no flag --debug" in w and w.startswith("T:10:") for w in wrong), wrong
    assert not any("--read-depth" in w or "no flag -k" in w for w in wrong), wrong
    assert len(wrong) == 6, wrong


def test_a_link_to_nothing_is_named(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results.md").write_text("# Results\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text("See [the plan](plan.md), `docs/nowhere.md` and [results](results.md).\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == [
        "docs/page.md:1: links docs/nowhere.md, which does not exist",
        "docs/page.md:1: links plan.md, which does not exist",
    ]
