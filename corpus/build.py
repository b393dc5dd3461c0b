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

from wetqa import __version__
from wetqa.console import progress_bar
from wetqa.io import FORMAT_KEY, atomic_dir, read_jsonl

from .chunking import ChunkingOptions, chunk_articles
from .filters import technical_title_word
from .records import FORMAL_KINDS, Chunk, DocumentError, ParsedLaw, ParseFailure, printable
from .sources import DEFAULT, Source, UnknownSource, document_metadata, get_source

# Bumped when what a build writes changes (2: articles.jsonl carries each article's paragraphs; 3: units
# outside articles, kind, jurisdiction and validity on each record, laws named by references; 4: records
# name their collection and document generically, ``collection`` and ``law_id``; 5: each regulation
# names the formal law it rests on, ``parent``; 6: records carry the collection's own name for the id,
# ``bwb_id``, beside ``law_id`` again), so that the corpus hash, and every index keyed by it, tells an old
# build from a new one.
CORPUS_FORMAT = 6
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
    # The date on which files that state no version date (the 2012 snapshot) hold the text in force.
    valid_on: str = ""
    collection: str = DEFAULT  # the source that reads the files (corpus.sources): "bwb"

    def to_json(self) -> dict:
        return {
            "collection": self.collection,
            "chunking": asdict(self.chunking),
            "exclude_technical": self.exclude_technical,
            "strict": self.strict,
            "valid_on": self.valid_on,
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
    undated: list[dict] = field(default_factory=list)  # files that state no version date

    def to_json(self) -> dict:
        d = asdict(self)
        d["failures"] = [{"file": f.file, "problem": f.problem} for f in self.failures]
        return d


def display_name(path: str | os.PathLike) -> str:
    """A file name that can be printed and written as UTF-8 (undecodable bytes and control characters
    shown as escapes: a name may hold a terminal's escape sequences or a newline)."""
    return printable(os.fsencode(Path(path).name).decode("utf-8", "backslashreplace"))


def scan_sources(
    sources: Iterable[str | os.PathLike], source: Source | None = None
) -> tuple[list[Path], list[dict], list[dict]]:
    """(law files, skipped entries, older generations) of the sources, files sorted by name.

    Folders are read non-recursively, for the files the source reads (``*.xml`` for the BWB). An entry
    so named that is not a regular file (a link to nothing, a FIFO, a folder) is listed as skipped. Of
    several generations of one version (``{id}_{date}_{n}.xml``) only the newest is read; the others are
    listed as duplicates.
    """
    source = source or get_source(DEFAULT)
    sources = list(sources)
    suffixes = {s.lower() for s in source.suffixes}
    files: list[Path] = []
    skipped: list[dict] = []
    for src in sources:
        p = Path(src)
        if p.is_dir():
            for q in sorted(p.iterdir()):
                if q.suffix.lower() not in suffixes:
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
        kinds = "/".join(source.suffixes)
        raise CorpusBuildError(f"no {kinds} law files in the given sources: " + ", ".join(map(str, sources)))
    # Of the files whose names state a generation: (id, version date) -> the newest one's file.
    generation: dict[Path, tuple[tuple[str, str], int]] = {}
    for f in files:
        v = source.file_version(f.name)
        if v is not None and v.generation is not None:
            generation[f] = ((v.law_id, v.version_date), v.generation)
    newest: dict[tuple[str, str], Path] = {}
    for f, (key, n) in generation.items():
        if key not in newest or n > generation[newest[key]][1]:
            newest[key] = f
    dropped = [f for f, (key, _) in generation.items() if newest[key] != f]
    older = [
        {"file": f.name, "kept": newest[generation[f][0]].name, "reason": "an older generation of the same version"}
        for f in dropped
    ]
    gone = set(dropped)
    files = [f for f in files if f not in gone]
    # The published pipeline numbered chunks over the laws sorted by file name.
    return sorted(files, key=lambda q: (q.name, str(q))), skipped, older


def collect_sources(sources: Iterable[str | os.PathLike], source: Source | None = None) -> list[Path]:
    """The law files a build reads (see :func:`scan_sources`)."""
    return scan_sources(sources, source)[0]


def _parse_one(
    path: str, max_bytes: int = 200 << 20, source: Source | None = None
) -> tuple[str, str, ParsedLaw | ParseFailure]:
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
        return path, digest, (source or get_source(DEFAULT)).parse(data, path)
    except DocumentError as exc:
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


def _parse_group(
    paths: list[str], max_bytes: int, source: Source | None
) -> list[tuple[str, str, ParsedLaw | ParseFailure]]:
    return [_parse_one(p, max_bytes, source) for p in paths]


def _die_with_parent(parent: int) -> None:
    # A pool worker must not outlive a build killed outright (SIGKILL runs no clean-up): Linux
    # sends it SIGTERM when its parent dies. Elsewhere the pool's own shutdown still applies.
    import signal

    # The parent's SIGTERM handler (wetqa.cli: stop as at Ctrl-C) is inherited by a forked worker; a worker
    # dies of SIGTERM at once, as by default, and not when its current C call returns.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def parse_many(
    files: Sequence[Path],
    workers: int = 0,
    progress: bool = True,
    max_bytes: int = 200 << 20,
    source: Source | None = None,
):
    """Yield (path, sha256, ParsedLaw | ParseFailure) in the order of ``files``, each read by ``source``
    (default: the BWB). The workers are handed the source itself: one registered at run time (by a test,
    a notebook) is in no worker's registry when workers are spawned rather than forked."""
    if workers == 0:
        workers = min(4, os.cpu_count() or 1)
    names = [str(f) for f in files]
    bar = progress_bar(total=len(names), progress=progress, unit="law", desc="parsing", leave=False)
    try:
        if workers <= 1 or len(names) < 8:
            for name in names:
                yield _parse_one(name, max_bytes, source)
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
                    pool.submit(_parse_group, g, max_bytes, source) for g in itertools.islice(groups, window)
                )
                while pending:
                    items = pending.popleft().result()
                    nxt = next(groups, None)
                    if nxt is not None:
                        pending.append(pool.submit(_parse_group, nxt, max_bytes, source))
                    for item in items:
                        yield item
                        bar.update()
    finally:
        bar.close()


