"""Atomic output: a reader never sees a half-written file or folder.

Everything wetqa writes goes to a temporary sibling first and is renamed into
place, so an interrupted build or run leaves the previous result intact.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import fnmatch
import glob
import json
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
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
    with _named(path):
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


@contextlib.contextmanager
def _named(path: Path) -> Iterator[None]:
    """An error making the temporary sibling of ``path`` names ``path``: the user asked for it, not for the
    temporary name (a folder that takes no files)."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None  # OSError picks the subclass of the errno


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
    """Temporary siblings (``.<name>.<pid>.*.tmp``) left by builds whose process is gone: only folders
    wetqa made (its list of what it wrote is in them from the start), so a user's folder of that name stays."""
    prefix = f".{path.name}."
    for sibling in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = sibling.name[len(prefix) :].split(".", 1)[0]
        if (
            pid.isdigit()
            and not _pid_alive(int(pid))
            and sibling.is_dir()
            and not sibling.is_symlink()
            and (sibling / OWNED).is_file()
        ):
            shutil.rmtree(sibling, ignore_errors=True)


def _a(noun: str) -> str:
    return ("an " if noun[:1].lower() in "aeiou" else "a ") + noun


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


# --------------------------------------------------------------------------- the owned-folder rule
# Every folder wetqa writes into holds this list of what it wrote there (one JSON string a line, after a
# header). A folder is written into only when it is new or empty, or when everything in it is on its
# list: a user's file is never overwritten, deleted, or written beside. Nothing is written into the
# root folder or the home folder itself.
OWNED = ".wetqa-owned"


def _refuse_special(path: Path) -> None:
    resolved = path.resolve()
    if resolved == Path(resolved.anchor) or resolved == Path.home().resolve():
        what = "the root folder" if resolved == Path(resolved.anchor) else "your home folder"
        raise OutputError(
            f"{path} is {what}: wetqa never writes into it itself; give a folder of its own (e.g. {path / 'wetqa'})"
        )


def owned_names(folder: Path) -> set[str] | None:
    """The names wetqa wrote into ``folder`` (None: no list, so not a folder wetqa made or adopted)."""
    try:
        lines = (folder / OWNED).read_text(encoding="utf-8", errors="replace").splitlines()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    names = set()
    for line in lines:
        try:
            name = json.loads(line)
        except ValueError:
            continue  # a line torn by an interruption: its file was not made yet
        if isinstance(name, str):
            names.add(name)
    return names


def _note_owned(folder: Path, names: Iterable[str], built: str | None = None) -> None:
    """Add names to a folder's list of what wetqa wrote there, before they are written. ``built``: the kind of
    folder :func:`atomic_dir` builds whole ("corpus", "index", "model", "ONNX export"), recorded in a new list's
    header."""
    new = not (folder / OWNED).exists()
    with open(folder / OWNED, "a", encoding="utf-8") as fh:
        if new:
            fh.write(json.dumps({FORMAT_KEY: "owned/1", **({"built": built} if built else {})}) + "\n")
        fh.write("".join(json.dumps(n, ensure_ascii=False) + "\n" for n in names))


# The marker of each kind of folder wetqa builds whole (atomic_dir), for folders an older wetqa built before
# their kind was recorded in their list: no other output is written into them (own_folder).
BUILT_MARKERS = {
    "index.json": "index",
    "manifest.json": "corpus",
    "wetqa-model.json": "model",
    "onnx.json": "ONNX export",
}


# A folder built whole that another may be built inside: a model's ONNX export (MODEL/onnx).
BUILT_INSIDE = {("ONNX export", "model")}


def refuse_inside_built(path: Path, kind: str | None) -> None:
    """Refuse an output below a folder wetqa built whole (an index, a corpus, a model): it would be listed in
    that folder and then fail its checks (an index opens as damaged), or be deleted with it by its next
    build. ``kind``: the kind of folder the output is, when it is one built whole."""
    for above in Path(os.path.abspath(path)).parents:
        built = built_kind(above) if above.is_dir() else None
        if built is not None and (kind, built) not in BUILT_INSIDE:
            raise OutputError(
                f"{path} is inside {above}, {_a(built)} wetqa built, and wetqa writes no other output into it: "
                "give another --out"
            )


