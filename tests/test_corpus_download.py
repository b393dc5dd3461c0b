"""The downloader against a real HTTP server on 127.0.0.1 serving fixture XML."""

import http.server
import socket
import threading
import urllib.parse

import pytest

from wetqa.corpus.download import DownloadError, download_law, find_version, reference_corpus

from .conftest import FIXTURES

pytestmark = pytest.mark.unit

SRU = """<?xml version="1.0" encoding="UTF-8"?>
<sru:searchRetrieveResponse xmlns:sru="http://docs.oasis-open.org/ns/search-ws/sruResponse"
  xmlns:gzd="http://standaarden.overheid.nl/sru" xmlns:dcterms="http://purl.org/dc/terms/"
  xmlns:overheidbwb="http://standaarden.overheid.nl/bwb/terms/">
 <sru:numberOfRecords>2</sru:numberOfRecords>
 <sru:records>
  <sru:record><sru:recordData><gzd:gzd>
   <gzd:originalData><overheidbwb:meta><dcterms:identifier>BWBR9990001</dcterms:identifier>
     <overheidbwb:geldigheidsperiode_startdatum>2023-07-01</overheidbwb:geldigheidsperiode_startdatum>
     <overheidbwb:geldigheidsperiode_einddatum>2023-12-31</overheidbwb:geldigheidsperiode_einddatum>
   </overheidbwb:meta></gzd:originalData>
   <gzd:enrichedData><gzd:locatie_toestand>{base}/bwb/BWBR9990001/2023-07-01_0/xml/BWBR9990001_2023-07-01_0.xml</gzd:locatie_toestand></gzd:enrichedData>
  </gzd:gzd></sru:recordData></sru:record>
  <sru:record><sru:recordData><gzd:gzd>
   <gzd:originalData><overheidbwb:meta><dcterms:identifier>BWBR9990001</dcterms:identifier>
     <overheidbwb:geldigheidsperiode_startdatum>2024-01-01</overheidbwb:geldigheidsperiode_startdatum>
   </overheidbwb:meta></gzd:originalData>
   <gzd:enrichedData><gzd:locatie_toestand>{base}/bwb/BWBR9990001/2024-01-01_0/xml/BWBR9990001_2024-01-01_0.xml</gzd:locatie_toestand></gzd:enrichedData>
  </gzd:gzd></sru:recordData></sru:record>
 </sru:records>
</sru:searchRetrieveResponse>"""


@pytest.fixture
def bwb_server():
    law = (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_bytes()
    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            requests.append(self.path)
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/sru/Search":
                q = urllib.parse.parse_qs(url.query)
                body = (
                    SRU.format(base=base).encode()
                    if "BWBR9990001" in q["query"][0]
                    else SRU.split("<sru:records>")[0].encode() + b"</sru:searchRetrieveResponse>"
                )
            elif url.path.endswith(".xml") and "BWBR9990001" in url.path:
                body = law
            elif url.path.endswith("broken.xml"):
                body = b"<html>not a law</html>"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield base, requests
    server.shutdown()


def test_find_version_newest_and_at_date(bwb_server):
    base, _ = bwb_server
    sru = base + "/sru/Search"
    assert find_version("BWBR9990001", sru_url=sru).version_date == "2024-01-01"
    assert find_version("BWBR9990001", "2023-09-01", sru_url=sru).version_date == "2023-07-01"


def test_download_caches(bwb_server, tmp_path):
    base, requests = bwb_server
    path = download_law("BWBR9990001", out_dir=tmp_path, sru_url=base + "/sru/Search")
    assert path.name == "BWBR9990001_2024-01-01_0.xml"
    assert path.read_bytes() == (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_bytes()
    n = len(requests)
    again = download_law("BWBR9990001", out_dir=tmp_path, version_date="2024-01-01", sru_url=base + "/sru/Search")
    assert again == path and len(requests) == n  # served from the cache, no request


def test_unknown_law_and_bad_ids(bwb_server, tmp_path):
    base, _ = bwb_server
    with pytest.raises(DownloadError, match="knows no version of BWBR9990077"):
        download_law("BWBR9990077", out_dir=tmp_path, sru_url=base + "/sru/Search")
    with pytest.raises(DownloadError, match="not a BWB id"):
        find_version("wet123")
    with pytest.raises(DownloadError, match="not a date"):
        find_version("BWBR9990001", "1-1-2024")


def test_offline_gives_a_clear_message(tmp_path):
    with socket.socket() as s:  # a port on which nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DownloadError, match="are you offline"):
        download_law("BWBR9990001", out_dir=tmp_path, sru_url=f"http://127.0.0.1:{port}/sru", retries=1, timeout=2)


def test_reference_corpus_list():
    ref = reference_corpus()
    assert len(ref) == 273
    assert ("BWBR0005290", "2024-07-01") in ref  # Boek 7, absent from the shared folder
    assert sum(1 for i, _ in ref if i == "BWBR0003420") == 2