def dated_versions(files: Sequence[Path], source: Source | None = None) -> dict[str, list[tuple[str, str]]]:
    """Each id's dated files, from their names: id -> [(version date, file name)], by date."""
    source = source or get_source(DEFAULT)
    out: dict[str, list[tuple[str, str]]] = {}
    for f in files:
        v = source.file_version(f.name)
        if v is not None and v.version_date:
            out.setdefault(v.law_id, []).append((v.version_date, f.name))
    return {k: sorted(v) for k, v in out.items()}


def same_dated_version(dated: list[tuple[str, str]], valid_on: str) -> str | None:
    """The dated file that an undated one valid on ``valid_on`` is the same version as: the last version
    that starts on or before that day (None when every dated version starts after it: the undated text is
    an older version)."""
    before = [name for day, name in dated if day <= valid_on]
    return before[-1] if before else None


class _Writer:
    """Writes the laws of a build into articles.jsonl and chunks.jsonl and keeps the manifest's rows."""

    def __init__(self, tmp: Path, options: BuildOptions, provenance: dict[str, dict]):
        self.options, self.provenance = options, provenance
        self.fa = open(tmp / ARTICLES, "w", encoding="utf-8")
        self.fc = open(tmp / CHUNKS, "w", encoding="utf-8")
        self.laws = self.articles = self.expired = self.chunks = 0
        self.rows: list[dict] = []

    def close(self) -> None:
        self.fa.close()
        self.fc.close()

    def add(self, path: str, digest: str, parsed: ParsedLaw) -> ParseFailure | None:
        """Write one law; a law that yields no chunk is a failure (listed), never a silent success."""
        law = parsed.law
        law.collection = self.options.collection  # records name the collection they come from
        for article in parsed.articles:
            article.collection = law.collection
        first = self.chunks + 1
        chunks = list(chunk_articles(parsed.articles, self.options.chunking, start=first))
        if not chunks:
            why = "every article has expired" if parsed.articles else "no article or text in it"
            return ParseFailure(display_name(path), f"no chunk: {why}")
        self.laws += 1
        self.articles += len(parsed.articles)
        # The collection's own name for the id beside law_id (bwb_id): scripts that read the files by it work on.
        id_names = document_metadata(law.collection, law.law_id)
        for article in parsed.articles:
            self.expired += article.expired
            self.fa.write(json.dumps(article.to_json(id_names), ensure_ascii=False) + "\n")
        for chunk in chunks:
            self.fc.write(json.dumps(chunk.to_json(id_names), ensure_ascii=False) + "\n")
        self.chunks += len(chunks)
        name = Path(path).name
        self.rows.append(
            {
                "file": name,
                "sha256": digest,
                "collection": law.collection,
                "law_id": law.law_id,
                "version_date": law.version_date,
                "valid_until": "",
                "title": law.title,
                "titled": law.titled,
                "long_title": law.long_title,
                "kind": law.kind,
                "jurisdiction": law.jurisdiction,
                "format": law.source_format,
                "articles": len(parsed.articles),
                "chunks": len(chunks),
                # Where `wetqa corpus download` got it: generation, validity, visibility, URL.
                **({"download": self.provenance[name]} if name in self.provenance else {}),
            }
        )
        return None


