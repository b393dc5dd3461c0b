"""The OpenAI-compatible endpoint on a real uvicorn server, driven by the official openai client."""

import re
import threading
import time

import httpx
import openai
import pytest

import wetqa
from wetqa.generation import GeneratorConfig, Pipeline
from wetqa.generation.backends.extractive import ExtractiveBackend
from wetqa.retrieval import open_index

from .serving import LiveServer, make_app, served_pipeline

QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


class SlowExtractive(ExtractiveBackend):
    inline_safe = False  # stands in for a slow model: must run off the event loop

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def generate(self, requests):
        time.sleep(self.seconds)
        return super().generate(requests)


class LaneExtractive(ExtractiveBackend):
    """A model whose work is ``steps`` calls through the CPU lane (each ``seconds`` long), as the reader's and
    the encoders' calls are; ``calls`` counts the calls made."""

    inline_safe = False

    def __init__(self, steps: int, seconds: float):
        super().__init__()
        self.steps, self.seconds, self.calls = steps, seconds, 0

    def generate(self, requests):
        from wetqa.retrieval.models.lanes import LANE

        for _ in range(self.steps):
            LANE.run(1, lambda: time.sleep(self.seconds))
            self.calls += 1
        return super().generate(requests)


def _ask_from(server, address: str, timeout: float = 30.0) -> httpx.Response:
    """A chat request sent from another loopback address: another client to the server's fair share."""
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=timeout) as http:
        return http.post(server.url + "/v1/chat/completions",
                         json={"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": QUESTION}]})  # fmt: skip


@pytest.fixture(scope="module")
def index(bm25s_index):
    return bm25s_index


def preset(index, name="wetqa-bm25s-extractive", backend=None):
    p = served_pipeline(name, index, GeneratorConfig("extractive"), k=3)
    p.pipeline = Pipeline(open_index(index), backend or ExtractiveBackend(), k=3)
    return p


@pytest.fixture(scope="module")
def server(index):
    with LiveServer(make_app([preset(index)], max_question_chars=500)) as s:
        yield s


def refused(server) -> openai.APIStatusError:
    """The error the server answers the question with (the test fails if it answers)."""
    with pytest.raises(openai.APIStatusError) as err:
        client(server).chat.completions.create(
            model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": QUESTION}]
        )
    return err.value


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=kw.pop("api_key", "unused"), max_retries=0, **kw)


@pytest.mark.integration
def test_non_streaming_answer_with_citations(server):
    resp = client(server).chat.completions.create(
        model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": QUESTION}]
    )
    content = resp.choices[0].message.content
    assert "De rechtbank kan een ouder zijn gezag geheel beëindigen" in content and "[1]" in content
    assert "Bronnen:\n[1] Wet fictief gezag, Artikel 266" in content
    citations = resp.model_extra["citations"]
    assert citations[0]["article"] == "Artikel 266" and citations[0]["law_id"] == "BWBR9990001"
    assert citations[0]["url"].startswith("https://wetten.overheid.nl/jci1.3:c:BWBR9990001&artikel=266")
    assert resp.usage.total_tokens > 0 and resp.choices[0].finish_reason == "stop"
    sentences = resp.model_extra["sentences"]
    assert sentences[0]["citation"] == 1 and sentences[0]["support"] == [0]


