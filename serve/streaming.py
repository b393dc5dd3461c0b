"""Server-sent events of an answer as the generator writes it.

Two sources of pieces, one interface (``await next()`` -> ``("item", text | Answer)``, ``("end", None)``
or ``("error", APIError)``; ``await close()``):

- :class:`UpstreamSource`: a backend that streams over HTTP (openai against ``vllm serve``) is read
  on the event loop, without a thread; closing it closes the upstream's stream at once.
- :class:`WorkerSource`: any other backend runs in a worker thread that hands each piece over, at
  most ``window`` pieces ahead of what the client has been sent (back-pressure: a fast local model
  would otherwise write its whole answer into memory before the server noticed the client left).

Each source gives its concurrency slot back exactly once, when its work has ended.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from typing import Any

from pydantic import BaseModel

from wetqa.cancel import Cancelled, cancellable
from wetqa.generation import Answer, GenerationError, Pipeline, Request, Sampling, StreamedSentence
from wetqa.generation.structured import marked_text
from wetqa.retrieval import RetrievalError

from .errors import APIError, internal_error, upstream_error
from .protocol import ChatCompletionChunk, ChunkChoice, Delta, SentenceSource, StreamedSentenceOut, Usage
from .responses import model_bytes

# How many pieces a worker thread may stream ahead of what has been sent to the client.
STREAM_WINDOW = 64
Event = tuple[str, Any]


def failure(exc: BaseException) -> Event:
    if isinstance(exc, (GenerationError, RetrievalError)):
        return ("error", upstream_error(exc))
    return ("error", internal_error(exc))


class _Once:
    """Calls ``fn`` the first time only (a slot is given back once, whichever path ends the work)."""

    def __init__(self, fn: Callable[[], None]):
        self._fn, self._done, self._lock = fn, False, threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        self._fn()


class UpstreamSource:
    def __init__(self, pipeline: Pipeline, request: Request, timeout: float, too_slow: APIError, release):
        self.pieces = pipeline.astream_request(request)
        self.timeout, self.too_slow, self.release = timeout, too_slow, _Once(release)

    async def next(self) -> Event:
        try:
            return ("item", await asyncio.wait_for(anext(self.pieces), self.timeout))
        except StopAsyncIteration:
            self.release()  # before the client sees the end (it may ask again at once)
            return ("end", None)
        except TimeoutError:
            return ("error", self.too_slow)
        except Exception as exc:  # noqa: BLE001 - reported to the client
            return failure(exc)

    async def close(self) -> None:
        try:
            await self.pieces.aclose()
        finally:
            self.release()


class WorkerSource:
    def __init__(
        self,
        pipeline: Pipeline,
        question: str,
        sampling: Sampling,
        workers: Executor,
        timeout: float,
        too_slow: Callable[[str], APIError],
        release,
        window: int = STREAM_WINDOW,
        context=None,
    ):
        self.loop = asyncio.get_running_loop()
        self.context = context  # the conversation the question is the last message of (None: read alone)
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.leave = threading.Event()
        self.room = threading.Semaphore(window)
        self.pipeline, self.question, self.sampling = pipeline, question, sampling
        self.timeout, self.too_slow, self.release = timeout, too_slow, _Once(release)
        self.stage = "retrieval"  # what a deadline waits for: the 504 names it
        try:
            # Its leave event is the work's cancel event: a client gone stops it at its next model call.
            self.loop.run_in_executor(workers, cancellable, self.leave, self._work)
        except BaseException:
            self.release()
            raise

    def _hand_over(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, event)
        except RuntimeError:  # the loop has closed (server shutting down): nobody is listening
            self.leave.set()

    def _wait_for_room(self) -> bool:
        # A client that stops reading for the whole timeout loses its stream's work (and slot).
        waited = 0.0
        while not self.room.acquire(timeout=0.1):
            waited += 0.1
            if self.leave.is_set() or waited >= self.timeout:
                return False
        return not self.leave.is_set()

    def _work(self) -> None:
        # The slot is given back when the work has ended (not when the client stopped waiting), and
        # before the last event is handed over: a client that asks again the moment its stream ends
        # finds its slot free.
        try:
            request = self.pipeline.prepare(self.question, self.sampling, context=self.context)
            self.stage = "model"
            items = self.pipeline.stream_request(request)
            try:
                for item in items:
                    if not self._wait_for_room():
                        self.leave.set()
                        break
                    self._hand_over(("item", item))
            finally:
                items.close()
            last: Event = ("end", None)
        except Cancelled:  # the client has gone: nobody to tell
            last = ("end", None)
        except Exception as exc:  # noqa: BLE001 - reported to the client
            last = failure(exc)
        finally:
            self.release()
        self._hand_over(last)

    async def next(self) -> Event:
        try:
            event = await asyncio.wait_for(self.queue.get(), self.timeout)
        except TimeoutError:
            self.leave.set()
            return ("error", self.too_slow(self.stage))
        self.room.release()
        return event

    async def close(self) -> None:
        self.leave.set()  # the worker stops at its next piece
        self.room.release()  # and does not wait for room to find that out


class ChunkWriter:
    """``data: {...}`` lines of one completion's stream, each a :class:`~.protocol.ChatCompletionChunk`."""

    def __init__(self, cid: str, created: int, model: str):
        self.id, self.created, self.model = cid, created, model

    def chunk(self, delta: Delta, finish: str | None = None, **fields: Any) -> ChatCompletionChunk:
        """A chunk of the answer; ``fields``: what else it carries (usage, citations, a sentence...)."""
        choice = ChunkChoice(index=0, delta=delta, finish_reason=finish)
        return ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[choice], **fields)

    def event(self, delta: Delta, finish: str | None = None, **fields: Any) -> str:
        return self.data(self.chunk(delta, finish, **fields))

    def usage(self, usage: Usage) -> str:
        # As OpenAI does: the usage in a chunk of its own, with no choices, after the last one.
        return self.data(
            ChatCompletionChunk(id=self.id, created=self.created, model=self.model, choices=[], usage=usage)
        )

    @staticmethod
    def data(body: BaseModel) -> str:
        """A server-sent event of a chunk (or of an error, mid-stream)."""
        return f"data: {model_bytes(body).decode()}\n\n"


