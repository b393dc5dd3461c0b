"""A content check of every file of an index: a SHA-256 recorded at build, verified cheaply at open.

A file changed in place (same size, other bytes: random values over a map, an edited chunk text in the
store, shuffled postings) gave confident wrong answers, so sizes are not enough. ``index.json`` lists
every file of the folder with its size and SHA-256, and opening an index checks

- that every listed file is there, at its size, and that every file the build wrote is listed (an empty
  or edited list turns nothing off: a file it leaves out that wetqa wrote, by the folder's list of what
  wetqa wrote there, is refused);
- the content of every small file (up to ``HASH_AT_OPEN`` bytes: metadata, the article maps, term
  maxima), hashed at every open;
- the content of every larger file (the impact arrays, the store), hashed at the first open after it
  changed: a file whose inode, size, modification and change times match a verification recorded in
  ``$WETQA_CACHE/verified`` is not hashed again. Writing a file changes its change time (which no
  user can set back), so an edit is always caught; a copied index is hashed once, where it is.

Files neither listed nor written by the build (a user's ``NOTES.txt``, a tool's ``.ok``) are never read
by the index, so they are ignored: opening it says so in one warning, ``--verify`` names them.

What this protects against: accidents, partial writes, a file changed in place. What it does not: a
writer who can rewrite the folder can rewrite ``index.json`` with it (the hashes are not keyed).

``wetqa index --verify`` hashes every file. Costs on the 272-law index are in the README.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from wetqa.io import OWNED, owned_names

from .._base import DamagedIndex, RetrievalError

HASH_AT_OPEN = 1 << 20  # bytes: files up to this size are hashed at every open
_NOT_LISTED = {"index.json", OWNED}  # the list itself, and the list of what wetqa wrote (the owned-folder rule)


def _files(folder: Path) -> list[str]:
    """Every regular file under an index folder (relative, '/'-separated), the lists themselves aside."""
    out = []
    for root, _dirs, names in os.walk(folder):
        for name in names:
            rel = (Path(root) / name).relative_to(folder).as_posix()
            if rel not in _NOT_LISTED:
                out.append(rel)
    return sorted(out)


def _unlisted(folder: Path, listed: dict, present: list[str]) -> list[str]:
    """The files of the folder its list leaves out that the index never reads (sorted); a left-out file the
    build wrote (its top folder or name on the folder's list of what wetqa wrote) is damage."""
    unknown = [n for n in present if n not in listed]
    built = owned_names(folder) or set()
    dropped = [n for n in unknown if n.split("/")[0] in built]
    if dropped:
        raise DamagedIndex(folder, f"{dropped[0]} was written by its build but index.json does not list it")
    return unknown


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def file_digests(folder: Path) -> dict[str, dict]:
    """``{name: {"bytes", "sha256"}}`` of every file of a freshly built index folder."""
    return {
        name: {"bytes": (folder / name).stat().st_size, "sha256": _sha256(folder / name)} for name in _files(folder)
    }


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _record_path(folder: Path) -> Path:
    from wetqa.home import cache_root

    key = hashlib.sha1(str(folder.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return cache_root() / "verified" / f"{key}.json"


def _read_record(folder: Path) -> dict:
    try:
        record = json.loads(_record_path(folder).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def remember(folder: Path, files: dict) -> None:
    """Record the files as verified as they are now (a cache: when it cannot be written, files are hashed again)."""
    from wetqa.io import write_json

    record = {}
    for name, entry in files.items():
        try:
            record[name] = [entry["sha256"], *_stamp((folder / name).stat())]
        except OSError:
            continue
    try:
        write_json(_record_path(folder), record)
    except OSError:
        pass


def _listed(folder: Path, files: object) -> dict[str, dict]:
    if not isinstance(files, dict) or not files:
        raise DamagedIndex(folder, "index.json lists no files with their content hashes")
    for name, entry in files.items():
        ok = isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and isinstance(entry.get("sha256"), str)
        if not ok:
            raise DamagedIndex(folder, f"index.json lists {name} without its size and content hash")
    return files  # type: ignore[return-value]


def verify_index_files(folder: Path, files: object, everything: bool = False) -> dict:
    """Check an index folder against its file list (see the module); ``everything``: hash every file.

    Returns what was done: files checked, files and bytes hashed, and the files ignored (neither listed nor
    written by the build). DamagedIndex names the first problem.
    """
    listed = _listed(folder, files)
    ignored = _unlisted(folder, listed, _files(folder))
    record = {} if everything else _read_record(folder)
    hashed = hashed_bytes = 0
    verified: dict[str, dict] = {}
    for name, entry in sorted(listed.items()):
        path = folder / name
        try:
            st = path.stat()
        except FileNotFoundError:
            raise DamagedIndex(folder, f"{name} is missing") from None
        except PermissionError as exc:
            raise unreadable(folder, name, exc) from None
        if st.st_size != entry["bytes"]:
            raise DamagedIndex(folder, f"{name} is {st.st_size} bytes, index.json says {entry['bytes']} bytes")
        try:
            if st.st_size > HASH_AT_OPEN and record.get(name) == [entry["sha256"], *_stamp(st)]:
                open(path, "rb").close()  # verified before and not written since; readable by this user?
                continue
            digest = _sha256(path)
        except PermissionError as exc:
            raise unreadable(folder, name, exc) from None
        hashed, hashed_bytes = hashed + 1, hashed_bytes + st.st_size
        if digest != entry["sha256"]:
            raise DamagedIndex(folder, f"{name} does not hold what was built (its content hash differs)")
        verified[name] = entry
    if any(listed[n]["bytes"] > HASH_AT_OPEN for n in verified):
        remember(folder, listed)
    return {"files": len(listed), "hashed": hashed, "hashed_bytes": hashed_bytes, "ignored": ignored}


def shown(names: list[str], most: int = 3) -> str:
    """A few names and how many more: one line however many files a folder holds."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def unreadable(folder: Path, name: str, exc: OSError) -> RetrievalError:
    """A file this user may not read: not damage, and rebuilding would not help."""
    return RetrievalError(
        f"cannot read {folder / name}: {exc.strerror or 'permission denied'}; "
        "give this user read access to the index folder"
    )