@pytest.mark.integration
def test_streaming_answer(server):
    stream = client(server).chat.completions.create(
        model="wetqa-bm25s-extractive",
        stream=True,
        messages=[{"role": "system", "content": "wees kort"}, {"role": "user", "content": QUESTION}],
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert chunks[-1].model_extra["citations"][0]["article"] == "Artikel 266"
    full = client(server).chat.completions.create(
        model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": QUESTION}]
    )
    # Text streams before its citations are known: the inline [n] markers are the one difference,
    # and the last chunk's `sentences` carries them.
    assert text == re.sub(r" \[\d+\](?=\n|$)", "", full.choices[0].message.content)
    assert chunks[-1].model_extra["sentences"] == full.model_extra["sentences"]


@pytest.mark.integration
def test_models_search_health_openapi(server):
    models = client(server).models.list()
    assert [m.id for m in models.data] == ["wetqa-bm25s-extractive"]
    import httpx

    hits = httpx.post(server.url + "/v1/search", json={"query": QUESTION, "k": 2}).json()["data"]
    assert 1 <= len(hits) <= 2 and hits[0]["article"] == "Artikel 266"  # only chunks with a query term are hits
    assert httpx.get(server.url + "/health").json()["status"] == "ok"
    spec = httpx.get(server.url + "/openapi.json").json()
    assert "/v1/chat/completions" in spec["paths"]
    chunk = httpx.get(server.url + "/v1/chunks/" + hits[0]["id"]).json()
    assert chunk["article_text"].startswith("1. De rechtbank")
    assert httpx.get(server.url + "/v1/chunks/nope").status_code == 404


@pytest.mark.integration
def test_bad_requests_in_openai_error_shape(server):
    c = client(server)
    with pytest.raises(openai.NotFoundError) as err:
        c.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": QUESTION}])
    assert err.value.status_code == 404 and "the model 'no-such-model' does not exist" in err.value.message
    assert err.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):  # OpenAI answers invalid requests with 400, not 422
        c.chat.completions.create(model="wetqa-bm25s-extractive", messages=[])
    with pytest.raises(openai.BadRequestError, match="n > 1"):
        c.chat.completions.create(model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": QUESTION}], n=2)
    with pytest.raises(openai.BadRequestError, match="text must be a string"):
        c.chat.completions.create(
            model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": [{"type": "text", "text": 5}]}]
        )
    with pytest.raises(openai.BadRequestError, match="empty"):
        c.chat.completions.create(model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": "   "}])
    with pytest.raises(openai.APIStatusError) as err:
        c.chat.completions.create(model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": "x" * 600}])
    assert err.value.status_code == 413
    import httpx

    r = httpx.post(
        server.url + "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(
        server.url + "/v1/chat/completions", content=b"x" * 1_100_000, headers={"content-type": "application/json"}
    )
    assert r.status_code == 413


@pytest.mark.integration
def test_api_key_required(index):
    with LiveServer(make_app([preset(index)], api_key="s3cret")) as s:
        with pytest.raises(openai.AuthenticationError):
            client(s).models.list()
        with pytest.raises(openai.AuthenticationError):
            client(s, api_key="wrong").models.list()
        assert client(s, api_key="s3cret").models.list().data[0].id == "wetqa-bm25s-extractive"


@pytest.mark.integration
def test_concurrency_limit_and_upstream_timeout(index):
    app = make_app([preset(index, backend=SlowExtractive(1.5))], max_concurrency=1, timeout=5)
    with LiveServer(app) as s:
        results = {}

        def first():
            results["first"] = client(s).chat.completions.create(
                model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": QUESTION}]
            )

        t = threading.Thread(target=first)
        t.start()
        time.sleep(0.5)
        err = refused(s)
        assert isinstance(err, openai.RateLimitError) and err.status_code == 429
        t.join()
        assert results["first"].choices[0].message.content
    with LiveServer(make_app([preset(index, backend=SlowExtractive(3))], timeout=0.5)) as s:
        err = refused(s)
        assert err.status_code == 504 and "did not answer within" in err.message


@pytest.mark.integration
def test_a_client_that_disconnects_has_its_work_cancelled_and_its_slot_freed(index):
    # Issue 55 item 4: abandoned work ran to its end and held its slot (everyone else got 429 for 19.5 s).
    backend = LaneExtractive(steps=40, seconds=0.1)  # 4 s of model calls if nobody stops it
    with LiveServer(make_app([preset(index, backend=backend)], max_concurrency=1, timeout=30)) as s:
        with pytest.raises(httpx.TimeoutException):
            _ask_from(s, "127.0.0.1", timeout=0.6)  # the client gives up and disconnects
        time.sleep(0.8)  # the server looks every 0.25 s; the work stops at its next model call
        stopped_at = backend.calls
        assert stopped_at < 25, "the abandoned work went on"
        time.sleep(0.3)
        assert backend.calls == stopped_at
        backend.steps = 1
        assert _ask_from(s, "127.0.0.1").status_code == 200  # its slot is free again


@pytest.mark.integration
def test_a_client_that_closes_its_socket_before_its_stream_begins_has_its_work_cancelled(index):
    # Closing a socket ends the client's input as half-closing does; the server probes with "102 Processing"
    # (which a half-closed client reads past) and finds the reset of one that left.
    import json
    import socket

    backend = LaneExtractive(steps=40, seconds=0.1)
    with LiveServer(make_app([preset(index, backend=backend)], max_concurrency=1, timeout=30)) as s:
        body = json.dumps({"model": "wetqa-bm25s-extractive", "stream": True,
                           "messages": [{"role": "user", "content": QUESTION}]}).encode()  # fmt: skip
        with socket.create_connection(("127.0.0.1", s.port)) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)  # fmt: skip
            time.sleep(0.5)
        time.sleep(1.2)
        stopped_at = backend.calls
        assert stopped_at < 30, "the abandoned work went on"
        time.sleep(0.3)
        assert backend.calls == stopped_at


@pytest.mark.integration
def test_a_half_closed_client_waiting_for_a_slow_answer_gets_interim_responses_then_its_answer(index):
    # The probe that finds closed sockets must not cost a half-closing client (nc -N) its answer: it reads
    # "102 Processing" interim responses (RFC 9110 15.2), then the answer.
    import json
    import socket

    backend = LaneExtractive(steps=8, seconds=0.1)
    with LiveServer(make_app([preset(index, backend=backend)], timeout=30)) as s:
        body = json.dumps({"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": QUESTION}]})
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
            sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n{body}".encode())  # fmt: skip
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
    assert reply.startswith(b"HTTP/1.1 102 "), reply[:100]
    final = reply[reply.index(b"HTTP/1.1 200") :]
    assert backend.calls == 8 and json.loads(final.split(b"\r\n\r\n", 1)[1])["choices"][0]["message"]["content"]