def built_kind(folder: Path) -> str | None:
    """The kind of folder wetqa built whole that ``folder`` is (its list's header, or for an older wetqa's the
    marker it holds, when wetqa wrote that marker), else None."""
    try:
        with open(folder / OWNED, encoding="utf-8", errors="replace") as fh:
            header = json.loads(fh.readline())
    except (OSError, ValueError):
        header = None
    if isinstance(header, dict) and isinstance(header.get("built"), str):
        return header["built"]
    for marker, kind in BUILT_MARKERS.items():
        if (folder / marker).is_file() and wetqa_made(folder / marker):
            return kind
    return None


def _make_owned(path: Path) -> None:
    """Make a folder (and any missing parent) as wetqa's own, listed in its parent when that is wetqa's."""
    if not path.parent.exists():
        _make_owned(path.parent)
    above = owned_names(path.parent)
    if above is not None and path.name not in above:
        _note_owned(path.parent, [path.name])
    path.mkdir(exist_ok=True)
    if not (path / OWNED).exists():
        _note_owned(path, [])


def _ours(name: str, names: set[str]) -> bool:
    """A name on the list, the list itself, or a temporary sibling of a listed name (``.<name>.*.tmp*``)."""
    if name in names or name == OWNED:
        return True
    return name.startswith(".") and ".tmp" in name and any(name.startswith(f".{n}.") for n in names)


def _foreign(path: Path, names: set[str]) -> list[str]:
    return sorted(e.name for e in path.iterdir() if not _ours(e.name, names))


def _refuse_foreign(path: Path, foreign: list[str], advice: str) -> None:
    shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
    raise OutputError(f"{path} holds files wetqa did not write ({shown}); wetqa will not write into it: {advice}")


class OwnedFolder:
    """An output folder under the owned-folder rule; ``file(name)`` lists a file before it is written."""

    def __init__(self, path: Path, names: set[str]):
        self.path, self.names = path, names
        self._listing = threading.Lock()  # threads writing into one folder (a fetch's downloads) list one at a time

    def file(self, name: str) -> Path:
        with self._listing:
            if name not in self.names:
                _note_owned(self.path, [name])
                self.names.add(name)
        return self.path / name


def own_folder(
    path: str | os.PathLike, writes: Iterable[str] = (), adopt: Callable[[Path], set[str]] | None = None
) -> OwnedFolder:
    """The one rule for every folder a command writes files into, checked before anything is written.

    A folder that does not exist is made (with its missing parents) as wetqa's; an empty one becomes
    wetqa's; one wetqa made is written into while everything in it is what wetqa wrote. Anything else is
    refused, and so are the root and home folders themselves. ``adopt`` names what a folder of an older
    wetqa (without the list) holds of wetqa's, judged by the command's own records; ``writes`` are listed
    at once.
    """
    path = Path(path)
    if path.name in ("", ".", ".."):
        path = path.resolve()
    _refuse_special(path)
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OutputError(f"{path} is a file (or a link), not a folder; give a folder for the output")
    refuse_inside_built(path, None)
    if not path.exists():
        _make_owned(path)
    built = built_kind(path)
    if built is not None:
        raise OutputError(
            f"{path} is {_a(built)} wetqa built, and wetqa writes no other output into it: give another --out"
        )
    names = owned_names(path)
    if names is None:  # a folder without the list: empty, or an older wetqa's that the command recognises
        known = adopt(path) if adopt is not None else set()
        foreign = _foreign(path, known)
        if foreign:
            _refuse_foreign(path, foreign, "give a new or empty folder (--out)")
        names = {e.name for e in path.iterdir()}
        _note_owned(path, sorted(names))
    foreign = _foreign(path, names)
    if foreign:
        _refuse_foreign(path, foreign, "move them away, or give a new or empty folder (--out)")
    folder = OwnedFolder(path, names)
    for name in writes:
        folder.file(name)
    return folder


