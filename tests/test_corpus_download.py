"""The downloader against a loopback server shaped like the real BWB services.

The repository serves ``/{id}/manifest.xml`` (``work`` > ``expression label="{date}_{n}"`` > metadata
with validity and visibility, ``manifestation label="xml"`` > ``item``) and the files; the search
service answers SRU 2.0 with ``gzd``/``overheidbwb`` records, pages, and diagnostics in HTTP 200. Like
some real deployments it answers 406 without ``Accept: application/xml``.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import urllib.parse

import httpx
import pytest

from wetqa.corpus import download
from wetqa.corpus.download import (
    OPEN_END,
    Client,
    DownloadError,
    LawVersion,
    choose_version,
    download_law,
    reference_corpus,
)
from wetqa.io import OWNED

from .conftest import FIXTURES

pytestmark = pytest.mark.unit

LAW = (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_bytes()
# (label, valid from, valid until, visible from, visible until) of BWBR9990001:
VERSIONS = [
    ("2023-07-01_0", "2023-07-01", "2023-12-31", "2023-06-20", OPEN_END),
    ("2024-01-01_0", "2024-01-01", "2029-12-31", "2023-12-20", "2024-02-10"),  # corrected twice since
    ("2024-01-01_9", "2024-01-01", "2029-12-31", "2024-02-11", "2024-03-01"),
    ("2024-01-01_10", "2024-01-01", "2029-12-31", "2024-03-02", OPEN_END),  # the current text: _10 > _9
    ("2030-01-01_0", "2030-01-01", OPEN_END, "2025-06-01", OPEN_END),  # announced, not yet in force
]


def manifest(bwb_id: str, versions) -> bytes:
    exprs = "".join(
        f'<expression label="{label}"><metadata><datum_inwerkingtreding>{a}</datum_inwerkingtreding>'
        + (f"<einddatum>{b}</einddatum>" if b != OPEN_END else "")
        + f"<zichtdatum_start>{c}</zichtdatum_start><zichtdatum_eind>{d}</zichtdatum_eind></metadata>"
        f'<manifestation label="xml"><metadata><hashcode>x</hashcode><size>1</size></metadata>'
        f'<item label="{bwb_id}_{label}.xml" _deleted="false"/></manifestation></expression>'
        for label, a, b, c, d in versions
    )
    deleted = (
        '<expression label="1999-01-01_0"><metadata><datum_inwerkingtreding>1999-01-01</datum_inwerkingtreding>'
        '</metadata><manifestation label="xml"><item label="x.xml" _deleted="true"/></manifestation></expression>'
    )
    latest = versions[-1][0]
    return (
        f'<?xml version="1.0" encoding="utf-8"?><work label="{bwb_id}" _latestItem="{latest}/xml/{bwb_id}_{latest}.xml">'
        f"{deleted}{exprs}</work>"
    ).encode()


def sru_page(records, total: int, next_position: int | None, base: str) -> bytes:
    recs = "".join(
        "<sru:record><sru:recordData><gzd:gzd><gzd:originalData><overheidbwb:meta>"
        f"<owmskern><dcterms:identifier>{bwb}</dcterms:identifier></owmskern><bwbipm>"
        f"<overheidbwb:geldigheidsperiode_startdatum>{a}</overheidbwb:geldigheidsperiode_startdatum>"
        f"<overheidbwb:geldigheidsperiode_einddatum>{b}</overheidbwb:geldigheidsperiode_einddatum>"
        f"<overheidbwb:zichtperiode_startdatum>{c}</overheidbwb:zichtperiode_startdatum>"
        f"<overheidbwb:zichtperiode_einddatum>{d}</overheidbwb:zichtperiode_einddatum>"
        "</bwbipm></overheidbwb:meta></gzd:originalData><gzd:enrichedData>"
        f"<overheidbwb:locatie_toestand>{base}/repo/{bwb}/{label}/xml/{bwb}_{label}.xml</overheidbwb:locatie_toestand>"
        "</gzd:enrichedData></gzd:gzd></sru:recordData></sru:record>"
        for bwb, (label, a, b, c, d) in records
    )
    nxt = f"<sru:nextRecordPosition>{next_position}</sru:nextRecordPosition>" if next_position else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?><sru:searchRetrieveResponse '
        'xmlns:sru="http://docs.oasis-open.org/ns/search-ws/sruResponse" xmlns:gzd="http://standaarden.overheid.nl/sru" '
        'xmlns:dcterms="http://purl.org/dc/terms/" xmlns:overheidbwb="http://standaarden.overheid.nl/bwb/terms/">'
        f"<sru:numberOfRecords>{total}</sru:numberOfRecords><sru:records>{recs}</sru:records>{nxt}"
        "</sru:searchRetrieveResponse>"
    ).encode()


DIAGNOSTIC = (
    b'<?xml version="1.0"?><searchRetrieveResponse xmlns="http://docs.oasis-open.org/ns/search-ws/sruResponse">'
    b'<diagnostics><diagnostic xmlns="http://docs.oasis-open.org/ns/search-ws/diagnostic">'
    b"<uri>info:srw/diagnostic/1/10</uri><details>dcterms.identefier</details>"
    b"<message>Query syntax error</message></diagnostic></diagnostics></searchRetrieveResponse>"
)


class SendingHandler(http.server.BaseHTTPRequestHandler):
    """A loopback handler with one way to answer: a body, a status and headers."""

    def send(self, body: bytes, status: int = 200, headers: dict | None = None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def bwb(monkeypatch):
    log: list[str] = []
    state = {"dropped": set(), "throttled": set()}

    class Handler(SendingHandler):
        def do_GET(self):  # noqa: N802
            log.append(self.path)
            if "application/xml" not in (self.headers.get("Accept") or ""):
                return self.send(b"not acceptable", 406)
            url = urllib.parse.urlsplit(self.path)
            parts = url.path.strip("/").split("/")
            if url.path == "/sru":
                q = urllib.parse.parse_qs(url.query)
                query, start = q["query"][0], int(q.get("startRecord", ["1"])[0])
                size = int(q.get("maximumRecords", ["100"])[0])
                if "identefier" in query:
                    return self.send(DIAGNOSTIC)
                records = [
                    (b, v)
                    for b in ("BWBR9990001", "BWBR9990002")
                    for v in VERSIONS
                    if b in query or "geldigheidsdatum" in query or "rechtsgebied" in query
                ]
                page = records[start - 1 : start - 1 + size]
                nxt = start + size if start - 1 + size < len(records) else None
                return self.send(sru_page(page, len(records), nxt, base))
            if parts[0] == "repo" and parts[-1] == "manifest.xml":
                bwb_id = parts[1]
                if bwb_id == "BWBR9990003" and bwb_id not in state["throttled"]:
                    state["throttled"].add(bwb_id)
                    return self.send(b"slow down", 429, {"Retry-After": "1"})
                if bwb_id in ("BWBR9990001", "BWBR9990003"):
                    return self.send(manifest(bwb_id, VERSIONS))
                return self.send(b"no manifest", 404)
            if parts[0] == "repo" and parts[-1].endswith(".xml"):
                law = LAW.replace(b"BWBR9990001", parts[1].encode())  # each law's file holds that law
                if parts[1] == "BWBR9990003" and parts[-1] not in state["dropped"]:
                    state["dropped"].add(parts[-1])  # headers promise the whole file; half of it, then gone
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(law)))
                    self.end_headers()
                    self.wfile.write(law[: len(law) // 2])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                return self.send(law)
            return self.send(b"not found", 404)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("WETQA_BWB_SRU_URL", base + "/sru")
    monkeypatch.setenv("WETQA_BWB_REPOSITORY_URL", base + "/repo")
    monkeypatch.setattr(download, "PAGE_SIZE", 2)
    yield base, log
    server.shutdown()


def _client():
    return Client(timeout=5, retries=3, backoff=0.01)


def _versions(bwb_id="BWBR9990001"):
    return download.parse_manifest(manifest(bwb_id, VERSIONS), bwb_id)


def test_choice_is_right_on_both_time_axes():
    versions = _versions()
    assert [v.label for v in versions] == [v[0] for v in VERSIONS]  # the deleted item is left out
    assert choose_version(versions, "2024-06-01").label == "2024-01-01_10"  # newest visible, _10 after _9
    assert choose_version(versions, "2023-09-01").label == "2023-07-01_0"
    assert choose_version(versions, "2031-01-01").label == "2030-01-01_0"
    # "current" is what is valid today, not the announced future version.
    today = choose_version(versions)
    assert today.valid_on(time.strftime("%Y-%m-%d")) and today.label != "2030-01-01_0"
    with pytest.raises(
        DownloadError,
        match=r"no version of BWBR9990001 is valid on 2020-01-01; versions: "
        r"2023-07-01..2023-12-31, 2024-01-01..2029-12-31, 2030-01-01..open",
    ):
        choose_version(versions, "2020-01-01")


def test_download_names_and_records_the_exact_version(bwb, tmp_path):
    base, log = bwb
    path = download_law("BWBR9990001", "2024-06-01", tmp_path, client=_client())
    assert path.name == "BWBR9990001_2024-01-01_10.xml" and path.read_bytes() == LAW
    rec = json.loads((tmp_path / "downloads.jsonl").read_text().splitlines()[0])
    assert rec["generation"] == 10 and rec["valid_until"] == "2029-12-31" and rec["visible_until"] == OPEN_END
    assert rec["url"].endswith("/repo/BWBR9990001/2024-01-01_10/xml/BWBR9990001_2024-01-01_10.xml")
    assert len(rec["sha256"]) == 64 and rec["size"] == len(LAW)
    n = len(log)
    assert download_law("BWBR9990001", "2024-06-01", tmp_path, client=_client()) == path
    assert not any(p.endswith(".xml") and "2024-01-01_10" in p for p in log[n:])  # kept, not fetched again


def test_without_a_manifest_the_paged_search_gives_the_same_answer(bwb, tmp_path):
    base, log = bwb
    path = download_law("BWBR9990002", "2024-06-01", tmp_path, client=_client())
    assert path.name == "BWBR9990002_2024-01-01_10.xml"
    starts = [urllib.parse.parse_qs(urllib.parse.urlsplit(p).query)["startRecord"][0] for p in log if "/sru" in p]
    assert starts == ["1", "3", "5"]  # five records, two a page
    with pytest.raises(DownloadError, match="no version of BWBR9990002 is valid on 2001-01-01"):
        download_law("BWBR9990002", "2001-01-01", tmp_path, client=_client())


def test_diagnostics_are_reported_verbatim(bwb):
    with pytest.raises(DownloadError, match=r"reports: Query syntax error \(dcterms.identefier\)"):
        list(download.search(_client(), "dcterms.identefier==BWBR9990001"))


def test_accept_header_retry_after_and_a_dropped_connection(bwb, tmp_path):
    base, log = bwb
    assert httpx.get(base + "/repo/BWBR9990001/manifest.xml").status_code == 406  # without Accept
    t0 = time.perf_counter()
    path = download_law("BWBR9990003", "2024-06-01", tmp_path, client=_client())
    assert time.perf_counter() - t0 >= 1.0  # Retry-After: 1 was honoured
    assert path.read_bytes() == LAW.replace(b"BWBR9990001", b"BWBR9990003")  # the half file was not kept
    assert sum(1 for p in log if p.endswith("BWBR9990003_2024-01-01_10.xml")) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != OWNED]


def test_query_downloads_every_law_found_and_resumes(bwb, tmp_path, capsys):
    from wetqa.cli import main

    base, _ = bwb

    out = tmp_path / "bwb"
    argv = [
        "corpus",
        "download",
        "--query",
        "rechtsgebied==Fictief",
        "--date",
        "2024-06-01",
        "--out",
        str(out),
        "--no-progress",
        "--retries",
        "1",
    ]
    assert main(argv) == 0
    assert sorted(p.name for p in out.glob("*.xml")) == [
        "BWBR9990001_2024-01-01_10.xml",
        "BWBR9990002_2024-01-01_10.xml",
    ]
    capsys.readouterr()
    assert main([*argv, "--output", "json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["downloaded"]) == 2
    # The corpus built from them says which version each law is, and where it came from.
    assert main(["corpus", "build", "--source", str(out), "--out", str(tmp_path / "corpus"), "--no-progress"]) == 0
    manifest = json.loads((tmp_path / "corpus" / "manifest.json").read_text())
    rows = manifest["sources"]
    assert {r["file"]: (r["download"]["generation"], r["download"]["valid_until"]) for r in rows} == {
        "BWBR9990001_2024-01-01_10.xml": (10, "2029-12-31"),
        "BWBR9990002_2024-01-01_10.xml": (10, "2029-12-31"),
    }
    assert manifest["duplicates"] == []
    assert all(r["download"]["url"].startswith(base) for r in rows)


def test_offline_and_bad_input(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port on which nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("WETQA_BWB_REPOSITORY_URL", f"http://127.0.0.1:{port}/repo")
    monkeypatch.setenv("WETQA_BWB_SRU_URL", f"http://127.0.0.1:{port}/sru")
    with pytest.raises(DownloadError, match="are you offline"):
        download_law("BWBR9990001", out_dir=tmp_path, client=Client(timeout=2, retries=1, backoff=0.01))
    with pytest.raises(DownloadError, match="not a BWB id"):
        download_law("wet123", out_dir=tmp_path)
    with pytest.raises(DownloadError, match="not a date"):
        download_law("BWBR9990001", "1-1-2024", tmp_path)


def test_reference_corpus_list():
    rows = reference_corpus()
    assert len(rows) == 273 and ("BWBR0002656", "2024-01-01") in rows
    assert (
        LawVersion("BWBR0002656", "2024-01-01", 3, "2024-01-01", OPEN_END).file_name == "BWBR0002656_2024-01-01_3.xml"
    )


def test_a_date_that_is_not_in_the_calendar_is_refused_before_the_network(bwb, tmp_path, capsys):
    """Issue 40: `corpus download --date 2024-02-30` asked the services first."""
    from wetqa.cli import main
    from wetqa.console import EXIT_USAGE

    _, log = bwb
    out = tmp_path / "bwb"
    for what in (["BWBR9990001"], ["--query", "rechtsgebied==Fictief"], ["--all"]):
        capsys.readouterr()
        try:
            code = main(["corpus", "download", *what, "--date", "2024-02-30", "--out", str(out), "--no-progress"])
        except SystemExit as exc:  # argparse refuses it
            code = exc.code
        err = capsys.readouterr().err.strip()
        assert code == EXIT_USAGE and len(err.splitlines()) == 1 and "2024-02-30" in err, (what, err)
    with pytest.raises(DownloadError, match="2024-02-30"):
        download_law("BWBR9990001", "2024-02-30", out, client=_client())
    with pytest.raises(DownloadError, match="2024-02-30"):
        download.download_query("rechtsgebied==Fictief", out, "2024-02-30", _client(), progress=False)
    assert log == [] and not out.exists()