def _date_undated(parsed: ParsedLaw, path: str, options: BuildOptions, report: dict) -> None:
    """A file that states no version date holds the text in force on ``--valid-on``: that is its date."""
    if parsed.law.version_date:
        return
    entry = {"file": display_name(path), "law_id": parsed.law.law_id}
    if options.valid_on:
        parsed.law.version_date = options.valid_on
        for article in parsed.articles:
            article.version_date = options.valid_on
        entry["valid_on"] = options.valid_on
    report["undated"].append(entry)


def valid_until(rows: list[dict]) -> dict[tuple[str, str], str]:
    """Each version's end: the date the next version of the same law starts (absent: still current)."""
    versions: dict[str, set[str]] = {}
    for r in rows:
        versions.setdefault(r["law_id"], set()).add(r["version_date"])
    until: dict[tuple[str, str], str] = {}
    for law_id, days in versions.items():
        ordered = sorted(days)
        until.update(((law_id, a), b) for a, b in zip(ordered, ordered[1:]) if a)
    return until


# A name other regulations give one that states no short title must be given this often, by this many
# different regulations, to become its title ("Wetboek van Strafrecht" for "Wet van 3 maart 1881").
MIN_NAME_USES = 3
MIN_NAME_CITERS = 2


# A long title that names no subject: "Wet van 3 maart 1881", "Besluit van 10 september 1936, tot ...",
# "Wet van den 18den April 1827, op ...": the dated form old regulations were enacted under. A long title
# this long is not a name either ("Wet van 2 juli 1959, houdende regelen, welke aan een aantal ...").
_DATED_TITLE = re.compile(r"^\S+(?:\s+\S+)?\s+van\s+(?:den\s+)?[0-9]", re.IGNORECASE)
MAX_NAME_LENGTH = 100


def nameless(title: str) -> bool:
    """Whether a regulation's title is no name a person would use (a dated or overlong long title)."""
    return bool(_DATED_TITLE.match(title)) or len(title) > MAX_NAME_LENGTH


# A regulation rests on the formal law it refers to most, if it refers to it at least this often (one
# mention is any regulation's passing reference).
MIN_PARENT_REFERENCES = 2


