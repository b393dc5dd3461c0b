"""The downloader against a hostile or broken service: nothing outside --out, no other hosts, bounded
size, time and paging, and one clear message naming the real cause (issue 21)."""

from __future__ import annotations

import http.server
import socket
import threading
import time
import urllib.parse

import pytest

from wetqa.cli import main
from wetqa.console import EXIT_UNAVAILABLE, EXIT_USAGE
from wetqa.corpus import download
from wetqa.corpus.download import Client, DownloadError, download_law
from wetqa.io import OWNED

from .conftest import FIXTURES
from .test_corpus_download import VERSIONS, SendingHandler, manifest, sru_page

pytestmark = pytest.mark.unit
LAW = (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_bytes()


class Service:
    """A loopback service whose answers each test sets: ``routes[path prefix] = handler(h, url)``."""

    def __init__(self):
        self.routes: dict = {}
        self.log: list[str] = []
        service = self

        class Handler(SendingHandler):
            def do_GET(self):  # noqa: N802
                service.log.append(self.path)
                url = urllib.parse.urlsplit(self.path)
                for prefix, handler in service.routes.items():
                    if url.path.startswith(prefix):
                        try:
                            return handler(self, url)
                        except (BrokenPipeError, ConnectionResetError):
                            return None
                return self.send(b"not found", 404)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def service(monkeypatch):
    s = Service()
    monkeypatch.setenv("WETQA_BWB_SRU_URL", s.base + "/sru")
    monkeypatch.setenv("WETQA_BWB_REPOSITORY_URL", s.base + "/repo")
    yield s
    s.close()


def _sru(records, total=None, nxt=None, base=""):
    def handler(h, url):
        h.send(sru_page(records, len(records) if total is None else total, nxt, base))

    return handler


def _client(**kw):
    return Client(**{"timeout": 2, "retries": 1, "backoff": 0.01, **kw})


def test_identifiers_from_the_service_never_leave_out(service, tmp_path):
    out = tmp_path / "out"
    evil = [("../../../tmp/wetqa-evil/EVIL", VERSIONS[3]), (str(tmp_path / "abs" / "EVIL"), VERSIONS[3])]
    service.routes["/sru"] = _sru(evil, base=service.base)
    service.routes["/repo"] = lambda h, url: h.send(LAW)
    paths, failures = download.download_query("rechtsgebied==X", out, "2024-06-01", _client(), progress=False)
    assert paths == [] and len(failures) == 2
    assert all("not a BWB id" in f["error"] for f in failures)
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file() and p.name != OWNED) == []
    assert not (tmp_path / "abs").exists()
    # A label that is not a version label is refused too.
    bad_label = [("BWBR9990001", ("../x_0", "2024-01-01", OPEN, "2024-01-01", OPEN))]
    service.routes["/sru"] = _sru(bad_label, base=service.base)
    paths, failures = download.download_query("rechtsgebied==X", out, "2024-06-01", _client(), progress=False)
    assert paths == [] and not list(tmp_path.rglob("*.xml"))


OPEN = "9999-12-31"


def test_only_the_configured_hosts_are_fetched(service, tmp_path):
    other = Service()  # another local service the search answer points at
    other.routes["/"] = lambda h, url: h.send(LAW)
    try:
        service.routes["/sru"] = _sru([("BWBR9990001", VERSIONS[3])], base=other.base)
        paths, failures = download.download_query("rechtsgebied==X", tmp_path, "2024-06-01", _client(), progress=False)
        assert paths == [] and "not one of the BWB services" in failures[0]["error"]
        assert other.log == []  # never requested
        # A redirect to another host is not followed; one on the same host is.
        service.routes["/sru"] = lambda h, url: h.send(b"no search here", 404)
        service.routes["/repo/BWBR9990001/manifest.xml"] = lambda h, url: h.send(
            b"", 302, {"Location": other.base + "/manifest.xml"}
        )
        with pytest.raises(DownloadError, match="redirect to another host"):
            download_law("BWBR9990001", "2024-06-01", tmp_path, client=_client())
        service.routes["/repo/BWBR9990001/manifest.xml"] = lambda h, url: h.send(
            b"", 302, {"Location": "/repo/moved/manifest.xml"}
        )
        service.routes["/repo/moved/manifest.xml"] = lambda h, url: h.send(manifest("BWBR9990001", VERSIONS))
        service.routes["/repo/BWBR9990001/2024"] = lambda h, url: h.send(LAW)
        assert download_law("BWBR9990001", "2024-06-01", tmp_path, client=_client()).read_bytes() == LAW
        assert other.log == []
    finally:
        other.close()


