"""Fetch official BWB XML from the public repository behind wetten.overheid.nl.

The SRU search service (``x-connection=BWB``) finds the consolidated version
(toestand) of a law for an id and an optional date and gives the address of
its XML; the file is checked by the parser and cached locally. Retries with
back-off on network errors and 5xx answers; a clear error when offline.
"""

from __future__ import annotations

import csv
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from lxml import etree

from wetqa.io import atomic_file

from .bwb import BWBParseError, parse_law_bytes

SRU_URL = os.environ.get("WETQA_BWB_SRU_URL", "https://zoekservice.overheid.nl/sru/Search")
_ID = re.compile(r"^BWBR\d{7}$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class DownloadError(RuntimeError):
    pass


@dataclass(frozen=True, slots=True)
class LawVersion:
    bwb_id: str
    version_date: str
    url: str

    @property
    def file_name(self) -> str:
        return f"{self.bwb_id}_{self.version_date}_0.xml"


def default_cache_dir() -> Path:
    base = os.environ.get("WETQA_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "wetqa"
    )
    return Path(base) / "bwb"


def reference_corpus() -> list[tuple[str, str]]:
    """The (bwb_id, version_date) pairs of the 273-law reference corpus."""
    text = resources.files("wetqa.corpus").joinpath("reference_corpus.tsv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines(), delimiter="\t"))
    return [(r["bwb_id"], r["version_date"]) for r in rows]


def _get(url: str, timeout: float, retries: int) -> bytes:
    last: Exception | None = None
    for attempt in range(retries + 1):
        try:
            req = urllib.request.Request(url, headers={"User-Agent": "wetqa/0.1 (+corpus download)"})
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:
                raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            last = exc
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            last = exc
        if attempt < retries:
            time.sleep(min(8.0, 0.5 * 2**attempt))
    reason = getattr(last, "reason", None) or last
    raise DownloadError(
        f"cannot reach {urllib.parse.urlsplit(url).netloc or url} after {retries + 1} attempts ({reason}); "
        "are you offline? Point WETQA_BWB_DIR at a folder of law XML files instead"
    )


def _local(el: etree._Element) -> str:
    return etree.QName(el).localname if isinstance(el.tag, str) else ""


def find_version(
    bwb_id: str, date: str | None = None, sru_url: str | None = None, timeout: float = 30.0, retries: int = 3
) -> LawVersion:
    """Ask the SRU service which toestand of ``bwb_id`` is valid on ``date`` (default: the newest)."""
    if not _ID.match(bwb_id):
        raise DownloadError(f"not a BWB id: {bwb_id!r} (expected BWBR followed by 7 digits)")
    if date is not None and not _DATE.match(date):
        raise DownloadError(f"not a date: {date!r} (expected YYYY-MM-DD)")
    query = f"dcterms.identifier=={bwb_id}"
    if date:
        query += f" and overheidbwb.geldigheidsdatum=={date}"
    params = {
        "operation": "searchRetrieve",
        "version": "2.0",
        "x-connection": "BWB",
        "query": query,
        "maximumRecords": "50",
    }
    url = (sru_url or SRU_URL) + "?" + urllib.parse.urlencode(params)
    data = _get(url, timeout, retries)
    try:
        root = etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False))
    except etree.XMLSyntaxError as exc:
        raise DownloadError(f"the SRU service answered with malformed XML: {exc}") from None
    candidates: list[tuple[str, str, str]] = []  # (start, end, url)
    for record in root.iter():
        if _local(record) != "record":
            continue
        fields: dict[str, str] = {}
        for el in record.iter():
            name = _local(el)
            if name in (
                "locatie_toestand",
                "geldigheidsperiode_startdatum",
                "geldigheidsperiode_einddatum",
                "identifier",
            ):
                fields.setdefault(name, (el.text or "").strip())
        if fields.get("locatie_toestand") and fields.get("identifier", bwb_id) == bwb_id:
            candidates.append(
                (
                    fields.get("geldigheidsperiode_startdatum", ""),
                    fields.get("geldigheidsperiode_einddatum", ""),
                    fields["locatie_toestand"],
                )
            )
    if date:
        candidates = [c for c in candidates if c[0] <= date and (not c[1] or date <= c[1])] or candidates
    if not candidates:
        raise DownloadError(f"the BWB service knows no version of {bwb_id}" + (f" valid on {date}" if date else ""))
    start, _, location = max(candidates)
    m = re.search(r"_(\d{4}-\d{2}-\d{2})_\d+\.xml$", location)
    version = m.group(1) if m else (start or date or "")
    return LawVersion(bwb_id, version, location)


def download_law(
    bwb_id: str,
    date: str | None = None,
    out_dir: str | os.PathLike | None = None,
    sru_url: str | None = None,
    timeout: float = 30.0,
    retries: int = 3,
    version_date: str | None = None,
) -> Path:
    """Download one law's XML into ``out_dir`` (default: the cache) and return its path.

    ``version_date`` (a known toestand date, as in the reference list) lets a
    cached copy be used without asking the service at all.
    """
    out = Path(out_dir) if out_dir else default_cache_dir()
    if version_date:
        cached = out / f"{bwb_id}_{version_date}_0.xml"
        if cached.is_file() and cached.stat().st_size > 0:
            return cached
    version = find_version(bwb_id, date or version_date, sru_url, timeout, retries)
    target = out / version.file_name
    if target.is_file() and target.stat().st_size > 0:
        return target
    data = _get(version.url, timeout, retries)
    try:
        parse_law_bytes(data, version.url)
    except BWBParseError as exc:
        raise DownloadError(f"downloaded file is not usable law XML: {exc}") from None
    with atomic_file(target, "wb") as fh:
        fh.write(data)
    return target
