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