def _endless(h, url):
    h.send_response(200)
    h.end_headers()
    chunk = b"<!-- " + b"x" * 65536 + b" -->"
    while True:
        h.wfile.write(chunk)


def test_a_file_larger_than_the_cap_is_stopped(service, tmp_path):
    service.routes["/repo/BWBR9990001/manifest.xml"] = lambda h, url: h.send(manifest("BWBR9990001", VERSIONS))
    service.routes["/repo/BWBR9990001/2024"] = _endless
    with pytest.raises(DownloadError, match=r"larger than the 1 MB cap \(--max-file-mb\)"):
        download_law("BWBR9990001", "2024-06-01", tmp_path, client=_client(max_bytes=1 << 20))
    assert not list(tmp_path.glob("*.xml"))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and p.name != OWNED]
    service.routes["/repo/BWBR9990002/manifest.xml"] = _endless  # an endless manifest: the same cap
    with pytest.raises(DownloadError, match="larger than the 1 MB cap"):
        download.versions_of(_client(max_bytes=1 << 20), "BWBR9990002")


def test_a_file_that_trickles_in_misses_its_deadline(service, tmp_path):
    def trickle(h, url):
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        for _ in range(100):
            h.wfile.write(b"<")
            h.wfile.flush()
            time.sleep(0.4)

    service.routes["/repo/BWBR9990001/manifest.xml"] = trickle
    t0 = time.perf_counter()
    with pytest.raises(DownloadError, match=r"did not arrive within 2 s \(--deadline\)"):
        download.versions_of(_client(timeout=1, deadline=2), "BWBR9990001")
    assert time.perf_counter() - t0 < 6


def test_paging_is_bounded_and_numbers_are_checked(service, tmp_path, monkeypatch):
    monkeypatch.setattr(download, "PAGE_SIZE", 1)
    # The service says 10^9 records and always has a next page: wetqa stops at the pages the total allows.
    service.routes["/sru"] = lambda h, url: h.send(
        sru_page([("BWBR9990001", VERSIONS[3])], 10**9, int(urllib.parse.parse_qs(url.query)["startRecord"][0]) + 1, "")
    )
    with pytest.raises(DownloadError, match=r"announces 1000000000 records.*narrow the query"):
        list(download.search(_client(), "rechtsgebied==X"))
    assert len(service.log) == 1  # refused before paging
    # A total that pages fine, but a service that keeps saying "next" after it: stopped there.
    service.log.clear()
    service.routes["/sru"] = lambda h, url: h.send(
        sru_page([("BWBR9990001", VERSIONS[3])], 3, int(urllib.parse.parse_qs(url.query)["startRecord"][0]) + 1, "")
    )
    assert len(list(download.search(_client(), "rechtsgebied==X"))) == 3 and len(service.log) == 3
    service.routes["/sru"] = lambda h, url: h.send(
        b'<?xml version="1.0"?><searchRetrieveResponse><numberOfRecords>lots</numberOfRecords></searchRetrieveResponse>'
    )
    with pytest.raises(DownloadError, match="numberOfRecords 'lots' is not a number"):
        list(download.search(_client(), "rechtsgebied==X"))


def test_a_retry_after_beyond_what_wetqa_waits_gives_up_at_once(service, tmp_path):
    service.routes["/repo"] = lambda h, url: h.send(b"busy", 503, {"Retry-After": "100000"})
    t0 = time.perf_counter()
    with pytest.raises(DownloadError, match=r"HTTP 503.*retry after 100000 s, more than the 120 s wetqa waits"):
        download.versions_of(_client(retries=3), "BWBR9990001")
    assert time.perf_counter() - t0 < 5