@pytest.mark.integration
def test_one_client_cannot_hold_every_slot_while_another_waits(index):
    # Issue 55 item 4: one client's stream of requests took every slot and kept retaking them. A client alone may
    # use every slot; while another waits (it was refused), a client holds at most its share (all but a quarter).
    from wetqa.serve.slots import client_share

    assert [client_share(n) for n in (1, 2, 4, 16)] == [1, 1, 3, 12]
    backend = LaneExtractive(steps=2, seconds=0.1)
    with LiveServer(make_app([preset(index, backend=backend)], max_concurrency=4, timeout=30)) as s:
        codes: list[int] = []
        until = time.time() + 4.0

        def greedy() -> None:  # one client keeping four requests in flight, asking again at once
            while time.time() < until:
                codes.append(_ask_from(s, "127.0.0.1").status_code)

        burst = [threading.Thread(target=greedy) for _ in range(4)]
        for t in burst:
            t.start()
        time.sleep(0.5)
        waited, other = time.time(), None
        while time.time() < until - 0.5:  # another client, retrying as the openai clients do
            other = _ask_from(s, "127.0.0.2")
            if other.status_code == 200:
                break
            time.sleep(0.3)
        waited = time.time() - waited
        for t in burst:
            t.join()
        assert other is not None and other.status_code == 200 and waited < 2.0
        assert codes.count(200) >= 4 and 429 in codes  # the greedy client was held to its share meanwhile


@pytest.mark.integration
def test_a_timed_out_request_keeps_its_slot_until_its_work_ends(index):
    # The worker thread is still generating after the 504: a new request must not start beside it.
    app = make_app([preset(index, backend=SlowExtractive(2.0))], max_concurrency=1, timeout=0.3)
    with LiveServer(app) as s:
        err = refused(s)
        assert err.status_code == 504
        assert isinstance(refused(s), openai.RateLimitError)
        time.sleep(2.2)  # the work ended: the slot is free again
        err = refused(s)
        assert err.status_code == 504  # timed out again, not refused


@pytest.mark.integration
def test_stream_usage_in_its_own_final_chunk(server):
    chunks = list(
        client(server).chat.completions.create(
            model="wetqa-bm25s-extractive",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])


