"""Real streaming and per-request settings on a real uvicorn server, driven by the official openai client.

The upstream model is a loopback OpenAI-compatible server (tests/serving.py::TokenUpstream) that
emits tokens one by one, as ``vllm serve`` does; wetqa's openai backend talks to it over HTTP.
"""

import json
import re
import socket
import threading
import time

import httpx
import openai
import pytest

from wetqa.generation import Generation, GeneratorConfig, Pipeline, make_backend, resolve_generator
from wetqa.generation.backends.extractive import ExtractiveBackend
from wetqa.retrieval import open_index
from wetqa.serve import ServedPipeline

from .serving import LiveServer, TokenUpstream, make_app, served_pipeline
from .tiny_models import tiny_llama_dir

pytestmark = pytest.mark.integration
QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


@pytest.fixture(scope="module")
def index(bm25s_index):
    return bm25s_index


def served(index, cfg: GeneratorConfig, name="wetqa-test", backend=None) -> ServedPipeline:
    p = served_pipeline(name, index, cfg, k=3)
    p.pipeline = Pipeline(open_index(index), backend or make_backend(cfg), k=3)
    return p


def upstream_pipeline(index, upstream: LiveServer, name="wetqa-test") -> ServedPipeline:
    cfg = resolve_generator("openai", model="tiny-upstream", base_url=upstream.url + "/v1", timeout=20.0)
    return served(index, cfg, name)


def client(server, **kw):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, **kw)


def test_the_upstream_stream_is_passed_through_as_it_comes(index):
    gate = threading.Event()
    fake = TokenUpstream(words=30, gate=gate, hold_after=14)
    with LiveServer(fake.app) as upstream, LiveServer(make_app([upstream_pipeline(index, upstream)])) as server:
        stream = client(server).chat.completions.create(
            model="wetqa-test",
            stream=True,
            stream_options={"include_usage": True},
            messages=[{"role": "user", "content": QUESTION}],
            temperature=0.3,
            max_tokens=300,
            stop=["###"],
            seed=7,
        )
        pieces, chunks = [], []
        for chunk in stream:
            chunks.append(chunk)
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
                gate.set()  # the upstream has held the rest of its answer back until now
        assert not fake.gate_timed_out, "the first piece reached the client only after the whole answer"
        text = "".join(pieces)
        assert len(pieces) > 3 and text.startswith("De rechtbank beslist. woord0")
        assert "DOC IDS" not in text and "ANSWER" not in text  # the format's markers never reach the client
        final = [c for c in chunks if c.choices and c.choices[0].finish_reason]
        assert final[-1].choices[0].finish_reason == "stop"
        assert final[-1].model_extra["citations"][0]["article"] == "Artikel 266"
        # The sources, dated by their text's version, then the note on a text older than a year.
        assert "Bronnen:\n[1] Wet fictief gezag, Artikel 266 (tekst van 1 januari 2024)\nLet op:" in text
        assert text.endswith("(controleer de actuele tekst via de link).")
        assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 10
        sent = fake.requests[-1]
        assert sent["stream"] is True and sent["temperature"] == 0.3 and sent["max_tokens"] == 300
        assert sent["stop"] == ["###"] and sent["seed"] == 7