def test_exit_codes_name_the_cause(tmp_path, monkeypatch, capsys):
    with socket.socket() as s:  # nothing listens here
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("WETQA_BWB_REPOSITORY_URL", f"http://127.0.0.1:{port}/repo")
    monkeypatch.setenv("WETQA_BWB_SRU_URL", f"http://127.0.0.1:{port}/sru")
    argv = ["corpus", "download", "BWBR9990001", "--out", str(tmp_path), "--retries", "0", "--timeout", "1"]
    assert main(argv) == EXIT_UNAVAILABLE  # the service is unreachable: a missing component, not bad input
    assert "cannot fetch" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([*argv[:-2], "--max-file-mb", "0"])
    assert exit_info.value.code == EXIT_USAGE
    from wetqa.corpus import cli as corpus_cli

    assert (corpus_cli.MAX_FILE_MB, corpus_cli.DEADLINE) == (download.MAX_FILE_MB, download.DEADLINE)


def test_an_endless_redirect_is_one_clear_message_not_an_internal_error(service, tmp_path, capsys):
    def loop(h, url):
        h.send(b"", 302, {"Location": url.path + "x"})

    service.routes["/repo"] = loop
    service.routes["/sru"] = loop
    argv = ["corpus", "download", "BWBR9990001", "--out", str(tmp_path / "out"), "--retries", "0", "--timeout", "2"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (1, 2) and "redirects" in err and "internal error" not in err


def _short_pages(records, per_page: int, total: int | None = None):
    """An SRU service that sends at most ``per_page`` records a page, whatever ``maximumRecords`` asks
    (SRU allows it), and says where the next page starts."""

    def handler(h, url):
        start = int(urllib.parse.parse_qs(url.query)["startRecord"][0])
        page = records[start - 1 : start - 1 + per_page]
        announced = len(records) if total is None else total
        nxt = start + len(page) if start - 1 + len(page) < len(records) else None
        h.send(sru_page(page, announced, nxt, h.server.base))

    return handler


# A law whose version 2022-01-01 was corrected: generation _0 was visible until 2022-06-30, _1 since.
# In the order the service lists them: the first page holds _0, the current _1 comes on the second.
GENERATIONS = [
    ("2021-01-01_0", "2021-01-01", "2021-12-31", "2020-12-01", OPEN),
    ("2022-01-01_0", "2022-01-01", OPEN, "2021-12-01", "2022-06-30"),
    ("2019-01-01_0", "2019-01-01", "2020-12-31", "2018-12-01", OPEN),
    ("2022-01-01_1", "2022-01-01", OPEN, "2022-07-01", OPEN),
]


@pytest.mark.parametrize("date", ["2023-05-01", None])
def test_short_pages_still_reach_the_current_generation(service, tmp_path, date):
    """Issue 29, 1: a service sending 2 records a page made wetqa stop after the first page (its cap
    counted pages of the size it asked for) and write the superseded generation _0, exit 0."""
    service.server.base = service.base  # type: ignore[attr-defined]
    service.routes["/sru"] = _short_pages([("BWBR9990001", v) for v in GENERATIONS], per_page=2)
    service.routes["/repo/BWBR9990001/manifest.xml"] = lambda h, url: h.send(b"no manifest", 404)
    service.routes["/repo"] = lambda h, url: h.send(LAW)
    path = download_law("BWBR9990001", date, tmp_path, client=_client())
    assert path.name == "BWBR9990001_2022-01-01_1.xml"
    assert sum("/sru" in p for p in service.log) == 2


def test_a_listing_shorter_than_announced_is_refused_not_chosen_from(service, tmp_path):
    """Records missing from the listing could be the current version: never choose from a partial one."""
    service.server.base = service.base  # type: ignore[attr-defined]
    service.routes["/sru"] = _short_pages([("BWBR9990001", v) for v in GENERATIONS[:3]], per_page=2, total=4)
    with pytest.raises(DownloadError, match=r"announced 4 records but sent 3"):
        list(download.search(_client(), "dcterms.identifier==BWBR9990001"))


def test_an_announced_total_with_empty_pages_stops_at_the_first(service):
    """Issue 29, 8: 199,999 records announced and none sent: 2,000 empty pages were fetched (90 s), exit 0."""
    service.routes["/sru"] = lambda h, url: h.send(
        sru_page([], 199_999, int(urllib.parse.parse_qs(url.query)["startRecord"][0]) + 100, "")
    )
    with pytest.raises(DownloadError, match=r"announced 199999 records but sent none"):
        list(download.search(_client(), "rechtsgebied==X"))
    assert len(service.log) == 1


def test_the_file_must_be_the_law_asked_for(service, tmp_path, capsys):
    """Issue 29, 8: asking BWBR9990002 and getting BWBR9990001's XML saved it as BWBR9990002_..._0.xml."""
    service.routes["/repo/BWBR9990002/manifest.xml"] = lambda h, url: h.send(manifest("BWBR9990002", VERSIONS))
    service.routes["/repo/BWBR9990002/2024"] = lambda h, url: h.send(LAW)  # BWBR9990001's text
    with pytest.raises(DownloadError, match="holds BWBR9990001, not BWBR9990002"):
        download_law("BWBR9990002", "2024-06-01", tmp_path, client=_client())
    assert not list(tmp_path.glob("*.xml")) and not (tmp_path / download.DOWNLOADS).exists()
    # Through the search service as well (a query lists records; each file must be its record's law).
    service.routes["/sru"] = _sru([("BWBR9990002", VERSIONS[3])], base=service.base)
    paths, failures = download.download_query("rechtsgebied==X", tmp_path, "2024-06-01", _client(), progress=False)
    assert paths == [] and "holds BWBR9990001, not BWBR9990002" in failures[0]["error"]
    assert main(["corpus", "download", "BWBR9990002", "--date", "2024-06-01", "--out", str(tmp_path)]) == EXIT_USAGE
    assert "holds BWBR9990001" in capsys.readouterr().err


@pytest.mark.parametrize(
    "odd", ["BWBR\uff10\uff10\uff10\uff11\uff18\uff15\uff14", "BWBR\u0661\u0662\u0663\u0664\u0665\u0666\u0667"]
)
def test_ids_dates_and_labels_of_digits_other_than_ascii_are_refused(service, tmp_path, capsys, odd):
    """Issue 29, 8: `BWBR０００１８５４` and `BWBR١٢٣٤٥٦٧` were accepted (Unicode \\d) and became file names."""
    assert main(["corpus", "download", odd, "--out", str(tmp_path)]) == EXIT_USAGE
    assert "not a BWB id" in capsys.readouterr().err
    assert main(["corpus", "download", "BWBR9990001", "--date", "２０２４-06-01", "--out", str(tmp_path)]) == EXIT_USAGE
    assert "not a date" in capsys.readouterr().err
    # From the search service: an identifier or a version label in other digits is a failure, never a file.
    odd_label = ("2024-01-01_\u0661", "2024-01-01", OPEN, "2024-01-01", OPEN)
    service.routes["/sru"] = _sru([(odd, VERSIONS[3]), ("BWBR9990001", odd_label)], base=service.base)
    service.routes["/repo"] = lambda h, url: h.send(LAW)
    paths, failures = download.download_query("rechtsgebied==X", tmp_path, "2024-06-01", _client(), progress=False)
    assert paths == [] and len(failures) == 2, failures
    assert not list(tmp_path.glob("*.xml"))


def test_a_corpus_build_reads_generations_only_from_ascii_names(tmp_path):
    """A file named with other digits is no generation of a version: it does not hide the real one."""
    from wetqa.corpus.build import scan_sources

    src = tmp_path / "bwb"
    src.mkdir()
    (src / "BWBR9990001_2024-01-01_1.xml").write_bytes(LAW)
    (src / "BWBR9990001_2024-01-01_\u0661\u0660.xml").write_bytes(LAW)  # "_10" in Arabic-Indic digits
    files, _, older = scan_sources([src])
    assert "BWBR9990001_2024-01-01_1.xml" in [f.name for f in files]
    assert older == []
