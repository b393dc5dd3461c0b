"""Build a corpus folder: ``articles.jsonl``, ``chunks.jsonl`` and ``manifest.json``.

The folder is written atomically (built beside the target, then renamed), so
an interrupted build leaves the previous corpus intact. Bad files are listed
in the summary and the other laws are still built, unless ``strict``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import time
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from wetqa import __version__
from wetqa.io import FORMAT_KEY, atomic_dir, read_jsonl

from .bwb import BWBParseError, parse_law_bytes
from .chunking import ChunkingOptions, chunk_articles
from .filters import technical_title_word
from .records import Chunk, ParsedLaw, ParseFailure, printable

# Bumped when what a build writes changes (2: articles.jsonl carries each article's paragraphs), so
# that the corpus hash, and every index keyed by it, tells an old build from a new one.
CORPUS_FORMAT = 2
MANIFEST = "manifest.json"
ARTICLES = "articles.jsonl"
CHUNKS = "chunks.jsonl"


class CorpusBuildError(RuntimeError):
    pass


@dataclass(slots=True)
class BuildOptions:
    chunking: ChunkingOptions = field(default_factory=ChunkingOptions)
    exclude_technical: bool = False
    strict: bool = False
    workers: int = 0  # 0: one per core, at most 4; 1: in this process
    max_file_mb: int = 200  # a larger file is skipped: parsing it would take many times its size in memory

    def to_json(self) -> dict:
        return {
            "chunking": asdict(self.chunking),
            "exclude_technical": self.exclude_technical,
            "strict": self.strict,
        }


@dataclass(slots=True)
class BuildReport:
    out: str
    laws: int
    articles: int
    expired_articles: int
    chunks: int
    excluded: list[dict]
    failures: list[ParseFailure]
    seconds: float
    skipped: list[dict] = field(default_factory=list)  # links to nothing, FIFOs, folders named *.xml
    duplicates: list[dict] = field(default_factory=list)  # the same law version again: left out

    def to_json(self) -> dict:
        d = asdict(self)
        d["failures"] = [{"file": f.file, "problem": f.problem} for f in self.failures]
        return d


# ASCII digits only (\d takes any script's): a name in other digits is no generation of a version.
_GENERATION = re.compile(r"\A(BWBR[0-9]{7})_([0-9]{4}-[0-9]{2}-[0-9]{2})_([0-9]+)\.xml\Z")


def display_name(path: str | os.PathLike) -> str:
    """A file name that can be printed and written as UTF-8 (undecodable bytes and control characters
    shown as escapes: a name may hold a terminal's escape sequences or a newline)."""
    return printable(os.fsencode(Path(path).name).decode("utf-8", "backslashreplace"))


def scan_sources(sources: Iterable[str | os.PathLike]) -> tuple[list[Path], list[dict], list[dict]]:
    """(law files, skipped entries, older generations) of the sources, files sorted by name.

    Folders are read non-recursively. An entry named *.xml that is not a regular file (a link to
    nothing, a FIFO, a folder) is listed as skipped. Of several generations of one version
    (``{id}_{date}_{n}.xml``) only the newest is read; the others are listed as duplicates.
    """
    files: list[Path] = []
    skipped: list[dict] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            for q in sorted(p.iterdir()):
                if q.suffix.lower() != ".xml":
                    continue
                if q.is_symlink() and not q.exists():
                    skipped.append({"file": display_name(q), "reason": "a link to nothing"})
                elif q.is_dir():
                    skipped.append({"file": display_name(q), "reason": "a folder"})
                elif not q.is_file():
                    skipped.append({"file": display_name(q), "reason": "not a regular file"})
                else:
                    files.append(q)
        elif p.is_file():
            files.append(p)
        else:
            raise CorpusBuildError(f"source not found: {p}")
    if not files:
        raise CorpusBuildError("no .xml law files in the given sources: " + ", ".join(map(str, sources)))
    newest: dict[tuple[str, str], tuple[int, Path]] = {}
    for f in files:
        m = _GENERATION.match(f.name)
        if m:
            key, n = (m.group(1), m.group(2)), int(m.group(3))
            if key not in newest or n > newest[key][0]:
                newest[key] = (n, f)
    keep = {f for _, f in newest.values()}
    older = []
    for f in files:
        m = _GENERATION.match(f.name)
        if m and f not in keep:
            kept = newest[(m.group(1), m.group(2))][1]
            older.append({"file": f.name, "kept": kept.name, "reason": "an older generation of the same version"})
    files = [f for f in files if not (_GENERATION.match(f.name) and f not in keep)]
    # The published pipeline numbered chunks over the laws sorted by file name.
    return sorted(files, key=lambda q: (q.name, str(q))), skipped, older


def collect_sources(sources: Iterable[str | os.PathLike]) -> list[Path]:
    """The law files a build reads (see :func:`scan_sources`)."""
    return scan_sources(sources)[0]


def _parse_one(path: str, max_bytes: int = 200 << 20) -> tuple[str, str, ParsedLaw | ParseFailure]:
    try:
        os.fsencode(Path(path).name).decode("utf-8")
    except UnicodeDecodeError:  # bytes that are not UTF-8 in the name: ids and manifests cannot hold it
        return path, "", ParseFailure(display_name(path), "the file name is not valid UTF-8; rename the file")
    try:
        if Path(path).stat().st_size > max_bytes:
            return path, "", ParseFailure(path, f"larger than the {max_bytes >> 20} MB cap (--max-file-mb); skipped")
        data = Path(path).read_bytes()
    except OSError as exc:
        return path, "", ParseFailure(path, f"cannot read: {exc.strerror or exc}")
    digest = hashlib.sha256(data).hexdigest()
    try:
        return path, digest, parse_law_bytes(data, path)
    except BWBParseError as exc:
        return path, digest, ParseFailure(exc.file, exc.problem)
    except Exception as exc:  # noqa: BLE001 - a parser bug must not take the other laws down
        return path, digest, ParseFailure(path, f"unexpected {type(exc).__name__}: {exc}")


def download_records(files: Sequence[Path]) -> dict[str, dict]:
    """File name -> its record in the downloads.jsonl that `wetqa corpus download` keeps beside the files."""
    from .download import DOWNLOADS

    out: dict[str, dict] = {}
    for folder in {f.parent for f in files}:
        path = folder / DOWNLOADS
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn line of an interrupted download
                if isinstance(rec, dict) and "file" in rec:
                    out[rec["file"]] = {
                        k: rec.get(k)
                        for k in (
                            "generation",
                            "valid_from",
                            "valid_until",
                            "visible_from",
                            "visible_until",
                            "url",
                            "sha256",
                        )
                    }
    return out


def _parse_group(paths: list[str], max_bytes: int) -> list[tuple[str, str, ParsedLaw | ParseFailure]]:
    return [_parse_one(p, max_bytes) for p in paths]


def _die_with_parent(parent: int) -> None:
    # A pool worker must not outlive a build killed outright (SIGKILL runs no clean-up): Linux
    # sends it SIGTERM when its parent dies. Elsewhere the pool's own shutdown still applies.
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def parse_many(files: Sequence[Path], workers: int = 0, progress: bool = True, max_bytes: int = 200 << 20):
    """Yield (path, sha256, ParsedLaw | ParseFailure) in the order of ``files``."""
    if workers == 0:
        workers = min(4, os.cpu_count() or 1)
    names = [str(f) for f in files]
    bar = tqdm(total=len(names), unit="law", desc="parsing", disable=not progress, leave=False)
    try:
        if workers <= 1 or len(names) < 8:
            for name in names:
                yield _parse_one(name, max_bytes)
                bar.update()
        else:
            with ProcessPoolExecutor(
                max_workers=workers, initializer=_die_with_parent, initargs=(os.getpid(),)
            ) as pool:
                # A bounded window of laws in flight: parsed laws wait in memory only until they are
                # written, so memory stays flat however many files a corpus has (tens of thousands).
                # Files go in groups of 4 (fewer round trips to the workers, as map's chunksize did).
                window = 4 * workers
                groups = (names[i : i + 4] for i in range(0, len(names), 4))
                pending: deque = deque(
                    pool.submit(_parse_group, g, max_bytes) for g in itertools.islice(groups, window)
                )
                while pending:
                    items = pending.popleft().result()
                    nxt = next(groups, None)
                    if nxt is not None:
                        pending.append(pool.submit(_parse_group, nxt, max_bytes))
                    for item in items:
                        yield item
                        bar.update()
    finally:
        bar.close()


def build_corpus(
    sources: Iterable[str | os.PathLike],
    out: str | os.PathLike,
    options: BuildOptions | None = None,
    progress: bool = True,
) -> BuildReport:
    options = options or BuildOptions()
    t0 = time.perf_counter()
    files, skipped, duplicates = scan_sources(sources)
    provenance = download_records(files)
    failures: list[ParseFailure] = []
    excluded: list[dict] = []
    source_rows: list[dict] = []
    digests: dict[str, str] = {}  # every file read, built or not: what a rebuild would read again
    n_laws = n_articles = n_expired = n_chunks = 0
    out = Path(out)
    with atomic_dir(out, marker=MANIFEST, kind="corpus") as tmp:
        with open(tmp / ARTICLES, "w", encoding="utf-8") as fa, open(tmp / CHUNKS, "w", encoding="utf-8") as fc:
            built: dict[tuple[str, str], str] = {}
            for path, digest, result in parse_many(files, options.workers, progress, options.max_file_mb << 20):
                if digest:
                    digests[Path(path).name] = digest
                if isinstance(result, ParseFailure):
                    failures.append(result)
                    if options.strict:
                        raise CorpusBuildError(f"--strict: {result}")
                    continue
                law = result.law
                key = (law.bwb_id, law.version_date)
                if key in built:  # the same version again (a copy under another name): ids would repeat
                    duplicates.append(
                        {"file": Path(path).name, "kept": built[key], "reason": "the same law version as another file"}
                    )
                    continue
                built[key] = Path(path).name
                if options.exclude_technical and (word := technical_title_word(law.title)):
                    excluded.append({"file": Path(path).name, "bwb_id": law.bwb_id, "title": law.title, "word": word})
                    continue
                n_laws += 1
                n_articles += len(result.articles)
                for article in result.articles:
                    n_expired += article.expired
                    fa.write(json.dumps(article.to_json(), ensure_ascii=False) + "\n")
                first = n_chunks + 1
                for chunk in chunk_articles(result.articles, options.chunking, start=first):
                    fc.write(json.dumps(chunk.to_json(), ensure_ascii=False) + "\n")
                    n_chunks += 1
                source_rows.append(
                    {
                        "file": Path(path).name,
                        "sha256": digest,
                        "bwb_id": law.bwb_id,
                        "version_date": law.version_date,
                        "title": law.title,
                        "kind": law.kind,
                        "format": law.source_format,
                        "articles": len(result.articles),
                        "chunks": n_chunks - first + 1,
                        # Where `wetqa corpus download` got it: generation, validity, visibility, URL.
                        **({"download": provenance[Path(path).name]} if Path(path).name in provenance else {}),
                    }
                )
        if n_laws == 0:
            raise CorpusBuildError("no law could be built; failures:\n" + "\n".join(f"  {f}" for f in failures))
        options_json = options.to_json()
        corpus_hash = hashlib.sha256(
            json.dumps(
                {"sources": [r["sha256"] for r in source_rows], "options": options_json, "format": CORPUS_FORMAT},
                sort_keys=True,
            ).encode()
        ).hexdigest()
        manifest = {
            FORMAT_KEY: f"corpus/{CORPUS_FORMAT}",
            "tool": "wetqa",
            "version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "corpus_hash": corpus_hash,
            "options": options_json,
            "counts": {"laws": n_laws, "articles": n_articles, "expired_articles": n_expired, "chunks": n_chunks},
            "sources": source_rows,
            "excluded": excluded,
            "failures": [{"file": f.file, "problem": f.problem} for f in failures],
            "source_sha256": digests,
            "skipped": skipped,
            "duplicates": duplicates,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return BuildReport(
        out=str(out),
        laws=n_laws,
        articles=n_articles,
        expired_articles=n_expired,
        chunks=n_chunks,
        excluded=excluded,
        failures=failures,
        seconds=time.perf_counter() - t0,
        skipped=skipped,
        duplicates=duplicates,
    )


def read_manifest(corpus_dir: str | os.PathLike) -> dict:
    path = Path(corpus_dir) / MANIFEST
    if not path.is_file():
        raise CorpusBuildError(
            f"{corpus_dir} is not a wetqa corpus (no {MANIFEST}); build it with `wetqa corpus build`"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def read_chunks(path: str | os.PathLike) -> list[Chunk]:
    """The chunks of a ``chunks.jsonl`` file (in a corpus or an index folder)."""
    return [Chunk.from_json(row) for row in read_jsonl(path)]


def load_chunks(corpus_dir: str | os.PathLike) -> list[Chunk]:
    read_manifest(corpus_dir)
    return read_chunks(Path(corpus_dir) / CHUNKS)


def load_articles(corpus_dir: str | os.PathLike) -> list[dict]:
    read_manifest(corpus_dir)
    return list(read_jsonl(Path(corpus_dir) / ARTICLES))