def test_a_client_that_leaves_mid_stream_stops_the_upstream_and_frees_its_slot(index):
    gate = threading.Event()  # never set: the upstream holds its answer until the client leaves
    fake = TokenUpstream(words=30, gate=gate, hold_after=14)
    with LiveServer(fake.app) as upstream:
        app = make_app([upstream_pipeline(index, upstream)], max_concurrency=1)
        with LiveServer(app) as server:
            with httpx.Client(base_url=server.url, timeout=20) as http:
                body = {"model": "wetqa-test", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
                with http.stream("POST", "/v1/chat/completions", json=body) as resp:
                    for line in resp.iter_lines():
                        if '"content":"De' in line:
                            break  # the first words arrived; leave
                deadline = time.time() + 10
                while fake.left_early == 0 and time.time() < deadline:
                    time.sleep(0.05)
                assert fake.left_early == 1, "the upstream kept generating for a client that had left"
                # The one slot is free again: the next request is answered, not refused with 429.
                deadline = time.time() + 10
                while True:
                    gate.set()
                    r = http.post("/v1/chat/completions", json={**body, "stream": False})
                    if r.status_code != 429 or time.time() > deadline:
                        break
                    time.sleep(0.05)
                assert r.status_code == 200, r.text


def test_transformers_tokens_stream_as_they_are_generated(index, tmp_path):
    model = tiny_llama_dir(tmp_path / "llama")
    # The text format streams token by token (a structured answer streams whole sentences, which random
    # weights never finish within 60 tokens; tests/test_vllm.py streams those with a real model).
    cfg = resolve_generator("transformers", model=str(model), max_tokens=60, temperature=0.0, structured=False)
    with LiveServer(make_app([served(index, cfg)])) as server:
        pieces = []
        for chunk in client(server).chat.completions.create(
            model="wetqa-test", stream=True, messages=[{"role": "user", "content": QUESTION}]
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        whole = client(server).chat.completions.create(
            model="wetqa-test", messages=[{"role": "user", "content": QUESTION}]
        )
        # Random weights: any text, but greedy decoding makes the streamed and the whole answer the same.
        streamed = "".join(pieces)
        assert len(pieces) > 2
        assert re.sub(r" \[\d+\](?=\n|$)", "", whole.choices[0].message.content).startswith(
            streamed.split("\n\nBronnen")[0].strip()[:40]
        )
        # A per-request cap on new tokens is honoured and reported.
        short = client(server).chat.completions.create(
            model="wetqa-test", messages=[{"role": "user", "content": QUESTION}], max_completion_tokens=3
        )
        assert short.usage.completion_tokens == 3 and short.choices[0].finish_reason == "length"


def unmarked(text: str) -> str:
    return re.sub(r" \[\d+\]", "", text)


def test_stop_and_max_tokens_hold_for_the_whole_content_streamed_or_not(index):
    """The returned text never holds a stop string, the source list wetqa appends included, and
    completion_tokens counts what the generator wrote (at most max_tokens), not the appended list."""
    with LiveServer(make_app([served(index, GeneratorConfig("extractive"), backend=ExtractiveBackend())])) as server:
        c = client(server)
        ask = dict(model="wetqa-test", messages=[{"role": "user", "content": QUESTION}])
        full = c.chat.completions.create(**ask).choices[0].message.content
        assert "\n\nBronnen:\n[1] " in full
        for stop in ("Bronnen", "[1] "):
            whole = c.chat.completions.create(**ask, stop=[stop])
            pieces = [
                ch.choices[0].delta.content or ""
                for ch in c.chat.completions.create(**ask, stop=[stop], stream=True)
                if ch.choices
            ]
            for text in (whole.choices[0].message.content, "".join(pieces)):  # the stream has no [n] markers
                assert stop not in text and unmarked(full).startswith(unmarked(text).rstrip()[:200])
                answer = unmarked(text).split("\n\nBronnen")[0]
                assert unmarked(full).split("\n\nBronnen")[0].split() == answer.split(), text  # the answer whole
        # A stop string in wetqa's own layout of the answer (its line breaks, its markers) cuts nothing of it:
        # the review found "\n" cut the non-streamed answer after its first sentence, and " [" before its marker.
        r = httpx.post(server.url + "/v1/chat/completions", json={**ask, "stop": [" ["]}).json()
        written = " ".join(s["text"] for s in r["sentences"])
        assert unmarked(r["choices"][0]["message"]["content"].split("\n\nBronnen")[0]).split() == written.split(), r
        for stream in (False, True):
            r = httpx.post(
                server.url + "/v1/chat/completions",
                json={**ask, "max_tokens": 5, "stream": stream, "stream_options": {"include_usage": True}}
                if stream
                else {**ask, "max_tokens": 5},
            )
            if stream:
                events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: {")]
                usage = events[-1]["usage"]
            else:
                usage = r.json()["usage"]
            assert usage["completion_tokens"] == 5, (stream, usage)
            assert usage["total_tokens"] == usage["prompt_tokens"] + 5


def test_per_request_settings_are_honoured_or_refused_with_400(index):
    with LiveServer(make_app([served(index, GeneratorConfig("extractive"), backend=ExtractiveBackend())])) as server:
        c = client(server)
        ask = dict(model="wetqa-test", messages=[{"role": "user", "content": QUESTION}])
        full = c.chat.completions.create(**ask, temperature=0, seed=3)
        assert full.choices[0].finish_reason == "stop"
        cut = c.chat.completions.create(**ask, max_tokens=5)
        answer = cut.choices[0].message.content.split("\n\nBronnen")[0]
        assert cut.choices[0].finish_reason == "length" and len(re.sub(r" \[\d+\]", "", answer).split()) == 5
        stopped = c.chat.completions.create(**ask, stop=["gezag"])
        assert "gezag" not in stopped.choices[0].message.content.split("\n\nBronnen")[0]
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(**ask, temperature=0.7)
        assert err.value.code == "unsupported_parameter" and err.value.param == "temperature"
        assert "does not sample" in err.value.message
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(**ask, max_tokens=5, max_completion_tokens=6)
        assert err.value.param == "max_tokens"
        with pytest.raises(openai.BadRequestError) as err:
            c.chat.completions.create(**ask, stop=["a", "b", "c", "d", "e"])
        assert err.value.param == "stop"


class NoSettings(ExtractiveBackend):
    """A backend that declares no per-request settings (as a third-party backend might)."""

    supports = frozenset()


def test_a_backend_without_a_setting_refuses_it_and_streams_refusals_as_400(index):
    with LiveServer(make_app([served(index, GeneratorConfig("extractive"), backend=NoSettings())])) as server:
        for stream in (False, True):
            r = httpx.post(
                server.url + "/v1/chat/completions",
                json={
                    "model": "wetqa-test",
                    "stream": stream,
                    "seed": 1,
                    "messages": [{"role": "user", "content": QUESTION}],
                },
            )
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "seed" and r.json()["error"]["code"] == "unsupported_parameter"


class FastLocalModel(ExtractiveBackend):
    """A backend that streams from this process, as a local model does: many small pieces, fast."""

    inline_safe = False
    completed = 0  # streams that ran to their end

    def stream(self, request):
        text = "ANSWER: " + " ".join(f"woord{i}" for i in range(2000)) + "\nDOC IDS:"
        for i in range(0, len(text), 4):
            yield text[i : i + 4]
        type(self).completed += 1
        yield Generation(text=text)


@pytest.mark.parametrize("source", ["upstream", "paced upstream", "local model"])
def test_early_disconnects_end_quietly(index, caplog, source):
    fake = TokenUpstream(words=400, delay=0.002 if source == "paced upstream" else 0.0)
    with LiveServer(fake.app) as upstream:
        if source == "local model":
            pipeline = served(index, GeneratorConfig("extractive"), backend=FastLocalModel())
        else:
            pipeline = upstream_pipeline(index, upstream)
        with LiveServer(make_app([pipeline], max_concurrency=64)) as server:
            body = json.dumps(
                {"model": "wetqa-test", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
            ).encode()
            request = (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            caplog.set_level("DEBUG")
            for _ in range(60):
                s = socket.create_connection(("127.0.0.1", server.port))
                s.sendall(request)
                s.recv(200)  # the status line and the first bytes, then gone
                s.close()
            deadline = time.time() + 20
            while source != "local model" and fake.left_early + fake.finished < 60 and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
            noisy = [r.getMessage() for r in caplog.records if r.levelno >= 30]
            assert noisy == []
            if source != "local model":
                assert fake.left_early > 0  # the upstream's work really ended early
            else:
                # Each stream is ~4,000 pieces and the worker may run only STREAM_WINDOW ahead of what
                # was sent, so a stream that ran to its end means the leave went unnoticed (24-54 of 60
                # did before the back-pressure; 0 after, also with both cores busy).
                assert FastLocalModel.completed <= 2


def test_slow_clients_are_cut_off_and_others_still_served(index):
    app = make_app([served(index, GeneratorConfig("extractive"), backend=ExtractiveBackend())], body_timeout=1.0)
    with LiveServer(app, header_timeout=1.0) as server:
        # 60 slowloris connections: a request line, then a header byte every 0.2 s.
        slow = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(60)]
        silent = socket.create_connection(("127.0.0.1", server.port))  # connects and sends nothing
        for s in slow:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
            s.setblocking(False)
        closed: set[int] = set()
        start = time.time()
        while len(closed) < len(slow) and time.time() - start < 8:
            for n, s in enumerate(slow):
                if n in closed:
                    continue
                try:
                    s.send(b"X")
                    if s.recv(1) == b"":
                        closed.add(n)
                except BlockingIOError:
                    pass
                except OSError:  # reset or broken pipe: the server closed it
                    closed.add(n)
            time.sleep(0.2)
        waited = time.time() - start
        assert len(closed) == 60, f"{60 - len(closed)} slow connections still open after {waited:.1f} s"
        assert waited < 5
        silent.settimeout(5)
        assert silent.recv(1) == b""  # closed too
        # A body that trickles in past its deadline gets 408, and the connection is closed.
        trickle = socket.create_connection(("127.0.0.1", server.port))
        trickle.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n{"
        )
        trickle.settimeout(5)
        reply = b""
        while chunk := trickle.recv(4096):  # headers and body may come in separate segments; the server closes
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 408") and b"request_timeout" in reply
        # Meanwhile everyone else is answered.
        r = httpx.post(
            server.url + "/v1/chat/completions",
            json={"model": "wetqa-test", "messages": [{"role": "user", "content": QUESTION}]},
        )
        assert r.status_code == 200
        for s in [*slow, silent, trickle]:
            s.close()


def test_an_upstream_failing_mid_stream_is_an_error_event_with_its_message(index):
    fake = TokenUpstream(words=40, error_after=20)
    with LiveServer(fake.app) as upstream, LiveServer(make_app([upstream_pipeline(index, upstream)])) as server:
        body = {"model": "wetqa-test", "stream": True, "messages": [{"role": "user", "content": QUESTION}]}
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, timeout=20) as resp:
            assert resp.status_code == 200  # the stream had started
            lines = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    error = json.loads(lines[-2][6:])["error"]
    assert error["code"] == "upstream_error" and "EngineCore encountered an issue" in error["message"]
    assert "127.0.0.1" not in error["message"]


class EndlessLocalModel(ExtractiveBackend):
    """A local model with a very long answer; counts the pieces it was allowed to produce."""

    inline_safe = False
    produced = 0

    def stream(self, request):
        for i in range(5_000):
            type(self).produced += 1
            yield f" woord{i}" + " vulling" * 2500  # ~20 kB a piece: the socket buffers fill within seconds
        yield Generation(text="ANSWER: ...\nDOC IDS:")


def test_a_client_that_stops_reading_holds_no_slot_past_the_timeout(index):
    pipeline = served(index, GeneratorConfig("extractive"), backend=EndlessLocalModel())
    with LiveServer(make_app([pipeline], max_concurrency=1, timeout=1.0)) as server:
        body = json.dumps({"model": "wetqa-test", "stream": True, "messages": [{"role": "user", "content": QUESTION}]})
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the server must wait for it
        s.connect(("127.0.0.1", server.port))
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n{body}".encode()
        )
        s.recv(100)  # it started; from now on the client reads nothing and stays connected
        time.sleep(4)  # the socket buffers fill (~200 pieces here), the 1 s timeout passes, the worker stops
        produced = EndlessLocalModel.produced
        assert produced < 2_000  # the worker waited for the client instead of queueing the answer in memory
        time.sleep(1)
        assert EndlessLocalModel.produced == produced  # and then gave up
        # The slot is free again although the stalled connection is still open.
        r = httpx.post(
            server.url + "/v1/chat/completions",
            json={"model": "wetqa-test", "messages": [{"role": "user", "content": QUESTION}]},
            timeout=10,
        )
        assert r.status_code != 429, r.text
        s.close()


def test_a_stream_gives_its_slot_back_before_its_client_sees_the_end(index):
    """A client that asks again the moment its stream ends must find its slot free (16 clients on 16
    slots got an occasional 429): the slot is released before the last event is handed over."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from wetqa.generation import Sampling
    from wetqa.serve.streaming import WorkerSource

    released = threading.Event()

    def slow_release():
        time.sleep(0.3)  # a worker thread descheduled between its last item and its release
        released.set()

    async def drain():
        with ThreadPoolExecutor(1) as workers:
            source = WorkerSource(
                Pipeline(open_index(index), ExtractiveBackend(), k=3),
                "Wanneer kan de rechtbank het gezag van een ouder beëindigen?",
                Sampling(),
                workers,
                10.0,
                None,
                slow_release,
            )
            while True:
                kind, _ = await source.next()
                if kind != "item":
                    return kind, released.is_set()

    kind, slot_free = asyncio.run(drain())
    assert kind == "end" and slot_free


class StructuredLocalModel(ExtractiveBackend):
    """A local backend that writes a structured answer citing the retrieved DOC ids from last to first."""

    structured = True

    def stream(self, request):
        ids = [h.chunk.doc_id for h in request.hits]
        answer = {
            "answer": [
                {"sentence": "De rechtbank beëindigt het gezag.", "sources": ids[::-1]},
                {"sentence": "Dat doet zij op verzoek.", "sources": ids[-1:]},
            ]
        }
        text = json.dumps(answer, ensure_ascii=False)
        for i in range(0, len(text), 5):
            yield text[i : i + 5]
        yield Generation(text=text)

    def generate(self, requests):
        return [list(self.stream(r))[-1] for r in requests]


def test_a_structured_answer_streams_sentence_by_sentence_with_its_sources(index):
    """Each sentence arrives whole, with [n] markers numbered as the final citations are, and names its
    sources; the streamed text is the non-streamed answer's, and the sentences list their citations."""
    question = "Wanneer kan de rechtbank het gezag van een ouder beëindigen of een vreemdeling verblijf weigeren?"
    backend = StructuredLocalModel()
    with LiveServer(make_app([served(index, GeneratorConfig("extractive"), backend=backend)])) as server:
        messages = [{"role": "user", "content": question}]
        chunks = list(client(server).chat.completions.create(model="wetqa-test", stream=True, messages=messages))
        whole = client(server).chat.completions.create(model="wetqa-test", messages=messages)
    sentences = [c for c in chunks if c.model_extra.get("sentence")]
    assert [c.choices[0].delta.content for c in sentences] == [
        "De rechtbank beëindigt het gezag [1][2].",
        " Dat doet zij op verzoek [1].",
    ]
    final = chunks[-1].model_extra
    assert sentences[0].model_extra["sentence"]["citations"] == [1, 2]
    assert [s["index"] for s in sentences[0].model_extra["sources"]] == [1, 2]
    assert [c["doc_id"] for c in final["citations"]] == [s["doc_id"] for s in sentences[0].model_extra["sources"]]
    assert [s["citations"] for s in final["sentences"]] == [[1, 2], [1]]
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content
    assert streamed.startswith("De rechtbank beëindigt het gezag [1][2]. Dat doet zij op verzoek [1].\n\nBronnen:\n[1]")
