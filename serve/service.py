"""The chat service: the served pipelines and what it takes to answer many clients with them.

It holds the concurrency slots (a request over the limit gets 429; a slot is held until the
request's work has ended, also after a 504 and after a streaming client leaves), a thread per slot
for the model work, the request deadline, and the chunk lookup for the page's source view. Routes
(:mod:`.routes`) take it from ``app.state.service``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from wetqa.cancel import cancellable
from wetqa.cancel import check as check_cancelled
from wetqa.corpus.sources import document_fields
from wetqa.generation import (
    Answer,
    AsyncStreamingBackend,
    GenerationError,
    Sampling,
    UnsupportedSetting,
    check_sampling,
    cut_at_stop,
)
from wetqa.generation.citing import Cited
from wetqa.generation.pipeline import ScopedPipeline
from wetqa.retrieval import InvalidSetting, RetrievalError, chunks_of
from wetqa.retrieval.engines.store import ArticleStore, ChunkStore
from wetqa.retrieval.engines.versions import echoed
from wetqa.retrieval.scope import DEFAULT_SCOPE, Scope, check_scope

from .config import ServerConfig
from .errors import APIError, ClientGone, upstream_error
from .pipelines import ServedPipeline
from .protocol import (
    ArticleVersions,
    ChatCompletion,
    ChatRequest,
    ChunkResponse,
    Delta,
    Health,
    ModelCard,
    ModelList,
    SearchHit,
    SearchRequest,
    SearchResponse,
    Usage,
    answer_fields,
    cite,
    text_of,
)
from .responses import ClosingStreamingResponse, ModelResponse
from .slots import Refusal, Slots
from .streaming import ChunkWriter, UpstreamSource, WorkerSource, sse_events


def word_usage(answer: Answer, question: str) -> Usage:
    """The backend's token counts; the extractive backend has no tokenizer, so its words. Either way what the
    generator wrote (at most max_tokens), not the source list wetqa appends to the content."""
    prompt, completion = answer.usage.prompt_tokens, answer.usage.completion_tokens
    if prompt + completion == 0:
        prompt, completion = len(question.split()), len(answer.answer.split())
    return Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)


def cited_of(answer: Answer) -> Cited:
    """The answer's cite stage (made by the pipeline; once here for an answer made otherwise)."""
    return answer.cited if answer.cited is not None else cite(answer)


def appended(cited: Cited, stops: Sequence[str] = ()) -> str:
    """What wetqa appends to an answer's text: its source list, cut at the request's stop strings (the
    generator cut its own text; the answer's layout, its line breaks and [n] markers, is wetqa's, and a stop
    string in it would cut the answer itself)."""
    return cut_at_stop(f"\n\n{cited.references}", stops) if cited.references else ""


