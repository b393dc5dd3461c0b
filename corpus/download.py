"""Fetch official BWB XML: exactly the law version asked for, from the real services, at any scale.

Two public services (both overridable for tests and mirrors):

- the file repository, ``WETQA_BWB_REPOSITORY_URL`` (default
  ``https://repository.officiele-overheidspublicaties.nl/bwb``): ``/{id}/manifest.xml`` lists every
  version of a law as an ``expression`` labelled ``{date}_{n}`` with its validity
  (``datum_inwerkingtreding`` .. ``einddatum``) and visibility (``zichtdatum_start`` ..
  ``zichtdatum_eind``); the file is ``/{id}/{date}_{n}/xml/{id}_{date}_{n}.xml``;
- the SRU search service, ``WETQA_BWB_SRU_URL`` (default ``https://zoekservice.overheid.nl/sru/Search``,
  ``x-connection=BWB``): one record per version, paged (``numberOfRecords``, ``nextRecordPosition``),
  errors as an SRU ``<diagnostics>`` element in an HTTP 200 answer.

A version is chosen on both time axes: valid on the date asked for (default: today), and of the
generations of that validity (``_{n}``: corrections, not other versions) the newest visible one (the
one whose visibility is open). A date with no valid version is an error naming the versions there are.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import date as Date
from email.utils import parsedate_to_datetime
from importlib import resources
from pathlib import Path

from lxml import etree

from wetqa.console import progress_bar
from wetqa.io import OwnedFolder, atomic_file, own_folder

from .bwb import BWBParseError, parse_law_bytes

SRU_URL = "https://zoekservice.overheid.nl/sru/Search"
REPOSITORY_URL = "https://repository.officiele-overheidspublicaties.nl/bwb"
OPEN_END = "9999-12-31"
PAGE_SIZE = 100
MAX_PAGES = 2000  # 200,000 records: the whole BWB on every date is about 45,000
MAX_FILE_MB = 200  # the largest law files are tens of MB; a service that sends more is refused
DEADLINE = 600.0  # seconds a whole file may take, however steadily it trickles in
MAX_RETRY_AFTER = 120.0  # a service that asks to wait longer is not waited for
MAX_REDIRECTS = 5
USER_AGENT = "wetqa/0.1 (corpus download; +https://pypi.org/project/wetqa)"
# ASCII digits only: \d matches any script's digits (BWBR０００１８５４, BWBR١٢٣٤٥٦٧), which are no BWB ids and
# would become file names. \Z, not $: $ lets a trailing newline through.
_ID = re.compile(r"\ABWBR[0-9]{7}\Z")
_LABEL = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})_([0-9]+)")
_FULL_LABEL = re.compile(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}_[0-9]+\Z")
DOWNLOADS = "downloads.jsonl"  # in the output folder: what each file is, where it came from, its checksum


class DownloadError(RuntimeError):
    pass


class DownloadUnavailable(DownloadError):
    """The services could not be reached (after the retries): a missing component, exit 3."""


def sru_url() -> str:
    return os.environ.get("WETQA_BWB_SRU_URL") or SRU_URL


def repository_url() -> str:
    return (os.environ.get("WETQA_BWB_REPOSITORY_URL") or REPOSITORY_URL).rstrip("/")


@dataclass(frozen=True, slots=True)
class LawVersion:
    """One generation of one consolidated version (toestand) of a law."""

    bwb_id: str
    version_date: str  # start of validity, as in the label
    generation: int  # the _n of the label: a correction of the same version
    valid_from: str
    valid_until: str  # OPEN_END when open-ended
    visible_from: str = ""
    visible_until: str = OPEN_END
    url: str = ""
    problem: str = ""  # set for a record that cannot be used (an identifier that is not a BWB id, ...)

    @property
    def label(self) -> str:
        return f"{self.version_date}_{self.generation}"

    @property
    def file_name(self) -> str:
        return f"{self.bwb_id}_{self.label}.xml"

    def valid_on(self, day: str) -> bool:
        return self.valid_from <= day <= self.valid_until

    def to_json(self) -> dict:
        d = asdict(self)
        d.pop("problem")
        return d


def default_cache_dir() -> Path:
    from wetqa.home import cache_root

    return cache_root() / "bwb"


def reference_corpus() -> list[tuple[str, str]]:
    """The (bwb_id, version_date) pairs of the 273-law reference corpus."""
    text = resources.files("wetqa.corpus").joinpath("reference_corpus.tsv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines(), delimiter="\t"))
    return [(r["bwb_id"], r["version_date"]) for r in rows]


def file_url(bwb_id: str, label: str) -> str:
    return f"{repository_url()}/{bwb_id}/{label}/xml/{bwb_id}_{label}.xml"


# ------------------------------------------------------------------------------------------- choosing
def choose_version(versions: Sequence[LawVersion], day: str | None = None) -> LawVersion:
    """The version valid on ``day`` (default today); of its generations, the newest visible one."""
    if not versions:
        raise DownloadError("the BWB service lists no version of this law")
    bwb_id = versions[0].bwb_id
    day = day or Date.today().isoformat()
    valid = [v for v in versions if v.valid_on(day)]
    if not valid:
        windows = sorted({(v.valid_from, v.valid_until) for v in versions})
        listing = ", ".join(f"{a}..{'open' if b == OPEN_END else b}" for a, b in windows[-8:])
        more = f" (and {len(windows) - 8} earlier)" if len(windows) > 8 else ""
        raise DownloadError(f"no version of {bwb_id} is valid on {day}; versions: {listing}{more}")
    start = max(v.valid_from for v in valid)
    same = [v for v in valid if v.valid_from == start]
    # Visibility decides between generations: the open one is the current text; generation numbers
    # are compared as numbers (_10 is newer than _9).
    return max(same, key=lambda v: (v.visible_until >= OPEN_END, v.visible_until, v.generation))


# --------------------------------------------------------------------------------------------- HTTP
def _origin(url: str) -> tuple[str, str, int | None]:
    from urllib.parse import urlsplit

    u = urlsplit(url)
    return (u.scheme.lower(), (u.hostname or "").lower(), u.port)


class Client:
    """httpx with what the BWB services need, and no more trust in them than that.

    ``Accept: application/xml``; retries with back-off that honour Retry-After (up to
    ``MAX_RETRY_AFTER``); timeouts; at most ``concurrency`` requests under way at once. Only the
    configured services' hosts are fetched, redirects only within a host; each body is read as a
    stream, cut off at ``max_bytes`` and at ``deadline`` seconds however steadily it trickles.
    """

    def __init__(
        self,
        timeout: float = 30.0,
        retries: int = 4,
        concurrency: int = 4,
        backoff: float = 0.5,
        max_bytes: int = MAX_FILE_MB << 20,
        deadline: float = DEADLINE,
    ):
        import httpx

        self._httpx = httpx
        self.http = httpx.Client(
            timeout=timeout,
            follow_redirects=False,  # followed here, within the host only
            headers={"Accept": "application/xml, text/xml;q=0.9, */*;q=0.1", "User-Agent": USER_AGENT},
        )
        self.retries = retries
        self.backoff = backoff
        self.max_bytes = max_bytes
        self.deadline = deadline
        self._slots = threading.BoundedSemaphore(concurrency)

    def close(self) -> None:
        self.http.close()

    def _check_host(self, url: str) -> None:
        allowed = {_origin(repository_url()), _origin(sru_url())}
        if _origin(url) not in allowed:
            hosts = ", ".join(sorted({h for _, h, _ in allowed}))
            raise DownloadError(f"{url} is not one of the BWB services ({hosts}); not fetched")

    def _open(self, url: str):
        """The response of ``url``, redirects followed within its host."""
        for _ in range(MAX_REDIRECTS + 1):
            resp = self.http.send(self.http.build_request("GET", url), stream=True)
            if resp.status_code not in (301, 302, 303, 307, 308) or "location" not in resp.headers:
                return resp
            target = str(resp.url.join(resp.headers["location"]))
            resp.close()
            if _origin(target)[1:] != _origin(url)[1:]:
                raise DownloadError(f"{url}: a redirect to another host ({target}) is not followed")
            url = target
        raise DownloadError(f"{url}: more than {MAX_REDIRECTS} redirects")

    def _read(self, url: str, resp, sink) -> bytes:
        parts: list[bytes] = []
        size, t0 = 0, time.monotonic()
        for chunk in resp.iter_bytes():
            size += len(chunk)
            if size > self.max_bytes:
                raise DownloadError(
                    f"{url} is larger than the {self.max_bytes / 2**20:g} MB cap (--max-file-mb); not kept"
                )
            if time.monotonic() - t0 > self.deadline:
                raise DownloadError(f"{url} did not arrive within {self.deadline:g} s (--deadline); not kept")
            if sink is None:
                parts.append(chunk)
            else:
                sink(chunk)
        return b"".join(parts)

    def get(self, url: str, sink=None) -> bytes:
        """The body of ``url`` (or streamed into ``sink(chunk)``); DownloadError after the last retry."""
        self._check_host(url)
        last = ""
        for attempt in range(self.retries + 1):
            wait = self.backoff * 2**attempt
            try:
                with self._slots:
                    resp = self._open(url)
                    try:
                        if resp.status_code in (429, 502, 503, 504):
                            last = f"HTTP {resp.status_code}"
                            asked = _retry_after(resp.headers.get("Retry-After"))
                            if asked > MAX_RETRY_AFTER:
                                raise DownloadError(
                                    f"{url}: HTTP {resp.status_code}; the service asks to retry after {asked:g} s, "
                                    f"more than the {MAX_RETRY_AFTER:g} s wetqa waits; try again later"
                                )
                            wait = max(wait, asked)
                        elif resp.status_code >= 400:
                            raise DownloadError(f"{url}: HTTP {resp.status_code} {resp.reason_phrase}")
                        else:
                            return self._read(url, resp, sink)
                    finally:
                        resp.close()
            except self._httpx.TransportError as exc:  # refused, reset, timed out, cut off mid-body
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                if sink is not None:
                    sink(None)  # tell the sink to start over
            if attempt < self.retries:
                time.sleep(wait)
        host = self._httpx.URL(url).host or url
        raise DownloadUnavailable(
            f"cannot fetch from {host} after {self.retries + 1} attempts ({last}); are you offline? "
            "Point WETQA_BWB_DIR at a folder of law XML files instead"
        )


def _retry_after(value: str | None) -> float:
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        try:
            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
        except (TypeError, ValueError):
            return 0.0


def _xml(data: bytes, what: str) -> etree._Element:
    try:
        return etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False))
    except etree.XMLSyntaxError as exc:
        raise DownloadError(f"{what} is not XML: {exc}") from None


def _local(el) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


def _first(el, name: str) -> str:
    for x in el.iter():
        if _local(x) == name:
            return (x.text or "").strip()
    return ""


# ----------------------------------------------------------------------------------------- manifest
def parse_manifest(data: bytes, bwb_id: str) -> list[LawVersion]:
    """Every version with an XML file (items marked deleted are left out) from ``/{id}/manifest.xml``."""
    root = _xml(data, f"the manifest of {bwb_id}")
    out = []
    for expr in root.iter():
        if _local(expr) != "expression":
            continue
        m = _LABEL.fullmatch(expr.get("label") or "")
        if not m:
            continue
        xml = [x for x in expr if _local(x) == "manifestation" and x.get("label") == "xml"]
        items = [i for x in xml for i in x.iter() if _local(i) == "item" and i.get("_deleted", "false") != "true"]
        if not items:
            continue
        meta = next((x for x in expr if _local(x) == "metadata"), expr)
        out.append(
            LawVersion(
                bwb_id,
                m.group(1),
                int(m.group(2)),
                valid_from=_first(meta, "datum_inwerkingtreding") or m.group(1),
                valid_until=_first(meta, "einddatum") or OPEN_END,
                visible_from=_first(meta, "zichtdatum_start"),
                visible_until=_first(meta, "zichtdatum_eind") or OPEN_END,
                url=file_url(bwb_id, expr.get("label") or ""),
            )
        )
    return out


# ---------------------------------------------------------------------------------------------- SRU
def parse_sru(data: bytes) -> tuple[list[LawVersion], int, int | None]:
    """(versions, numberOfRecords, nextRecordPosition) of one SRU answer (1.2 or 2.0).

    Diagnostics are raised verbatim: the service answers errors with HTTP 200."""
    root = _xml(data, "the SRU answer")
    for diag in root.iter():
        if _local(diag) == "diagnostics":
            said = []
            for d in [x for x in diag.iter() if _local(x) == "diagnostic"] or [diag]:
                message = " ".join(_first(d, "message").split())
                details = " ".join(_first(d, "details").split())
                said.append(message + (f" ({details})" if details else ""))
            raise DownloadError("the BWB search service reports: " + "; ".join(s for s in said if s))
    raw_total = _first(root, "numberOfRecords") or "0"
    if not raw_total.isdigit():
        raise DownloadError(f"the SRU answer's numberOfRecords {raw_total!r} is not a number")
    total = int(raw_total)
    nxt = _first(root, "nextRecordPosition")
    versions = []
    for record in root.iter():
        if _local(record) != "record":
            continue
        location = _first(record, "locatie_toestand")
        bwb_id = _first(record, "identifier")
        m = _LABEL.search(location)
        problem = "" if _ID.match(bwb_id) else f"not a BWB id: {bwb_id[:80]!r} (from the search service); not fetched"
        if not (location and m) and not problem:
            # Listed, not skipped: a record the listing counts but wetqa cannot use is a failure to report.
            problem = f"a search record of {bwb_id} without a usable file location ({location[:80]!r}); not fetched"
        versions.append(
            LawVersion(
                bwb_id if not problem else bwb_id[:80],
                m.group(1) if m else "",
                int(m.group(2)) if m else 0,
                valid_from=_first(record, "geldigheidsperiode_startdatum") or (m.group(1) if m else ""),
                valid_until=_first(record, "geldigheidsperiode_einddatum") or OPEN_END,
                visible_from=_first(record, "zichtperiode_startdatum"),
                visible_until=_first(record, "zichtperiode_einddatum") or OPEN_END,
                url=location,
                problem=problem,
            )
        )
    return versions, total, int(nxt) if nxt.isdigit() else None


def search(client: Client, query: str, progress: bool = False) -> Iterator[LawVersion]:
    """Every record of an SRU query, page after page, following ``nextRecordPosition``.

    A service may send fewer records a page than ``maximumRecords`` asks (SRU allows it), so pages are
    not counted by the size asked for: paging ends when the announced ``numberOfRecords`` have arrived
    or the service names no next page. Each page must bring records and move forward, so paging is
    bounded by the announced total. A listing that ends short of what was announced is an error: a
    missing record may be the current version of a law, and choosing from the rest would fetch a
    superseded text without a word.
    """
    from urllib.parse import urlencode

    start: int | None = 1
    bar = None
    total, received = 0, 0
    try:
        while start:
            params = {
                "operation": "searchRetrieve",
                "version": "2.0",
                "x-connection": "BWB",
                "query": query,
                "startRecord": str(start),
                "maximumRecords": str(PAGE_SIZE),
            }
            versions, total, nxt = parse_sru(client.get(f"{sru_url()}?{urlencode(params)}"))
            if bar is None:
                if total > MAX_PAGES * PAGE_SIZE:
                    raise DownloadError(
                        f"the search service announces {total} records, more than wetqa pages through "
                        f"({MAX_PAGES * PAGE_SIZE}); narrow the query"
                    )
                bar = progress_bar(total=total, progress=progress, unit="record", desc="searching")
            if not versions and received < total:
                raise DownloadError(
                    f"the search service announced {total} records but sent "
                    + (f"only {received}" if received else "none")
                    + f" (an empty page at record {start}); try again later"
                )
            received += len(versions)
            bar.update(len(versions))
            yield from versions
            # Only a next page that moves forward, and only while announced records are missing.
            start = nxt if nxt and nxt > start and received < total else None
        if received < total:
            raise DownloadError(
                f"the search service announced {total} records but sent {received}; the listing is "
                "incomplete, so no version is chosen from it; try again later"
            )
    finally:
        if bar is not None:
            bar.close()


def versions_of(client: Client, bwb_id: str) -> list[LawVersion]:
    """All versions of a law: from its manifest, or (when that cannot be had) from the paged SRU records."""
    try:
        return parse_manifest(client.get(f"{repository_url()}/{bwb_id}/manifest.xml"), bwb_id)
    except DownloadError as manifest_error:
        try:
            return [v for v in search(client, f"dcterms.identifier=={bwb_id}") if v.bwb_id == bwb_id and not v.problem]
        except DownloadError as exc:
            # Both services unreachable: a missing component (exit 3), not a problem of this law.
            kind = (
                DownloadUnavailable
                if isinstance(manifest_error, DownloadUnavailable) and isinstance(exc, DownloadUnavailable)
                else DownloadError
            )
            raise kind(f"{bwb_id}: {manifest_error}; the search service: {exc}") from None


# --------------------------------------------------------------------------------------------- files
def _record(out: Path, version: LawVersion, sha256: str, size: int) -> None:
    with open(out / DOWNLOADS, "a", encoding="utf-8") as fh:
        fh.write(json.dumps({**version.to_json(), "file": version.file_name, "sha256": sha256, "size": size}) + "\n")


def download_folder(out_dir: str | os.PathLike | None) -> OwnedFolder:
    """The output folder under the owned-folder rule; a folder of an older wetqa is known by its
    downloads.jsonl (the files it records); wetqa's own cache folder is wetqa's whatever it holds."""
    if out_dir is None:
        return own_folder(default_cache_dir(), (DOWNLOADS,), adopt=lambda p: {e.name for e in p.iterdir()})
    return own_folder(out_dir, (DOWNLOADS,), adopt=_recorded)


def _recorded(folder: Path) -> set[str]:
    """downloads.jsonl and the files it records, read without changing it (it may be a user's file)."""
    try:
        lines = (folder / DOWNLOADS).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return set()
    names = set()
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            return set()  # not wetqa's journal
        if isinstance(rec, dict) and isinstance(rec.get("file"), str) and "sha256" in rec:
            names.add(rec["file"])
    return names | {DOWNLOADS} if names else set()


def fetch(client: Client, version: LawVersion, out: OwnedFolder) -> Path:
    """Download one version into ``out`` (atomically; kept when already there), checked by the parser."""
    if version.problem:
        raise DownloadError(version.problem)
    if not (_ID.match(version.bwb_id) and _FULL_LABEL.match(version.label)):
        raise DownloadError(f"not a BWB id and version label: {version.bwb_id[:80]!r} {version.label[:40]!r}")
    target = out.path / version.file_name
    if target.resolve().parent != out.path.resolve():
        raise DownloadError(f"{version.file_name!r} would be written outside {out.path}; not fetched")
    if target.is_file() and target.stat().st_size > 0:
        return target
    out.file(version.file_name)
    with atomic_file(target, "w+b") as fh:

        def sink(chunk):
            if chunk is None:  # a dropped connection: the retry starts the file again
                fh.seek(0)
                fh.truncate()
            else:
                fh.write(chunk)

        client.get(version.url, sink)
        fh.seek(0)
        data = fh.read()
        try:
            law = parse_law_bytes(data, version.url).law
        except BWBParseError as exc:
            raise DownloadError(f"{version.url}: not usable law XML: {exc}") from None
        if law.law_id != version.bwb_id:  # never saved under the name of a law it is not
            raise DownloadError(f"{version.url} holds {law.law_id}, not {version.bwb_id}; not kept")
    _record(out.path, version, hashlib.sha256(data).hexdigest(), len(data))
    return target


def check_date(day: str | None) -> None:
    """A day asked for is a date of the calendar (``2024-02-30`` is not), checked before any request."""
    from wetqa.console import check_day

    if day is not None:
        try:
            check_day(day)
        except ValueError as exc:
            raise DownloadError(f"not a date: {exc}") from None


def download_law(
    bwb_id: str,
    date: str | None = None,
    out_dir: str | os.PathLike | None = None,
    client: Client | None = None,
    version_date: str | None = None,
) -> Path:
    """One law's XML, the version valid on ``date`` (or the given ``version_date``); returns its path."""
    if not _ID.match(bwb_id):
        raise DownloadError(f"not a BWB id: {bwb_id!r} (expected BWBR followed by 7 digits)")
    for d in (date, version_date):
        check_date(d)
    out = download_folder(out_dir)
    own = client is None
    client = client or Client()
    try:
        versions = versions_of(client, bwb_id)
        if version_date:
            versions = [v for v in versions if v.version_date == version_date] or versions
        return fetch(client, choose_version(versions, date or version_date), out)
    finally:
        if own:
            client.close()


def download_query(
    query: str,
    out_dir: str | os.PathLike | None,
    date: str | None = None,
    client: Client | None = None,
    progress: bool = True,
    workers: int = 4,
) -> tuple[list[Path], list[dict]]:
    """Every law a search finds, each in the version valid on ``date``: (paths, failures). Resumable:
    files already in ``out_dir`` are kept."""
    from concurrent.futures import ThreadPoolExecutor

    check_date(date)  # before the search: a day that is no date finds nothing worth the requests
    out = download_folder(out_dir)
    own = client is None
    client = client or Client(concurrency=workers)
    try:
        by_law: dict[str, list[LawVersion]] = {}
        failures: list[dict] = []
        for v in search(client, query, progress):
            if v.problem:
                failures.append({"bwb_id": v.bwb_id, "error": v.problem})
            else:
                by_law.setdefault(v.bwb_id, []).append(v)
        chosen = []
        for bwb_id, versions in sorted(by_law.items()):
            try:
                chosen.append(choose_version(versions, date))
            except DownloadError as exc:
                failures.append({"bwb_id": bwb_id, "error": str(exc)})
        paths: list[Path] = []

        def one(v: LawVersion):
            try:
                return fetch(client, v, out), None
            except DownloadError as exc:
                return None, {"bwb_id": v.bwb_id, "error": str(exc)}

        with ThreadPoolExecutor(workers) as pool:
            for path, failure in progress_bar(
                pool.map(one, chosen), progress=progress, total=len(chosen), unit="law", desc="downloading"
            ):
                if path is not None:
                    paths.append(path)
                else:
                    failures.append(failure)
        return paths, failures
    finally:
        if own:
            client.close()


def in_force_query(day: str | None = None) -> str:
    """The SRU query for every regulation valid on ``day`` (default today)."""
    return f"overheidbwb.geldigheidsdatum=={day or Date.today().isoformat()}"