@pytest.mark.integration
def test_security_headers_and_cors(index):
    import httpx

    with LiveServer(make_app([preset(index)], api_key="k", cors_origins=["https://app.example"])) as s:
        page = httpx.get(s.url + "/")
        csp = page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "'unsafe-inline'" not in csp.split("script-src")[1].split(";")[0]
        assert page.headers["x-content-type-options"] == "nosniff"
        pre = httpx.options(
            s.url + "/v1/chat/completions",
            headers={
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert pre.status_code == 200 and pre.headers["access-control-allow-origin"] == "https://app.example"
        other = httpx.options(
            s.url + "/v1/models", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
        )
        assert "access-control-allow-origin" not in other.headers
        docs = httpx.get(s.url + "/docs").text
        assert "cdn.jsdelivr.net" not in docs and "unpkg.com" not in docs
        assert '<script src="/docs/swagger-ui-bundle.js">' in docs  # served from here (tested in Chromium)
    with LiveServer(make_app([preset(index)], docs=False)) as s:
        assert httpx.get(s.url + "/docs").status_code == 404  # `wetqa serve --no-docs`


@pytest.mark.integration
def test_body_limit_holds_for_chunked_uploads(server):
    import httpx

    def body():
        for _ in range(200):
            yield b"x" * 10_000  # 2 MB, no Content-Length

    r = httpx.post(server.url + "/v1/chat/completions", content=body(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


@pytest.mark.integration
def test_generation_openai_backend_against_wetqa_itself(index):
    """The openai backend talks to any OpenAI-compatible server: here, wetqa's own endpoint.

    The whole wetqa prompt arrives as the question, so this server allows long questions.
    """
    from wetqa.generation import make_backend, resolve_generator

    with LiveServer(make_app([preset(index)], max_question_chars=20_000)) as s:
        backend = make_backend(resolve_generator("openai", model="wetqa-bm25s-extractive", base_url=s.url + "/v1"))
        p = Pipeline(open_index(index), backend, k=2)
        a = p.ask(QUESTION)
        assert "De rechtbank kan een ouder zijn gezag" in a.answer and a.usage.total_tokens > 0
        assert backend.total.total_tokens == a.usage.total_tokens
    with LiveServer(make_app([preset(index)], max_question_chars=100)) as s:
        backend = make_backend(resolve_generator("openai", model="wetqa-bm25s-extractive", base_url=s.url + "/v1"))
        with pytest.raises(Exception, match="413"):
            Pipeline(open_index(index), backend, k=2).ask(QUESTION)


@pytest.mark.unit
def test_fast_json_response_equals_the_standard_one_with_and_without_orjson(monkeypatch):
    import json

    from starlette.responses import JSONResponse

    from wetqa.serve import responses as serve_app

    content = {"text": 'Artikel 1:266 — het gezag "beëindigd"\n', "n": [1, 2.5, None, True], "nested": {"a": []}}
    standard = json.loads(JSONResponse(content).body)
    assert serve_app.orjson is not None  # the [serve] extra brings it
    assert json.loads(serve_app.FastJSONResponse(content).body) == standard
    monkeypatch.setattr(serve_app, "orjson", None)
    assert serve_app.FastJSONResponse(content).body == JSONResponse(content).body


@pytest.mark.integration
def test_an_upstream_answering_non_json_is_a_502_without_its_address(index):
    import http.server

    from wetqa.generation import make_backend, resolve_generator

    class NotJSON(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"<html>upstream proxy error</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), NotJSON)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
    backend = make_backend(resolve_generator("openai", model="m", base_url=url, timeout=5))
    try:
        with LiveServer(make_app([preset(index, backend=backend)])) as s:
            err = refused(s)
            assert err.status_code == 502
            assert "not an OpenAI chat completion" in err.message
            assert "127.0.0.1" not in err.response.text
    finally:
        upstream.shutdown()


@pytest.mark.integration
def test_support_is_marked_only_above_the_calibrated_threshold():
    from wetqa.corpus.records import Chunk
    from wetqa.generation import Answer, Citation
    from wetqa.generation.citing import SUPPORT_THRESHOLD, cite
    from wetqa.retrieval import Hit

    chunk = Chunk(
        "X_1",
        "DOC0001",
        "BWBR9990001",
        "2024-01-01",
        "Wet fictief gezag",
        "Artikel 266",
        1,
        "De rechtbank kan het gezag van een ouder beëindigen indien de ouder het gezag misbruikt.",
    )
    hit = Hit(chunk, 1.0, 1)
    answer = Answer(
        "?",
        "De rechtbank kan het gezag van een ouder beëindigen indien de ouder het gezag misbruikt. "
        "Het weer wordt morgen beter.",
        [Citation.from_hit(hit)],
        [hit],
    )
    out = cite(answer)
    assert SUPPORT_THRESHOLD == 0.3
    assert out.sentences[0].citation == 1 and out.sentences[0].supported
    assert out.sentences[1].citation is None and not out.sentences[1].supported
    # One shared stem ("gezag") used to be enough (scores normalised by the row's best): no longer.
    weak = Answer("?", "Het gezag over de fiets, de auto en de boot in de haven.", [Citation.from_hit(hit)], [hit])
    assert cite(weak).sentences[0].citation is None


@pytest.mark.unit
def test_openapi_documents_the_chat_responses_and_errors(extractive_served):
    from .serving import make_app

    spec = make_app([extractive_served()]).openapi()
    responses = spec["paths"]["/v1/chat/completions"]["post"]["responses"]
    ok = responses["200"]["content"]
    assert ok["application/json"]["schema"]["$ref"].endswith("/ChatCompletion") and "text/event-stream" in ok
    for status in ("400", "401", "404", "408", "413", "429", "502", "504"):
        assert responses[status]["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorResponse")
    schemas = spec["components"]["schemas"]
    assert {"citations", "sentences"} <= set(schemas["ChatCompletion"]["properties"])
    assert "ChatRequest" in schemas and "error" in schemas["ErrorResponse"]["properties"]
    # /docs showed the module docstring, Sphinx roles and all (":mod:`.protocol`"), to API users.
    info = spec["info"]
    assert ":mod:" not in info["description"] and "``" not in info["description"]
    assert "/v1/chat/completions" in info["description"] and info["version"] == wetqa.__version__


def _garbage_upstream(content_type: str, body: bytes):
    """A loopback server that answers every POST with 200 and this body."""
    import http.server

    class Garbage(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Garbage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.integration
@pytest.mark.parametrize(
    ("content_type", "body", "stream"),
    [
        ("application/json", b"not json {", False),
        ("application/json", b'{"unexpected": true}', False),
        ("text/event-stream", b"data: {broken\n\n", True),
        ("text/event-stream", b'data: {"choices": "not a list"}\n\n', True),
    ],
)
def test_upstream_garbage_is_a_502(index, content_type, body, stream):
    from wetqa.generation import make_backend, resolve_generator

    upstream = _garbage_upstream(content_type, body)
    url = f"http://127.0.0.1:{upstream.server_address[1]}/v1"
    backend = make_backend(resolve_generator("openai", model="m", base_url=url, timeout=5, max_retries=0))
    try:
        with LiveServer(make_app([preset(index, backend=backend)])) as s:
            r = httpx.post(
                s.url + "/v1/chat/completions",
                json={
                    "model": "wetqa-bm25s-extractive",
                    "stream": stream,
                    "messages": [{"role": "user", "content": QUESTION}],
                },
                timeout=30,
            )
            assert r.status_code == 502, r.text
            assert r.json()["error"]["code"] == "upstream_error" and "127.0.0.1" not in r.text
    finally:
        upstream.shutdown()


@pytest.mark.integration
def test_a_non_ascii_key_matches_what_a_client_sends_in_utf8(extractive_served):
    key = "sleutel-é"
    with LiveServer(make_app([extractive_served()], api_key=key)) as s:
        ok = httpx.get(s.url + "/v1/models", headers={"Authorization": ("Bearer " + key).encode("utf-8")})
        assert ok.status_code == 200, ok.text
        wrong = httpx.get(s.url + "/v1/models", headers={"Authorization": b"Bearer sleutel-e"})
        assert wrong.status_code == 401


@pytest.mark.unit
def test_an_empty_api_key_is_refused_not_taken_for_no_key(extractive_served, bm25s_index, monkeypatch, capsys):
    from wetqa.cli import main

    with pytest.raises(ValueError, match="empty API key"):
        make_app([extractive_served()], api_key="")
    assert main(["serve", "--index", str(bm25s_index), "--api-key", ""]) == 2
    assert "empty API key" in capsys.readouterr().err
    monkeypatch.setenv("WETQA_API_KEY", "")
    assert main(["serve", "--index", str(bm25s_index)]) == 2
    assert "WETQA_API_KEY" in capsys.readouterr().err


@pytest.mark.integration
def test_text_that_is_not_valid_unicode_is_a_400_at_the_edge(server):
    # A lone surrogate ("\ud800" in JSON) is a str to Python but no text: refused before any work.
    chat = '{"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": "gezag \\ud800 ouder"}]}'
    r = httpx.post(server.url + "/v1/chat/completions", content=chat, headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and "not valid Unicode" in r.json()["error"]["message"], r.text
    parts = '{"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": [{"type": "text", "text": "\\udfff"}]}]}'
    r = httpx.post(server.url + "/v1/chat/completions", content=parts, headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    r = httpx.post(
        server.url + "/v1/search", content='{"query": "\\ud800"}', headers={"Content-Type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"]["param"] == "query"


@pytest.mark.integration
def test_an_abstained_answer_carries_confidence_abstained_and_related_and_cites_nothing(articles_index):
    # The articles retriever: the pipeline the confidence model is calibrated for.
    refusing = preset(articles_index)
    refusing.pipeline = Pipeline(open_index(articles_index), ExtractiveBackend(), k=3, min_confidence=1.0)
    with LiveServer(make_app([refusing])) as live:
        openai_client = client(live)
        resp = openai_client.chat.completions.create(
            model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": QUESTION}]
        )
        extra = resp.model_extra
        assert extra["abstained"] is True and 0.0 <= extra["confidence"] < 1.0
        assert (
            extra["citations"] == []
            and extra["sentences"] == []
            or all(s["citation"] is None for s in extra["sentences"])
        )
        assert extra["related"] and extra["related"][0]["law"] == "Wet fictief gezag"
        assert "geen artikel gevonden" in resp.choices[0].message.content
        stream = openai_client.chat.completions.create(
            model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": QUESTION}], stream=True
        )
        chunks = list(stream)
        last = chunks[-1].model_extra
        assert last["abstained"] is True and last["citations"] == [] and last["related"]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "geen artikel gevonden" in text


class SlowRetriever:
    """The real index, slowed down: a retrieval that outlasts the request deadline."""

    def __init__(self, inner, seconds):
        self.inner, self.seconds, self.name = inner, seconds, inner.name

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def batch_search(self, queries, k=10, threads=1):
        time.sleep(self.seconds)
        return self.inner.batch_search(queries, k, threads)

    def search(self, query, k=10):
        return self.batch_search([query], k)[0]


@pytest.mark.integration
def test_a_504_says_which_stage_was_too_slow(index):
    slow = preset(index)
    # Off the event loop (a backend that is not inline-safe), as a server with a dense model runs.
    slow.pipeline = Pipeline(SlowRetriever(open_index(index), 2.0), SlowExtractive(0.0), k=3)
    with LiveServer(make_app([slow], timeout=0.5)) as s:
        err = refused(s)
        assert err.status_code == 504 and "retrieval did not finish within 0.5 s" in err.message


@pytest.mark.integration
def test_head_of_the_page_is_answered(server):
    assert httpx.head(server.url + "/").status_code == 200
    assert httpx.head(server.url + "/static/app.js").status_code == 200


@pytest.mark.integration
def test_a_busy_port_is_refused_before_serving_is_announced(index):
    import socket
    import subprocess
    import sys

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = subprocess.run(
            [sys.executable, "-m", "wetqa", "serve", "--index", str(index), "--host", "127.0.0.1", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert r.returncode == 2, r.stderr
    assert "serving" not in r.stdout
    assert f"127.0.0.1:{port}" in r.stderr and "--port" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.unit
def test_the_lead_naming_the_source_is_not_a_claim_and_links_are_encoded_with_the_version_date():
    from wetqa.corpus.bwb import official_url
    from wetqa.corpus.records import Chunk
    from wetqa.generation import Answer, Citation
    from wetqa.generation.citing import cite
    from wetqa.retrieval import Hit

    text = "De rechtbank kan het gezag van een ouder beëindigen indien de ouder het gezag misbruikt."
    chunk = Chunk("X_1", "DOC0001", "BWBR9990001", "2024-01-01", "Wet fictief gezag", "Artikel 266", 1, text)
    hit = Hit(chunk, 1.0, 1)
    out = cite(Answer("?", f"Wet fictief gezag, Artikel 266:\n{text}", [Citation.from_hit(hit)], [hit]))
    lead = out.sentences[0]
    assert lead.text == "Wet fictief gezag, Artikel 266:" and lead.lead is True and lead.citation == 1
    assert out.sentences[1].lead is False and out.sentences[1].supported
    assert out.citations[0].version_date == "2024-01-01"
    # An article number with a space, a colon or a slash is percent-encoded in the link.
    assert official_url("BWBR0005537", "Artikel 7:4 a", "artikel", "2024-01-01") == (
        "https://wetten.overheid.nl/jci1.3:c:BWBR0005537&artikel=7%3A4%20a&g=2024-01-01&z=2024-01-01"
    )
    # A bijlage links as one; a unit without a number of its own links to its regulation.
    assert official_url("BWBR0012289", "Bijlage 2", "bijlage").endswith("BWBR0012289&bijlage=2")
    assert official_url("BWBR0012289", "Paragraaf 1.1", "circulaire.divisie").endswith("jci1.3:c:BWBR0012289")
    assert out.citations[0].url.endswith("&artikel=266&g=2024-01-01&z=2024-01-01")


@pytest.mark.integration
def test_a_streaming_504_says_which_stage_was_too_slow(index):
    """The streaming 504 blamed the model when retrieval was the slow part."""
    body = {"model": "wetqa-bm25s-extractive", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    for retrieval, model, said in ((2.0, 0.0, "retrieval did not finish"), (0.0, 2.0, "the model did not answer")):
        slow = preset(index)
        slow.pipeline = Pipeline(SlowRetriever(open_index(index), retrieval), SlowExtractive(model), k=3)
        with LiveServer(make_app([slow], timeout=0.5)) as s:
            r = httpx.post(s.url + "/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 504 and said in r.json()["error"]["message"], r.text


@pytest.mark.integration
def test_invalid_requests_name_the_field_and_take_no_loose_types(server):
    def post(path, content):
        raw = content if isinstance(content, str) else None
        kwargs = {"content": raw, "headers": {"Content-Type": "application/json"}} if raw else {"json": content}
        return httpx.post(server.url + path, **kwargs)

    chat = {"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": QUESTION}]}
    # Loose types are refused, not read as true, 5 or 1.
    for field, value in (("stream", "true"), ("max_tokens", "5"), ("temperature", "0")):
        r = post("/v1/chat/completions", {**chat, field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, (field, r.text)
    r = post("/v1/search", {"query": QUESTION, "k": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "k", r.text
    # NaN is not "more than 2": it is not a number.
    nan = '{"model": "wetqa-bm25s-extractive", "temperature": NaN, "messages": [{"role": "user", "content": "gezag"}]}'
    r = post("/v1/chat/completions", nan)
    assert r.status_code == 400 and "finite" in r.json()["error"]["message"], r.text
    assert "less than or equal to 2" not in r.json()["error"]["message"]
    # A body that is not JSON: no byte offset for a param.
    r = post("/v1/chat/completions", '{"model": "wetqa-bm25s-extractive", "messages": [')
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] is None and "not valid JSON" in error["message"], r.text
    # Content of the wrong type: the field, not pydantic's names for the union's members.
    r = post("/v1/chat/completions", {**chat, "messages": [{"role": "user", "content": 5}]})
    error = r.json()["error"]
    assert r.status_code == 400 and error["param"] == "messages.0.content", r.text
    assert "function-after" not in error["message"] and "[" not in error["param"]


@pytest.mark.integration
def test_the_page_has_an_icon(server):
    r = httpx.get(server.url + "/favicon.ico")
    assert r.status_code == 200 and r.headers["content-type"].startswith("image/")
    assert 'rel="icon"' in httpx.get(server.url + "/").text


@pytest.mark.integration
def test_scope_fields_narrow_search_and_chat_and_name_the_field_they_refuse(server):
    # Both laws answer the question's words; each scope keeps only what it names.
    base = {"query": "gezag ouder rechtbank vreemdeling verblijfsvergunning", "k": 10}
    every = httpx.post(server.url + "/v1/search", json=base).json()
    assert {h["law_id"] for h in every["data"]} == {"BWBR9990001", "BWBR9990002"} and every["date"] is None
    only = httpx.post(server.url + "/v1/search", json={**base, "laws": ["BWBR9990002"]}).json()
    assert only["data"] and {h["law_id"] for h in only["data"]} == {"BWBR9990002"}
    amvb = httpx.post(server.url + "/v1/search", json={**base, "kind": ["AMvB"]}).json()
    assert {h["law_id"] for h in amvb["data"]} == {"BWBR9990002"}
    # A day between the two versions: the one that had not begun is left out, and the day is echoed.
    dated = httpx.post(server.url + "/v1/search", json={**base, "date": "2010-06-01"}).json()
    assert dated["date"] == "2010-06-01" and {h["law_id"] for h in dated["data"]} == {"BWBR9990002"}
    assert all(h["version_date"] and h["url"].startswith("https://wetten.overheid.nl/") for h in every["data"])
    for field, value, words in [
        ("kind", ["nonsense"], "no regulation of that kind"),
        ("laws", ["BWBR0000000"], "not in this index"),
        ("date", "1900-01-01", "before every version"),
    ]:
        r = httpx.post(server.url + "/v1/search", json={**base, field: value})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == field and words in error["message"] and "--" not in error["message"]
    for field, value in [("date", "2010-13-01"), ("date", "gisteren"), ("jurisdiction", "mars"), ("kind", "wet")]:
        r = httpx.post(server.url + "/v1/search", json={**base, field: value})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, (field, r.text)
    # The chat endpoint: the scope rides beside OpenAI's fields (the client's extra_body).
    c = client(server)
    question = "Wanneer heeft een vreemdeling rechtmatig verblijf of gezag?"
    ask = dict(model="wetqa-bm25s-extractive", messages=[{"role": "user", "content": question}])
    scoped = c.chat.completions.create(**ask, extra_body={"laws": ["BWBR9990002"], "date": "2010-06-01"})
    extra = scoped.model_extra
    assert extra["date"] == "2010-06-01" and extra["citations"]
    assert {x["law_id"] for x in extra["citations"]} == {"BWBR9990002"}
    streamed = list(c.chat.completions.create(**ask, stream=True, extra_body={"laws": ["BWBR9990002"]}))
    assert {x["law_id"] for x in streamed[-1].model_extra["citations"]} == {"BWBR9990002"}
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(**ask, extra_body={"kind": ["verdrag"]})
    assert err.value.body["param"] == "kind"


@pytest.mark.integration
def test_an_empty_scope_is_a_400_naming_the_field_that_empties_it(server):
    """Issue 40: a scope holding no article was answered "De vraag is te kort of te algemeen" with a 200."""
    base = {"query": "gezag ouder rechtbank vreemdeling verblijfsvergunning", "k": 10}
    question = {"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": QUESTION}]}
    for scope, field in [
        ({"jurisdiction": "bes"}, "jurisdiction"),  # the fixture holds no BES regulation
        ({"kind": ["wet"], "jurisdiction": "bes"}, "jurisdiction"),
        ({"laws": ["BWBR9990001"], "date": "2010-06-01"}, "date"),  # that law's text begins in 2024
    ]:
        for path, body in (("/v1/search", base), ("/v1/chat/completions", question)):
            r = httpx.post(server.url + path, json={**body, **scope})
            assert r.status_code == 400, (path, scope, r.text)
            error = r.json()["error"]
            assert error["param"] == field and "the scope is empty" in error["message"], (path, scope, error)
            assert "--" not in error["message"] and "\n" not in error["message"], error
    r = httpx.post(server.url + "/v1/search", json={**base, "date": "9999-12-31"})
    assert r.status_code == 200 and r.json()["data"], r.text


@pytest.mark.integration
def test_json_sent_as_curl_sends_it_by_default_is_read_and_other_bodies_say_to_send_json(server):
    """Issue 40: `curl -d '{...}'` sends application/x-www-form-urlencoded; the answer was "Input should be a
    valid dictionary..." with param null."""
    import json

    form = {"Content-Type": "application/x-www-form-urlencoded"}
    chat = {"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": QUESTION}]}
    r = httpx.post(server.url + "/v1/chat/completions", content=json.dumps(chat), headers=form)
    assert r.status_code == 200 and r.json()["citations"], r.text
    r = httpx.post(server.url + "/v1/search", content=json.dumps({"query": QUESTION}), headers=form)
    assert r.status_code == 200 and r.json()["data"], r.text
    r = httpx.post(server.url + "/v1/search", content=json.dumps({"query": QUESTION, "k": "x"}), headers=form)
    assert r.status_code == 400 and r.json()["error"]["param"] == "k", r.text  # then checked as JSON is
    for content, headers in (
        ("query=gezag", form),  # a real form
        ("[1, 2]", form),  # JSON, but no object
        (json.dumps({"query": QUESTION}), {"Content-Type": "text/plain"}),
    ):
        r = httpx.post(server.url + "/v1/search", content=content, headers=headers)
        assert r.status_code == 400, (content, headers, r.text)
        message = r.json()["error"]["message"]
        assert "Content-Type: application/json" in message and "\n" not in message, message
        assert "valid dictionary" not in message


@pytest.mark.integration
def test_a_client_that_half_closes_after_its_request_gets_its_answer(server):
    """Issue 40: a client that sends its request and then shuts its writing side (shutdown(SHUT_WR), as
    `nc -N` does) got no reply: the server took the end of its input for the end of the connection."""
    import json
    import socket

    def exchange(raw: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
            received = b""
            while chunk := s.recv(65536):  # until the server closes: it must, once it has answered
                received += chunk
            return received

    body = json.dumps({"query": QUESTION, "k": 3}).encode()
    head = f"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    reply = exchange(head.encode() + b"\r\n" + body)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["data"]
    chat = json.dumps(
        {"model": "wetqa-bm25s-extractive", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
    ).encode()
    head_chat = head.replace("/v1/search", "/v1/chat/completions").replace(str(len(body)), str(len(chat)))
    streamed = exchange(head_chat.encode() + b"\r\n" + chat)  # streamed too, when it half-closed before the stream
    assert streamed.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in streamed, streamed[:300]
    t0 = time.perf_counter()
    assert exchange(head.encode() + b"\r\n" + body[:10]) == b""  # half a body: nothing to answer, closed at once
    assert exchange(b"") == b"" and time.perf_counter() - t0 < 5


@pytest.mark.integration
def test_response_format_tools_and_logprobs_are_refused_not_ignored(server):
    """Issue 40: they were dropped without a word and answered with a 200, though the README says a setting
    the generator cannot honour is a 400 naming it."""
    body = {"model": "wetqa-bm25s-extractive", "messages": [{"role": "user", "content": QUESTION}]}
    tool = {"type": "function", "function": {"name": "zoek", "parameters": {"type": "object", "properties": {}}}}
    for field, value in [
        ("response_format", {"type": "json_object"}),
        ("response_format", {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}),
        ("tools", [tool]),
        ("logprobs", True),
        ("top_logprobs", 3),
    ]:
        for stream in (False, True):
            r = httpx.post(server.url + "/v1/chat/completions", json={**body, field: value, "stream": stream})
            assert r.status_code == 400, (field, value, r.text)
            error = r.json()["error"]
            assert (error["code"], error["param"]) == ("unsupported_parameter", field), error
            assert field in error["message"] and "\n" not in error["message"], error
    # What asks for nothing beyond a text answer is no setting to refuse.
    for field, value in [("response_format", {"type": "text"}), ("tools", []), ("logprobs", False)]:
        r = httpx.post(server.url + "/v1/chat/completions", json={**body, field: value})
        assert r.status_code == 200, (field, r.text)


@pytest.mark.unit
@pytest.mark.parametrize("split", [8, 12, 16, 20, 24])
def test_a_quoted_sentence_split_over_two_chunks_points_at_the_chunk_that_holds_it(split):
    """A defect hunt on the page: the extractive answer quotes an article whose chunking split a list item
    ("b. de werknemer wiens werkloosheid ... van het Buitengewoon" | "Besluit Arbeidsverhoudingen 1945
    ontheffing is verleend, en"); its marker went to another chunk that shares more of its words ("l. werkloos
    ... ontheffing is verleend ... Besluit Arbeidsverhoudingen 1945") but holds none of the quote."""
    from wetqa.corpus.records import Chunk
    from wetqa.generation import Answer, Citation
    from wetqa.generation.citing import cite
    from wetqa.retrieval import Hit

    def hit(part: int, text: str) -> Hit:
        return Hit(Chunk(f"W_{part}", f"DOC{part}", "BWBR0004045", "2024-01-01", "Werkloosheidswet", "Artikel 19",
                         part, text), 1.0, part)  # fmt: skip

    other = hit(2, "l. werkloos is ten gevolge van werkstaking of uitsluiting, tenzij voor de werknemer een ontheffing "
                   "is verleend op grond van artikel 8, derde lid, van het Buitengewoon Besluit Arbeidsverhoudingen 1945;")  # fmt: skip
    quote = (
        "b. de werknemer wiens werkloosheid uitsluitend het gevolg is van verkorting van de werktijd waarvoor op "
        "grond van artikel 8, derde lid, van het Buitengewoon Besluit Arbeidsverhoudingen 1945 ontheffing is verleend, en"
    )
    # The review: split elsewhere, the marker went to the tail, or (in the middle) back to the other chunk.
    words = quote.split()
    head = hit(6, "12. Het eerste lid is niet van toepassing op:\na. de werknemer, bedoeld in artikel 18;\n"
                  + " ".join(words[:split]))  # fmt: skip
    tail = hit(7, " ".join(words[split:]) + "\nc. de werknemer die herleeft.")
    hits = [other, head, tail]
    out = cite(Answer("?", quote, [Citation.from_hit(h) for h in hits], hits))
    assert out.sentences[0].citation == 2, out.sentences  # head: the chunk the quote starts in
    assert out.citations[1].sentences[out.sentences[0].support[0]].startswith("b. de werknemer wiens")


@pytest.mark.unit
def test_the_source_view_places_a_chunk_by_its_position_not_by_its_words():
    """The review: a short last chunk ("van toepassing.") whose words stand earlier in its article was put at
    that earlier place by the page (indexOf): the article shown twice over, the mark in the wrong place."""
    from wetqa.corpus.records import Chunk
    from wetqa.serve.service import ChunkLookup

    texts = ["1. Dit artikel is van toepassing.", "2. Het eerste lid is niet", "van toepassing."]
    parts = [Chunk(f"A_{i}", f"DOC{i}", "B", "2024-01-01", "Wet", "Artikel 1", i, t) for i, t in enumerate(texts, 1)]

    class Store:
        def article_of(self, row):
            return {"chunks": range(3)}

        def rows(self, rows):
            return [parts[r] for r in rows][::-1]  # in any order: the view orders them by part

    out = ChunkLookup._describe(Store(), (2, parts[2]))
    assert out.article_text == "\n".join(texts)
    assert out.text_start == len(texts[0]) + len(texts[1]) + 2 != out.article_text.index(out.text)
    assert out.article_text[out.text_start :] == "van toepassing."