class ChunkLookup:
    """A chunk by id with its whole article, for the page's source view: looked up in the pipelines'
    stores (the first pipeline that holds the id answers), never held in memory."""

    def __init__(self, pipelines: Sequence[ServedPipeline]):
        self.stores = [chunks_of(p.loaded.retriever) for p in pipelines]

    def describe(self, chunk_id: str) -> ChunkResponse:
        for store in self.stores:
            target = _find(store, chunk_id)
            if target is not None:
                return self._describe(store, target)
        raise APIError(404, f"no chunk {echoed(chunk_id)!r}", code="not_found")

    def versions(self, law_id: str, article: str, since: str | None, until: str | None) -> ArticleVersions:
        """An article's versions (the first store holding it answers) and the words changed between two."""
        from wetqa.console import check_day
        from wetqa.retrieval.engines.versions import article_versions, diff_versions, echoed, versions_payload

        for name, day in (("from", since), ("to", until)):
            if day is not None:
                try:
                    check_day(day)
                except ValueError as exc:
                    raise APIError(400, str(exc), param=name) from None
        try:
            found = next((v for v in (article_versions(s, law_id, article) for s in self.stores) if v), [])
        except RetrievalError as exc:
            raise APIError(400, str(exc), param="article") from None
        if not found:
            raise APIError(404, f"no article {echoed(article)!r} of {echoed(law_id)!r} in this index", code="not_found")
        try:
            change = diff_versions(found, since, until)
        except InvalidSetting as exc:  # ?from= or ?to=: the query parameter is named as it is written
            raise APIError(400, exc.message(str), param=exc.setting) from None
        except RetrievalError as exc:
            raise APIError(400, str(exc)) from None
        # The payload `wetqa diff --output json` writes, read as the API's model (one shape for both).
        return ArticleVersions.model_validate(versions_payload(found, change))

    @staticmethod
    def _describe(store, target) -> ChunkResponse:
        row, chunk = target
        article = store.article_of(row) if isinstance(store, ArticleStore) else None
        parts = sorted(store.rows(article["chunks"]) if article else [chunk], key=lambda c: c.part)
        # The chunk's place among its article's parts, each joined by one line break: found by position, since
        # a short last chunk's words ("van toepassing.") may occur earlier in the article as well.
        before = next((i for i, c in enumerate(parts) if c.id == chunk.id), 0)
        return ChunkResponse(
            id=chunk.id,
            doc_id=chunk.doc_id,
            **document_fields(chunk.collection, chunk.law_id),
            law=chunk.law,
            article=chunk.article,
            path=chunk.path_label,
            text=chunk.text,
            article_text="\n".join(c.text for c in parts),
            text_start=sum(len(c.text) + 1 for c in parts[:before]),
        )


def _find(store, chunk_id: str):
    """(row, chunk) of an id in a store (or, for a retriever holding a plain list, by a scan)."""
    if isinstance(store, ChunkStore):
        row = store.row_of(chunk_id)
        return None if row is None else (row, store[row])
    for row, c in enumerate(store):
        if c.id == chunk_id:
            return row, c
    return None


# OpenAI request fields no served pipeline honours: its answer is wetqa's own cited text, with no place for
# a client's JSON schema, tool calls or log-probabilities. Given, they are a 400 naming them (a 200 that
# ignored them would look honoured); the values that ask for nothing beyond a text answer pass.
Gone = Callable[[], Awaitable[bool]]  # whether the request's client has disconnected (Starlette's is_disconnected)
GONE_POLL = 0.25  # seconds between looks at whether a waiting request's client is still there


def _abandon(task: asyncio.Future, cancel: threading.Event) -> None:
    """Cancel work nobody waits for any more; its outcome (Cancelled, most often) is taken, not logged."""
    cancel.set()
    task.add_done_callback(lambda t: t.cancelled() or t.exception())


NO_SAMPLING = "no generator here takes it (temperature, max_tokens, stop and seed are the settings a request may give)"
NO_TOOLS = "answers cite law articles and call no tools"
NO_LOGPROBS = "the response carries no log-probabilities"
# Each field: (the values that ask for nothing, why any other is refused).
NOT_HONOURED: dict[str, tuple[tuple, str]] = {
    "response_format": (
        (None, {"type": "text"}),
        'answers are wetqa\'s cited text (send no response_format, or {"type": "text"})',
    ),
    "tools": ((None, []), NO_TOOLS),
    "tool_choice": ((None, "none"), NO_TOOLS + ' (send none, or "none")'),
    "parallel_tool_calls": ((None, False), NO_TOOLS),
    "functions": ((None, []), NO_TOOLS),
    "function_call": ((None, "none"), NO_TOOLS + ' (send none, or "none")'),
    "logprobs": ((None, False), NO_LOGPROBS),
    "top_logprobs": ((None, 0), NO_LOGPROBS),
    "top_p": ((None, 1), NO_SAMPLING + " (send none, or 1)"),
    "presence_penalty": ((None, 0), NO_SAMPLING + " (send none, or 0)"),
    "frequency_penalty": ((None, 0), NO_SAMPLING + " (send none, or 0)"),
    "logit_bias": ((None, {}), NO_SAMPLING),
    "reasoning_effort": ((None,), NO_SAMPLING),
    "top_k": ((None, -1, 0), NO_SAMPLING + " (send none, or -1)"),
    "min_p": ((None, 0), NO_SAMPLING + " (send none, or 0)"),
    "repetition_penalty": ((None, 1), NO_SAMPLING + " (send none, or 1)"),
    "modalities": ((None, ["text"]), 'answers are text (send none, or ["text"])'),
    "audio": ((None,), "answers are text"),
    "prediction": ((None,), "answers are written from the articles found, not predicted from a given text"),
}


