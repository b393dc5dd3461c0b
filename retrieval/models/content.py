"""What a model folder holds, by content: the SHA-256 of every file its vectors come from, hashed once per change.

A model's vector cache is keyed by this (:func:`wetqa.retrieval.models.vectors.cache_for`): vectors a damaged
model wrote are never served to the repaired one, nor a repaired model's to a damaged one, whatever the folder's
path. Hashing an export (1.5 GB for EmbeddingGemma) costs seconds, so each file's digest is recorded with its
inode, size, modification and change times under ``$WETQA_CACHE/verified`` and hashed again only when one of
them moved (writing a file changes its change time, which no user can set back): a load reads a few stats.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

# wetqa's own notes about the folder (what made it, which files it wrote): not what vectors come from. Every
# other file counts (a vocabulary is a .txt; a model card costs a few kilobytes of hashing, once).
_NOT_CONTENT_NAMES = {"wetqa-made.json"}


def _files(folder: Path) -> list[str]:
    out = []
    for root, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith(".") or name in _NOT_CONTENT_NAMES:
                continue
            out.append((Path(root) / name).relative_to(folder).as_posix())
    return sorted(out)


def _record_path(folder: Path) -> Path:
    from wetqa.home import cache_root

    key = hashlib.sha1(str(folder.resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:20]
    return cache_root() / "verified" / f"model-{key}.json"


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def file_digests(folder: Path) -> dict[str, str]:
    """``{name: sha256}`` of every content file of a model folder (hashed only where it changed since)."""
    folder = Path(folder)
    record_path = _record_path(folder)
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
        record = record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        record = {}
    out: dict[str, str] = {}
    fresh: dict[str, list] = {}
    for name in _files(folder):
        try:
            st = (folder / name).stat()
        except FileNotFoundError:  # removed since the walk (another process replacing the folder)
            continue
        known = record.get(name)
        if isinstance(known, list) and known[1:] == _stamp(st):
            out[name] = known[0]
        else:
            with open(folder / name, "rb") as fh:
                out[name] = hashlib.file_digest(fh, "sha256").hexdigest()
        fresh[name] = [out[name], *_stamp(st)]
    if fresh != record:
        from wetqa.io import write_json

        try:
            write_json(record_path, fresh)
        except OSError:
            pass  # a cache: without it, the files are hashed again next time
    return out


def content_identity(model: str) -> str | None:
    """A model folder's content (its files' digests, hashed together), or None for a model that is not a folder
    here (a hub id: the hub's cache is keyed by its commit)."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    digests = file_digests(path)
    return hashlib.sha256(json.dumps(sorted(digests.items())).encode()).hexdigest()[:32]
