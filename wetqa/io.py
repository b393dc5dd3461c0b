"""Atomic output: a reader never sees a half-written file or folder.

Everything wetqa writes goes to a temporary sibling first and is renamed into
place, so an interrupted build or run leaves the previous result intact.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class OutputError(ValueError):
    """An output path wetqa will not write to (it holds something wetqa did not make)."""


def _umask() -> int:
    # /proc gives it without changing it (os.umask must set it to read it: a race in a threaded server).
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """Open a temporary file beside ``path``; rename it onto ``path`` only on success.

    The file gets the mode a plain ``open`` would give it (0666 less the umask), not mkstemp's 0600.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where the kernel or libc cannot."""
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # the file system or kernel does not offer it: the caller falls back
    raise OSError(err, os.strerror(err), str(a))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(path: Path) -> None:
    """Temporary siblings (``.<name>.<pid>.*.tmp``) left by builds whose process is gone."""
    prefix = f".{path.name}."
    for sibling in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = sibling.name[len(prefix) :].split(".", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)) and sibling.is_dir():
            shutil.rmtree(sibling, ignore_errors=True)


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


# The key every marker file wetqa writes carries: the format of what it marks, e.g. "corpus/2".
FORMAT_KEY = "wetqa_format"


def wetqa_made(marker: Path) -> bool:
    """Whether a marker file is one wetqa wrote: JSON naming wetqa's format (or an older wetqa's fields).

    A file that merely has the name (a web project's manifest.json, a user's config.json) is not.
    """
    try:
        d = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(d, dict):
        return False
    return (
        isinstance(d.get(FORMAT_KEY), str)
        or d.get("tool") == "wetqa"  # corpus manifests of an older wetqa
        or "wetqa_version" in d  # index.json of an older wetqa
        or str(d.get("kind", "")).startswith("wetqa-")  # converted models
        or (isinstance(d.get("versions"), dict) and "wetqa" in d["versions"])  # run configs of an older wetqa
    )


def _check_replaceable(path: Path, marker: str | None, kind: str) -> None:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OutputError(f"{path} is a file (or a link), not {_a(kind)} folder; wetqa replaces only folders it made")
    if not path.is_dir() or marker is None:
        return
    if not any(path.iterdir()):
        return
    if (path / marker).is_file():
        if wetqa_made(path / marker):
            return
        raise OutputError(
            f"{path / marker} is not one wetqa wrote (no {FORMAT_KEY} in it), so {path} is not {_a(kind)} wetqa "
            "made and wetqa will not replace it; choose another --out"
        )
    raise OutputError(
        f"{path} is not {_a(kind)} wetqa made (no {marker} in it) and wetqa will not replace it; choose another --out"
    )


def write_owned_json(path: str | os.PathLike, obj: dict, fmt: str) -> None:
    """Write wetqa's own JSON file (marked with its format), refusing to overwrite a file wetqa did not write."""
    path = Path(path)
    if path.exists() and not wetqa_made(path):
        raise OutputError(f"{path} is not a file wetqa wrote (no {FORMAT_KEY} in it); wetqa will not overwrite it")
    write_json(path, {FORMAT_KEY: fmt, **obj})


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, marker: str | None = None, kind: str = "folder") -> Iterator[Path]:
    """Build a folder in a temporary sibling and swap it into place on success.

    - An existing ``path`` is replaced only if it is a folder holding ``marker`` (the manifest wetqa
      writes into that kind of folder) or an empty one; anything else is refused before any work.
    - The folder gets the mode of a plain ``mkdir`` (0777 less the umask), not mkdtemp's 0700.
    - Everything is fsynced before the swap. On Linux the new and the old folder trade places in one
      renameat2 call, so ``path`` is the old or the new folder at every instant; elsewhere two
      renames, the first undone if the second fails.
    - The temporary sibling is named with the builder's pid: a build killed outright leaves it
      behind, and the next build of the same folder removes it once that process is gone.
    """
    path = Path(path)
    if path.name in ("", ".", ".."):
        path = path.resolve()
    _check_replaceable(path, marker, kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        for root, _dirs, files in os.walk(tmp):
            for name in files:
                with open(os.path.join(root, name), "rb") as fh:
                    os.fsync(fh.fileno())
            _fsync_dir(Path(root))
        _check_replaceable(path, marker, kind)  # again: something may have appeared while we built
        if not path.exists():
            os.replace(tmp, path)
        elif _exchange(tmp, path):
            shutil.rmtree(tmp, ignore_errors=True)  # tmp now holds the old folder
        else:
            old = tmp.with_name(tmp.name[: -len(".tmp")] + ".old.tmp")
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)
                raise
            shutil.rmtree(old, ignore_errors=True)
        _fsync_dir(path.parent)
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


def read_journal(path: str | os.PathLike, problems: list[dict] | None = None) -> list[dict]:
    """The finished records of an append-only JSONL journal (resumable runs, scores, caches).

    A process killed mid-write leaves a last line without its newline (or not JSON): the file
    is cut back to the last whole record, so the next append starts a line of its own instead
    of gluing itself onto the torn one. A line that is not JSON with records after it was not
    torn by an interruption: it is left in the file, reported (on stderr and in ``problems``)
    and kept out, and the records after it are read.
    """
    path = Path(path)
    if not path.is_file():
        return []
    data = path.read_bytes()
    lines = data.split(b"\n")
    tail = lines.pop()  # what follows the last newline: a record torn by an interruption, if anything
    keep = len(data) - len(tail)
    records: list[dict] = []
    bad: list[int] = []
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            rec = None
        if isinstance(rec, dict):
            records.append(rec)
        else:
            bad.append(lineno)
    if bad and bad[-1] == len(lines) and not tail:
        keep -= len(lines[-1]) + 1  # the last line is not JSON and nothing follows it: torn as well
        bad.pop()
    for lineno in bad:
        problem = {"file": str(path), "line": lineno, "problem": "not a JSON record; left out"}
        if problems is not None:
            problems.append(problem)
        print(f"wetqa: warning: {path}:{lineno}: not a JSON record; left out", file=sys.stderr)
    if keep != len(data):
        with open(path, "r+b") as fh:
            fh.truncate(keep)
    return records