def recognised(
    marker: str, patterns: Iterable[str], made: Callable[[Path], bool] | None = None
) -> Callable[[Path], set[str]]:
    """An ``adopt`` for :func:`own_folder`: a folder of an older wetqa is known by its marker file (one
    wetqa wrote: ``made``, by default :func:`wetqa_made`), and then what matches ``patterns`` is wetqa's."""
    patterns = tuple(patterns)

    def adopt(path: Path) -> set[str]:
        if not (made or wetqa_made)(path / marker):
            return set()
        return {e.name for e in path.iterdir() if any(fnmatch.fnmatchcase(e.name, p) for p in patterns)}

    return adopt


def check_replaceable(path: str | os.PathLike, marker: str | None = None, kind: str = "folder") -> None:
    """Refuse now (OutputError) a folder :func:`atomic_dir` would refuse to replace: before long work for it."""
    _check_replaceable(Path(path), marker, kind)


def _check_replaceable(path: Path, marker: str | None, kind: str) -> None:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise OutputError(f"{path} is a file (or a link), not {_a(kind)} folder; wetqa replaces only folders it made")
    if not path.is_dir() or marker is None:
        return
    if not any(path.iterdir()):
        return
    names = owned_names(path)
    if names is not None:  # built by this wetqa: everything in it was, and nothing else may be
        foreign = _foreign(path, names)
        if foreign:
            _refuse_foreign(path, foreign, f"replacing {_a(kind)} would delete them; move them away")
        # And it is this kind of folder: an index never replaces a corpus, nor either the folder holding both.
        built = built_kind(path)
        held = [e.name for e in path.iterdir() if e.name != OWNED]
        if built is not None and built != kind:
            raise OutputError(
                f"{path} is {_a(built)} wetqa built, not {_a(kind)}: replacing it would delete it; choose another --out"
            )
        if built is None and held and not (path / marker).is_file():
            raise OutputError(
                f"{path} holds wetqa's files but is not {_a(kind)} (no {marker} in it): replacing it would delete "
                "them; choose another --out"
            )
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
    _refuse_special(path)
    _check_replaceable(path, marker, kind)
    refuse_inside_built(path, kind if marker else None)
    if not path.parent.exists():
        _make_owned(path.parent)
    above = owned_names(path.parent)
    if above is not None and path.name not in above:
        _note_owned(path.parent, [path.name])
    _remove_stale(path)
    with _named(path):
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        _note_owned(tmp, [], built=kind if marker else None)  # from the start: a killed build's leftover is wetqa's
        yield tmp
        _note_owned(tmp, sorted(e.name for e in tmp.iterdir() if e.name != OWNED))
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


def text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """A text file's lines, numbered from 1, each decoded as UTF-8 on its own (a leading BOM, an editor's
    "UTF-8 with BOM", skipped): a byte that is not UTF-8 is a ValueError naming its line and byte."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            if lineno == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            try:
                yield lineno, raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{path}:{lineno}: not UTF-8 text ({raw[exc.start]:#04x} at byte {exc.start + 1} of the line); "
                    "save it as UTF-8"
                ) from None


def read_jsonl(path: str | os.PathLike) -> Iterator[dict]:
    for lineno, line in text_lines(path):
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


def read_toml(path: str | os.PathLike, error: type[Exception] = ValueError) -> dict:
    """A TOML settings file as a dict, its TOML dates (``date = 2012-10-04``) as the ISO text a flag gives;
    a file that is missing, a folder, not UTF-8 or not TOML is one ``error`` naming it."""
    import tomllib

    path = Path(path)
    try:
        return _dates_as_text(tomllib.loads(path.read_text(encoding="utf-8-sig")))  # a BOM is not TOML
    except FileNotFoundError:
        raise error(f"config file not found: {path}") from None
    except IsADirectoryError:
        raise error(f"--config {path} is a folder: name a TOML file") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{path}: not valid TOML ({exc})") from None


def _dates_as_text(values: dict) -> dict:
    import datetime

    def text(v):
        if isinstance(v, dict):
            return _dates_as_text(v)
        return v.isoformat() if isinstance(v, datetime.date) else v

    return {k: text(v) for k, v in values.items()}