def not_honoured(req: ChatRequest) -> str | None:
    """The first field of NOT_HONOURED the request asks for (a value other than the field's neutral ones, which
    ask for nothing), or None."""
    return next(
        (name for name, (neutral, _) in NOT_HONOURED.items() if not _neutral(name, getattr(req, name), neutral)), None
    )


def _neutral(name: str, value: object, neutral: tuple) -> bool:
    if name == "logit_bias" and isinstance(value, dict):
        return not any(value.values())  # a bias of 0 moves no token
    return value in neutral


# Each refused field is a field of the request (else getattr fails on every request): checked at import.
if set(NOT_HONOURED) - set(ChatRequest.model_fields):
    raise TypeError(
        f"ChatRequest lacks the refused field(s) {sorted(set(NOT_HONOURED) - set(ChatRequest.model_fields))}"
    )


class ChatService:
    def __init__(self, pipelines: Sequence[ServedPipeline], config: ServerConfig):
        if not pipelines:
            raise ValueError("the server needs at least one pipeline")
        self.config = config
        self.pipelines = {p.load().name: p for p in pipelines}
        self.default = pipelines[0]
        self.chunks = ChunkLookup(pipelines)
        self.slots = Slots(config.max_concurrency)
        # A thread for every slot: asyncio's default pool has cpu_count + 4 threads (6 on 2 cores), which
        # would cap concurrent upstream calls below the limit, and leave fewer queries to batch together.
        self.workers = ThreadPoolExecutor(config.max_concurrency, thread_name_prefix="wetqa-worker")
        # Completion ids: unique per server run without a urandom call per request.
        self._id_prefix, self._id_counter = secrets.token_hex(8), itertools.count(1)

    # -------------------------------------------------------------------------- request checks
    def served(self, name: str | None) -> ServedPipeline:
        if name is None:
            return self.default
        if name not in self.pipelines:
            raise APIError(
                404,
                f"the model {name!r} does not exist; available: {', '.join(self.pipelines)}",
                code="model_not_found",
                param="model",
            )
        return self.pipelines[name]

    def question_of(self, req: ChatRequest) -> str:
        users = [m for m in req.messages if m.role == "user"]
        if not users:
            raise APIError(400, "no user message: the last user message is the question", param="messages")
        q = text_of(users[-1].content).strip()
        if not q:
            raise APIError(400, "the question (last user message) is empty", param="messages")
        self._check_length(q, "question")
        return q

    def context_of(self, req: ChatRequest, served: ServedPipeline):
        """The conversation context the last user message is read in (None: read alone); a conversation over
        the limits (:data:`~wetqa.retrieval.conversation.MAX_MESSAGES`, ``MAX_CONTEXT_CHARS``) is a 400."""
        messages = [{"role": m.role, "content": text_of(m.content)} for m in req.messages]
        try:
            return served.loaded.conversation_of(messages)[1]
        except GenerationError as exc:
            raise APIError(400, str(exc), code="conversation_too_long", param="messages") from None

    def _check_length(self, text: str, what: str) -> None:
        limit = self.config.max_question_chars
        if len(text) > limit:
            raise APIError(
                413, f"the {what} has {len(text)} characters; the limit is {limit}", code="question_too_long"
            )

    def sampling_of(self, req: ChatRequest, served: ServedPipeline) -> Sampling:
        field = not_honoured(req)
        if field is not None:
            raise APIError(
                400, f"{field} is not supported: {NOT_HONOURED[field][1]}", code="unsupported_parameter", param=field
            )
        if req.n is not None and req.n > 1:
            raise APIError(
                400, "n > 1 is not supported: one answer per request", code="unsupported_parameter", param="n"
            )
        if req.max_tokens is not None and req.max_completion_tokens is not None:
            if req.max_tokens != req.max_completion_tokens:
                raise APIError(400, "max_tokens and max_completion_tokens differ; give one of them", param="max_tokens")
        stops = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        if len(stops) > 4 or any(not s for s in stops):
            raise APIError(400, "stop takes up to 4 non-empty strings", param="stop")
        sampling = Sampling(
            temperature=req.temperature,
            max_tokens=req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens,
            stop=stops,
            seed=req.seed,
        )
        try:
            check_sampling(served.loaded.backend, sampling)
        except UnsupportedSetting as exc:
            param = exc.setting
            if param == "max_tokens" and req.max_completion_tokens is not None:
                param = "max_completion_tokens"
            raise APIError(
                400, str(exc).replace(exc.setting, param, 1), code="unsupported_parameter", param=param
            ) from None
        return sampling

    # -------------------------------------------------------------------------- slots and deadlines
    def take_slot(self, client: str = "") -> Callable[[], None]:
        """A slot for ``client`` (:class:`~.slots.Slots`: fair between clients), or a 429; returns its release."""
        taken = self.slots.take(client)
        if not isinstance(taken, Refusal):
            return taken
        message = (
            f"too many requests in progress (limit {self.config.max_concurrency}); retry shortly"
            if taken.reason == "limit"
            else f"this client has {self.slots.share} requests in progress, its share of the limit "
            f"{self.config.max_concurrency} while others wait; retry when one has ended"
        )
        # The openai clients wait Retry-After seconds before their retry.
        raise APIError(429, message, "rate_limit_error", "concurrency_limit", headers={"Retry-After": "1"})

    def too_slow(self, stage: str = "model") -> APIError:
        """The 504 of a request past its deadline, naming the stage that was still working."""
        timeout = self.config.request_timeout
        what = "retrieval did not finish" if stage == "retrieval" else "the model did not answer"
        return APIError(504, f"{what} within {timeout:g} s", "timeout_error", "upstream_timeout")

    async def run_limited(
        self, fn, *args, inline: bool = False, progress: dict | None = None, client: str = "", gone: Gone | None = None
    ):
        """``fn(*args)`` under a slot of ``client``'s: on the event loop when ``inline`` (model-free, a
        millisecond), else in a worker thread, with the request deadline. The slot is given back when the work
        ends, not when the client stops waiting: after a 504 the thread is still working, and the limit counts
        it. Past the deadline, or once ``gone()`` says the client has disconnected, the work is cancelled: it
        stops at its next model call (:mod:`wetqa.cancel`)."""
        release = self.take_slot(client)
        if inline:
            try:
                return fn(*args)
            finally:
                release()
        cancel = threading.Event()
        task = asyncio.get_running_loop().run_in_executor(self.workers, self._in_slot, fn, args, release, cancel)
        return await self.awaited(task, cancel, gone, lambda: self.too_slow((progress or {}).get("stage", "model")))

    async def awaited(self, task: asyncio.Future, cancel: threading.Event, gone: Gone | None, too_slow):
        """The result of ``task`` within the request deadline, looking every :data:`GONE_POLL` seconds whether
        the client is still there; the work is cancelled when it is not, or past the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.request_timeout
        while True:
            left = deadline - loop.time()
            if left <= 0:
                _abandon(task, cancel)
                raise too_slow()
            done, _ = await asyncio.wait({task}, timeout=min(left, GONE_POLL) if gone is not None else left)
            if done:
                return task.result()
            if gone is not None and await gone():
                _abandon(task, cancel)
                raise ClientGone()

    def _in_slot(self, fn, args, release, cancel: threading.Event):
        try:
            return cancellable(cancel, fn, *args)
        finally:
            release()

    # -------------------------------------------------------------------------- endpoints
    def new_id(self) -> str:
        return f"chatcmpl-{self._id_prefix}{next(self._id_counter):08x}"

    def scoped(self, req: ChatRequest | SearchRequest, served: ServedPipeline) -> tuple[ScopedPipeline, Scope]:
        """The served pipeline asked in the request's scope (its date, kinds, laws, jurisdiction over the
        pipeline's own), checked against what the index holds before any work: a 400 naming the field."""
        base = served.loaded.retriever.scope or DEFAULT_SCOPE
        if req.laws == []:  # as the CLI refuses --laws "": an empty list filters nothing
            raise APIError(400, "laws: give at least one law id, or leave laws out", code="invalid_scope", param="laws")
        try:
            scope = req.to_scope(base)
            check_scope(served.loaded.retriever, scope)
        except InvalidSetting as exc:  # it knows its setting: the param is that field, as the client wrote it
            param = req.field_of(exc.setting) if exc.setting else None
            raise APIError(400, req.scope_message(exc), code="invalid_scope", param=param) from None
        except RetrievalError as exc:
            raise APIError(400, str(exc), code="invalid_scope") from None
        return ScopedPipeline(served.loaded, scope if scope != base else None), scope

    async def chat(self, req: ChatRequest, client: str = "", gone: Gone | None = None):
        served = self.served(req.model)
        sampling = self.sampling_of(req, served)
        question = self.question_of(req)
        context = self.context_of(req, served)
        pipeline, scope = self.scoped(req, served)
        if pipeline.scope is not None:
            served = dataclasses.replace(served, pipeline=pipeline)  # type: ignore[arg-type]  # a Pipeline in a scope
        writer = ChunkWriter(self.new_id(), int(time.time()), served.name)
        if req.stream:
            include_usage = bool(req.stream_options and req.stream_options.include_usage)
            return await self.stream(served, question, sampling, writer, include_usage, context, client, gone)
        progress = {"stage": "retrieval"}
        answer = await self.run_limited(
            self.answer, served, question, sampling, progress, context, inline=served.inline, progress=progress,
            client=client, gone=gone,
        )  # fmt: skip
        content = cited_of(answer).answer + appended(cited_of(answer), sampling.stop)
        usage = word_usage(answer, question)
        completion = ChatCompletion.from_answer(
            answer, id=writer.id, created=writer.created, model=served.name, content=content, usage=usage
        )
        return ModelResponse(completion)

    def answer(
        self, served: ServedPipeline, question: str, sampling: Sampling, progress: dict | None = None, context=None
    ) -> Answer:
        try:
            request = served.loaded.prepare(question, sampling, context=context)
            check_cancelled()  # the client left during retrieval: no model call for it
            if progress is not None:
                progress["stage"] = "model"  # what a deadline now waits for
            answer = served.loaded.answer_one(request)
        except (GenerationError, RetrievalError) as exc:
            raise upstream_error(exc) from None
        cited_of(answer)  # the cite stage, in the worker (not on the event loop)
        return answer

    async def stream(
        self,
        served: ServedPipeline,
        question: str,
        sampling: Sampling,
        writer: ChunkWriter,
        include_usage: bool,
        context=None,
        client: str = "",
        gone: Gone | None = None,
    ) -> ClosingStreamingResponse:
        """Server-sent events with the answer's text as the backend produces it.

        The first piece is awaited before the response starts, so what fails early (retrieval, an
        upstream that refuses) still gets its HTTP status. Citations and the source list come in the
        last chunks. When the client goes away the work ends and only then is the slot given back.
        """
        release = self.take_slot(client)
        source = await self._open_source(served, question, sampling, context, release, gone)
        first = await self._first(source, gone)
        if first[0] == "error":
            await source.close()
            raise first[1]

        def final(answer: Answer, streamed: str) -> list[str]:
            return self.final_events(writer, answer, question, streamed, include_usage, sampling.stop)

        return ClosingStreamingResponse(
            sse_events(first, source, writer, final),
            on_close=source.close,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )

    async def _first(self, source, gone: Gone | None):
        """The stream's first piece; a client that leaves before it came ends the work (its slot follows)."""
        first = asyncio.ensure_future(source.next())
        while gone is not None:
            done, _ = await asyncio.wait({first}, timeout=GONE_POLL)
            if done:
                break
            if await gone():
                first.cancel()  # an async source's generator must stop before it can be closed
                await asyncio.gather(first, return_exceptions=True)
                await source.close()
                raise ClientGone()
        return await first

    async def _open_source(
        self,
        served: ServedPipeline,
        question: str,
        sampling: Sampling,
        context,
        release: Callable[[], None],
        gone: Gone | None = None,
    ):
        """Where the pieces come from (the slot is taken; it is released by the source, or here on failure)."""
        pipeline, timeout = served.loaded, self.config.request_timeout
        if not isinstance(pipeline.backend, AsyncStreamingBackend):
            return WorkerSource(
                pipeline, question, sampling, self.workers, timeout, self.too_slow, release, context=context
            )
        task = None
        try:
            prepare = functools.partial(pipeline.prepare, question, sampling, context=context)
            if served.inline_retrieval:
                request = prepare()
            else:
                loop = asyncio.get_running_loop()
                cancel = threading.Event()
                task = loop.run_in_executor(self.workers, cancellable, cancel, prepare)
                request = await self.awaited(task, cancel, gone, lambda: self.too_slow("retrieval"))
        except (ClientGone, APIError):
            # Gone or past its deadline: the work was cancelled, and holds its slot until it has stopped.
            if task is not None and not task.done():
                task.add_done_callback(lambda _: release())
            else:
                release()
            raise
        except (GenerationError, RetrievalError) as exc:
            release()
            raise upstream_error(exc) from None
        except BaseException:
            release()
            raise
        return UpstreamSource(pipeline, request, timeout, self.too_slow(), release)

    @staticmethod
    def final_events(
        writer: ChunkWriter,
        answer: Answer,
        question: str,
        streamed: str,
        include_usage: bool,
        stops: Sequence[str] = (),
    ) -> list[str]:
        cited = cited_of(answer)
        tail = cut_at_stop(streamed + appended(cited), stops)[len(streamed) :]  # a stop may start in the streamed text
        out = [writer.event(Delta(content=tail))] if tail else []
        usage = word_usage(answer, question)
        fields = answer_fields(answer)
        if not include_usage:
            return [*out, writer.event(Delta(), answer.finish_reason, usage=usage, **fields)]
        return [*out, writer.event(Delta(), answer.finish_reason, **fields), writer.usage(usage)]

    async def search(self, req: SearchRequest, client: str = "", gone: Gone | None = None) -> ModelResponse:
        served = self.served(req.model)
        if not req.query.strip():
            raise APIError(400, "empty query", param="query")
        self._check_length(req.query, "query")
        _, scope = self.scoped(req, served)
        hits = await self.run_limited(
            served.loaded.retriever.search,
            req.query,
            req.k,
            scope,
            inline=served.inline,
            progress={"stage": "retrieval"},
            client=client,
            gone=gone,
        )
        # Each hit's record as `wetqa search --output json` writes it, read as the API's model.
        data = [SearchHit.model_validate(h.to_json()) for h in hits]
        return ModelResponse(SearchResponse(model=served.name, date=scope.date, data=data))

    def models(self) -> ModelList:
        return ModelList(data=[p.describe() for p in self.pipelines.values()])

    def model(self, name: str) -> ModelCard:
        """One served pipeline's entry of :meth:`models` (``GET /v1/models/{model}``), 404 when none is named so."""
        return self.served(name).describe()

    def health(self) -> Health:
        return Health(models=list(self.pipelines))

    def close(self) -> None:
        self.workers.shutdown(wait=False, cancel_futures=True)