class ReferenceNames:
    """How the corpus names each regulation in its references: id -> name -> (uses, citing regulations);
    and how often each regulation refers to each other one (named or not)."""

    def __init__(self) -> None:
        self.uses: dict[str, dict[str, int]] = {}
        self.citers: dict[str, dict[str, set[str]]] = {}
        self.cites: dict[str, dict[str, int]] = {}

    def add_cites(self, citing: str, cites: dict[str, int]) -> None:
        """A version's references by target; of several versions of one regulation, each target's most."""
        known = self.cites.setdefault(citing, {})
        for target, n in cites.items():
            known[target] = max(known.get(target, 0), n)

    def parent(self, law_id: str, formal: set[str]) -> str:
        """The formal law a regulation rests on: of the ``formal`` ones, the one it refers to most (at least
        MIN_PARENT_REFERENCES times; ties by id), or ""."""
        counts = [(n, t) for t, n in self.cites.get(law_id, {}).items() if t in formal and n >= MIN_PARENT_REFERENCES]
        return min(counts, key=lambda x: (-x[0], x[1]))[1] if counts else ""

    def add(self, citing: str, references: Iterable[tuple[str, str]]) -> None:
        for target, name in references:
            self.uses.setdefault(target, {}).setdefault(name, 0)
            self.uses[target][name] += 1
            self.citers.setdefault(target, {}).setdefault(name, set()).add(citing)

    def cited_by(self, law_id: str) -> int:
        """How many other regulations refer to this one (by any name): how central it is to the law."""
        return len(set().union(*self.citers.get(law_id, {}).values()))

    def names(self, law_id: str, top: int = 3) -> list[str]:
        """The names used often enough by enough regulations, most used first."""
        uses, citers = self.uses.get(law_id, {}), self.citers.get(law_id, {})
        ok = [n for n, u in uses.items() if u >= MIN_NAME_USES and len(citers[n]) >= MIN_NAME_CITERS]
        return sorted(ok, key=lambda n: (-uses[n], n))[:top]


def finish_records(folder: Path, rows: list[dict], names: ReferenceNames) -> None:
    """What is known only once every law is read: each version's end (``valid_until``), and the title of a
    regulation that states no short title, from how the others refer to it. Written into the manifest rows,
    and into the records of the laws concerned (only their lines are decoded again)."""
    until = valid_until(rows)
    titles: dict[str, str] = {}
    formal = {r["law_id"] for r in rows if r.get("kind") in FORMAL_KINDS}
    for r in rows:
        r["valid_until"] = until.get((r["law_id"], r["version_date"]), "")
        r["names"] = names.names(r["law_id"])
        r["cited_by"] = names.cited_by(r["law_id"])
        r["parent"] = "" if r["law_id"] in formal else names.parent(r["law_id"], formal)
        if not r.pop("titled") and r["names"] and nameless(r["title"]):
            titles[r["law_id"]] = r["title"] = r["names"][0]
    changed = {i for i, _ in until} | set(titles)
    if not changed:
        return

    def fix(record: dict) -> None:
        if record["law_id"] in titles:
            record["law"] = titles[record["law_id"]]
        end = until.get((record["law_id"], record["version_date"]))
        if end and "valid_until" in record:
            record["valid_until"] = end

    for name in (ARTICLES, CHUNKS):
        _rewrite(folder / name, changed, fix)


def _rewrite(path: Path, ids: set[str], fix) -> None:
    tmp = path.with_suffix(".tmp")
    with open(path, encoding="utf-8") as src, open(tmp, "w", encoding="utf-8") as dst:
        for line in src:
            at = line.find('"law_id": "') + 11
            if line[at : line.find('"', at)] in ids:
                record = json.loads(line)
                fix(record)
                line = json.dumps(record, ensure_ascii=False) + "\n"
            dst.write(line)
    tmp.replace(path)