class SentenceNumbers:
    """A structured answer's sentences as the client reads them: ``[n]`` numbered as the final
    ``citations`` are (sources in order of first mention), each chunk naming the sentence's sources."""

    def __init__(self) -> None:
        self.numbers: dict[str, int] = {}
        self.count = 0

    def event(self, writer: ChunkWriter, item: StreamedSentence) -> tuple[str, str]:
        """(the text sent, its event)."""
        ns = [self.numbers.setdefault(c.doc_id, len(self.numbers) + 1) for c in item.citations]
        text = (" " if self.count else "") + marked_text(item.text, ns)
        self.count += 1
        sources = [SentenceSource(index=n, **c.to_json()) for n, c in zip(ns, item.citations)]
        sentence = StreamedSentenceOut(text=item.text, citations=ns)
        return text, writer.event(Delta(content=text), sentence=sentence, sources=sources)


async def sse_events(
    first: Event, source, writer: ChunkWriter, final: Callable[[Answer, str], list[str]]
) -> AsyncIterator[str]:
    """The stream's events: a role chunk, the text pieces (or structured sentences, each with its
    sources), the final chunks (``final``), ``[DONE]``."""
    sent: list[str] = []
    numbers = SentenceNumbers()
    kind, item = first
    yield writer.event(Delta(role="assistant", content=""))
    while kind == "item":
        if isinstance(item, Answer):
            for line in final(item, "".join(sent)):
                yield line
        elif isinstance(item, StreamedSentence):
            text, event = numbers.event(writer, item)
            sent.append(text)
            yield event
        else:
            sent.append(item)
            yield writer.event(Delta(content=item))
        # A turn of the event loop between events: if the client has gone, the server learns it here
        # (and sends nothing more) instead of writing every remaining event to a dead socket, which
        # asyncio logs as "socket.send() raised exception." per write.
        await asyncio.sleep(0)
        kind, item = await source.next()
    if kind == "error":
        # Mid-stream the status line has gone: the error travels as an event, as OpenAI's does.
        yield writer.data(item.body())
    yield "data: [DONE]\n\n"
