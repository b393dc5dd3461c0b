"""A real uvicorn server on 127.0.0.1 in a background thread, for tests and benchmarks."""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """wetqa's own server set-up (serve.server.server_config), as `wetqa serve` runs it."""

    def __init__(self, app, port: int | None = None, header_timeout: float = 10.0):
        from wetqa.serve.server import server_config

        self.port = port or free_port()
        self.server = uvicorn.Server(server_config(app, port=self.port, header_timeout=header_timeout))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class TokenUpstream:
    """A loopback OpenAI-compatible model server that emits a fixed answer token by token.

    It stands in for ``vllm serve``: each token is a server-sent event, ``delay`` seconds apart.
    With ``gate``, it stops after ``hold_after`` tokens until the gate is set (or 10 s pass, which it
    records): a test sets the gate when wetqa's first piece reaches it, which proves wetqa passed
    the stream on instead of waiting for the end. It cites the first DOC id of the prompt, records
    each request body, and counts streams whose client left early.
    """

    def __init__(
        self,
        words: int = 40,
        delay: float = 0.0,
        gate: threading.Event | None = None,
        hold_after: int = 12,
        stop_at: int | None = None,
        error_after: int | None = None,
    ):
        import asyncio
        import json
        import re

        self.requests: list[dict] = []
        self.left_early = 0
        self.gate_timed_out = False
        self.finished = 0
        app = FastAPI()
        body_words = " ".join(f"woord{i}" for i in range(words))

        def tokens_for(body: dict) -> list[str]:
            prompt = str(body["messages"][-1].get("content", ""))
            # The retrieved chunks follow the real question (the worked example before it has its own ids).
            chunks = re.split(r"\n(?:Vraag|Question): ", prompt)[-1]
            doc = (re.findall(r"^\[(DOC\d+)\]", chunks, re.M) or ["DOC0000"])[0]
            text = f"ANSWER: De rechtbank beslist. {body_words}.\nDOC IDS: {doc}"
            return re.findall(r"\S+\s*|\s+", text)

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self.requests.append(body)
            tokens = tokens_for(body)
            if stop_at is not None:
                tokens = tokens[:stop_at]
            usage = {"prompt_tokens": 100, "completion_tokens": len(tokens), "total_tokens": 100 + len(tokens)}
            base = {"id": "up-1", "created": 0, "model": body["model"]}
            if not body.get("stream"):
                return JSONResponse(
                    {
                        **base,
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": "".join(tokens)},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": usage,
                    }
                )

            def event(obj: dict) -> str:
                return f"data: {json.dumps({**base, 'object': 'chat.completion.chunk', **obj})}\n\n"

            async def events():
                try:
                    yield event({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
                    for n, tok in enumerate(tokens):
                        if n == error_after:  # as vLLM reports an engine failure inside a stream
                            error = {"message": "EngineCore encountered an issue.", "type": "InternalServerError"}
                            yield f"data: {json.dumps({'error': {**error, 'param': None, 'code': 500}})}\n\n"
                            return
                        if gate is not None and n == hold_after:
                            for _ in range(1000):
                                if gate.is_set():
                                    break
                                await asyncio.sleep(0.01)
                            else:
                                self.gate_timed_out = True
                        await asyncio.sleep(delay)  # a model's pace; 0 still lets the loop see a client leave
                        yield event({"choices": [{"index": 0, "delta": {"content": tok}, "finish_reason": None}]})
                    yield event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                    if (body.get("stream_options") or {}).get("include_usage"):
                        yield event({"choices": [], "usage": usage})
                    yield "data: [DONE]\n\n"
                    self.finished += 1
                except (asyncio.CancelledError, GeneratorExit):
                    self.left_early += 1
                    raise

            return StreamingResponse(events(), media_type="text/event-stream")

        self.app = app


def served_pipeline(name: str, index, generator=None, k: int = 3, pipeline=None):
    """A served pipeline over one index (a ready ``pipeline`` given is used as it is)."""
    from wetqa.generation import GeneratorConfig, PipelineOptions, PipelineSpec
    from wetqa.retrieval import RetrievalSpec
    from wetqa.serve import ServedPipeline

    spec = PipelineSpec(
        RetrievalSpec(index=(str(index),)), generator or GeneratorConfig("extractive"), PipelineOptions(k=k)
    )
    return ServedPipeline(name, spec, pipeline=pipeline)


def make_app(pipelines, **settings):
    """wetqa's app with a ServerConfig of these settings (``timeout`` is the request timeout)."""
    from wetqa.serve import ServerConfig, create_app

    if "timeout" in settings:
        settings["request_timeout"] = settings.pop("timeout")
    if "cors_origins" in settings:
        settings["cors_origin"] = tuple(settings.pop("cors_origins"))
    return create_app(pipelines, ServerConfig(**settings))


# ------------------------------------------------------------------------------- fairness under attack
def rare_words(store, low: int = 3, high: int = 20, limit: int = 5000) -> list[str]:
    """Words of the indexed chunks found in ``low``..``high`` of them: a question of six of them pulls
    articles no cached question touches, so their passages must be encoded."""
    import re
    from collections import Counter

    df: Counter[str] = Counter()
    for chunk in store:
        df.update(set(re.findall(r"[a-z]{7,}", chunk.text.lower())))
    return sorted(w for w, n in df.items() if low <= n <= high)[:limit]


async def search_loop(
    client, stop_at: float, body_of, latencies: list[float], failures: dict, path: str = "/v1/search"
) -> None:
    """POST ``path`` with ``body_of(n)`` until ``stop_at``; each request's seconds into ``latencies``."""
    import httpx

    n = 0
    while time.perf_counter() < stop_at:
        t = time.perf_counter()
        try:
            r = await client.post(path, json=body_of(n))
            problem = None if r.status_code == 200 else f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            problem = type(exc).__name__
        latencies.append(time.perf_counter() - t)
        if problem:
            failures[problem] = failures.get(problem, 0) + 1
        n += 1


def long_question(words: list[str], rng, chars: int = 2000) -> str:
    """A question of ``chars`` characters (the most a server answers by default) of rare words, each found in a
    few chunks: hundreds of tokens to encode, and candidates nobody read before."""
    out = "Wat zegt de wet over"
    while len(out) < chars - 1:
        out += " " + rng.choice(words)
    return out[: chars - 1] + "?"


async def long_question_round(url: str, questions: list[str], seconds: float, words: list[str], long_clients: int,
                              seed: int = 0) -> dict:  # fmt: skip
    """One chat client per question asks it again and again; ``long_clients`` more ask new questions of 2,000
    characters of rare words as fast as they are answered (issue 40). Latencies in seconds."""
    import asyncio
    import random

    import httpx

    rng = random.Random(seed)
    ordinary: list[float] = []
    long: list[float] = []
    failed_ordinary: dict = {}
    failed_long: dict = {}

    limits = httpx.Limits(max_connections=len(questions) + long_clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600) as client:
        model = (await client.get("/v1/models")).json()["data"][0]["id"]

        def chat(question: str) -> dict:
            return {"model": model, "messages": [{"role": "user", "content": question}]}

        t0 = time.perf_counter()
        stop_at = t0 + seconds

        async def timed(loops) -> float:
            await asyncio.gather(*loops)
            return time.perf_counter() - t0

        plain = [search_loop(client, stop_at, lambda n, q=q: chat(q), ordinary, failed_ordinary,
                             "/v1/chat/completions") for q in questions]  # fmt: skip
        attack = [search_loop(client, stop_at, lambda n: chat(long_question(words, rng)), long, failed_long,
                              "/v1/chat/completions") for _ in range(long_clients)]  # fmt: skip
        plain_seconds, long_seconds = await asyncio.gather(timed(plain), timed(attack))
    out = {"ordinary": _summary(ordinary, failed_ordinary, plain_seconds)}
    if long_clients:
        out["long"] = _summary(long, failed_long, long_seconds)
    return out


def _summary(latencies: list[float], failures: dict, seconds: float) -> dict:
    import statistics

    ordered = sorted(latencies) or [float("nan")]
    return {
        "n": len(latencies),
        "rps": len(latencies) / seconds,
        "p50": statistics.median(ordered),
        "p95": ordered[int(0.95 * (len(ordered) - 1))],
        "failed": sum(failures.values()),
        "failures": dict(failures),
    }


async def fairness_round(
    url: str, questions: list[str], seconds: float, attack_words: list[str] | None = None, seed: int = 0
) -> dict:
    """One client per question asks it again and again (its passages cached); with ``attack_words``, one
    more client asks six random ones of them with k=100 as fast as it is answered. Latencies in seconds."""
    import asyncio
    import random

    import httpx

    rng = random.Random(seed)
    cached: list[float] = []
    attacker: list[float] = []
    failed_cached: dict = {}
    failed_attack: dict = {}
    limits = httpx.Limits(max_connections=len(questions) + 1)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=600) as client:
        t0 = time.perf_counter()
        stop_at = t0 + seconds

        async def timed(loops) -> float:
            await asyncio.gather(*loops)
            return time.perf_counter() - t0

        cached_loops = [
            search_loop(client, stop_at, lambda n, q=q: {"query": q, "k": 10}, cached, failed_cached) for q in questions
        ]
        attack = [
            search_loop(
                client,
                stop_at,
                lambda n: {"query": " ".join(rng.sample(attack_words, 6)), "k": 100},
                attacker,
                failed_attack,
            )
            for _ in range(1 if attack_words else 0)
        ]
        # Each group's rate over its own time: the attacker's last request may end well after the round.
        cached_seconds, attack_seconds = await asyncio.gather(timed(cached_loops), timed(attack))
    out = {"cached": _summary(cached, failed_cached, cached_seconds)}
    if attack_words:
        out["attacker"] = _summary(attacker, failed_attack, attack_seconds)
    return out