def build_corpus(
    sources: Iterable[str | os.PathLike],
    out: str | os.PathLike,
    options: BuildOptions | None = None,
    progress: bool = True,
) -> BuildReport:
    options = options or BuildOptions()
    t0 = time.perf_counter()
    try:
        source = get_source(options.collection)
    except UnknownSource as exc:
        raise CorpusBuildError(str(exc)) from None
    files, skipped, duplicates = scan_sources(sources, source)
    dated = dated_versions(files, source)
    failures: list[ParseFailure] = []
    excluded: list[dict] = []
    listed: dict = {"undated": []}
    names = ReferenceNames()
    digests: dict[str, str] = {}  # every file read, built or not: what a rebuild would read again
    out = Path(out)
    with atomic_dir(out, marker=MANIFEST, kind="corpus") as tmp:
        writer = _Writer(tmp, options, download_records(files))
        try:
            built: dict[tuple[str, str], str] = {}
            for path, digest, result in parse_many(files, options.workers, progress, options.max_file_mb << 20, source):
                if digest:
                    digests[Path(path).name] = digest
                if isinstance(result, ParsedLaw):
                    names.add(result.law.law_id, result.references)
                    _date_undated(result, path, options, listed)
                    result = _place(result, path, source, dated, built, duplicates, excluded, options)
                    if result is None:
                        continue
                    names.add_cites(result.law.law_id, result.cites)  # of the versions built only
                    result = writer.add(path, digest, result) or result
                if isinstance(result, ParseFailure):
                    failures.append(result)
                    if options.strict:
                        raise CorpusBuildError(f"--strict: {result}")
        finally:
            writer.close()
        if writer.laws == 0:
            raise CorpusBuildError("no law could be built; failures:\n" + "\n".join(f"  {f}" for f in failures))
        finish_records(tmp, writer.rows, names)
        options_json = options.to_json()
        corpus_hash = hashlib.sha256(
            json.dumps(
                {"sources": [r["sha256"] for r in writer.rows], "options": options_json, "format": CORPUS_FORMAT},
                sort_keys=True,
            ).encode()
        ).hexdigest()
        counts = {"laws": writer.laws, "articles": writer.articles, "expired_articles": writer.expired}
        manifest = {
            FORMAT_KEY: f"corpus/{CORPUS_FORMAT}",
            "tool": "wetqa",
            "version": __version__,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "corpus_hash": corpus_hash,
            "options": options_json,
            "counts": {**counts, "chunks": writer.chunks},
            "holds": corpus_summary(writer.rows),
            "sources": writer.rows,
            "excluded": excluded,
            "failures": [{"file": f.file, "problem": f.problem} for f in failures],
            "source_sha256": digests,
            "skipped": skipped,
            "duplicates": duplicates,
            "undated": listed["undated"],
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return BuildReport(
        out=str(out),
        laws=writer.laws,
        articles=writer.articles,
        expired_articles=writer.expired,
        chunks=writer.chunks,
        excluded=excluded,
        failures=failures,
        seconds=time.perf_counter() - t0,
        skipped=skipped,
        duplicates=duplicates,
        undated=listed["undated"],
    )


def _place(
    parsed: ParsedLaw,
    path: str,
    source: Source,
    dated: dict[str, list[tuple[str, str]]],
    built: dict[tuple[str, str], str],
    duplicates: list[dict],
    excluded: list[dict],
    options: BuildOptions,
) -> ParsedLaw | None:
    """The law to build, or None when it is a duplicate of another file's version or excluded."""
    law, name = parsed.law, Path(path).name
    named = source.file_version(name)
    if named is not None and not named.version_date and options.valid_on:
        same = same_dated_version(dated.get(law.law_id, []), options.valid_on)
        if same is not None:
            duplicates.append(
                {
                    "file": name,
                    "kept": same,
                    "reason": f"the same version as a dated file (in force on --valid-on {options.valid_on})",
                }
            )
            return None
    key = (law.law_id, law.version_date)
    if key in built:  # the same version again (a copy under another name): ids would repeat
        duplicates.append({"file": name, "kept": built[key], "reason": "the same law version as another file"})
        return None
    built[key] = name
    if options.exclude_technical and (word := technical_title_word(law.title)):
        excluded.append({"file": name, "law_id": law.law_id, "title": law.title, "word": word})
        return None
    return parsed


def corpus_summary(rows: list[dict]) -> dict:
    """What a corpus holds, in the words a user needs: laws by kind and jurisdiction, versions, dates."""
    from collections import Counter

    dates = sorted(r["version_date"] for r in rows if r["version_date"])
    return {
        "laws": len({r["law_id"] for r in rows}),
        "versions": len(rows),
        "kinds": dict(Counter(r["kind"] or "?" for r in rows).most_common()),
        "jurisdictions": dict(Counter(r["jurisdiction"] for r in rows).most_common()),
        "oldest_version": dates[0] if dates else "",
        "newest_version": dates[-1] if dates else "",
    }


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
