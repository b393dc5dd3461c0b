"""Atomic output: a reader never sees a half-written file or folder.

Everything wetqa writes goes to a temporary sibling first and is renamed into
place, so an interrupted build or run leaves the previous result intact.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Open a temporary file beside ``path``; rename it onto ``path`` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Build a folder in a temporary sibling and swap it into place on success.

    The old folder (if any) stays usable until the final rename; a build that
    dies leaves only a ``.<name>.*.tmp`` sibling behind, removed here on error.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_file(path) as fh:
        json.dump(obj, fh, ensure_ascii=False, indent=2)
        fh.write("\n")


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not a JSON line ({exc.msg})") from None


def read_journal(path: str | os.PathLike) -> list[dict]:
    """The finished records of an append-only JSONL journal (resumable runs, scores, caches).

    A process killed mid-write leaves a last line without its newline (or not
    JSON): the file is cut back to the last whole record, so the next append
    starts a line of its own instead of gluing itself onto the torn one.
    """
    path = Path(path)
    records: list[dict] = []
    if not path.is_file():
        return records
    good_end = 0
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break
            if raw.strip():
                try:
                    records.append(json.loads(raw))
                except json.JSONDecodeError:
                    break
            good_end += len(raw)
    if good_end != path.stat().st_size:
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return records
