"""Question -> retrieved chunks -> prompt -> backend -> parsed, cited answer."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncGenerator, Generator, Iterator, MutableSequence, Sequence
from dataclasses import replace

from wetqa.retrieval import Hit, RetrievalError, Retriever, check_k, check_retriever

from ._base import (
    Answer,
    AsyncStreamingBackend,
    Backend,
    Citation,
    Generation,
    GenerationError,
    Request,
    Sampling,
    StreamedSentence,
    StreamingBackend,
    age_note,
    check_backend,
    check_sampling,
    raise_failure,
)
from .abstention import decide, explanation
from .parser import AnswerStream, parse_output
from .prompt import as_text, build_request
from .structured import SentenceStream, SourceResolver, looks_structured, marked_text, parse_structured

log = logging.getLogger("wetqa.generation")


def check_question(question: str) -> str:
    if not isinstance(question, str) or not question.strip():
        raise GenerationError("empty question: ask something about Dutch law")
    return question.strip()


def to_answer(request: Request, gen: Generation) -> Answer:
    """The answer of a request's generation, through the cite stage (:func:`.citing.cite`)."""
    return cited(_to_answer(request, gen))


def cited(answer: Answer) -> Answer:
    """The cite stage: the answer's [n] markers, source list and each sentence's support, made once."""
    from .citing import cite

    if answer.cited is None and not answer.error:
        answer.cited = cite(answer)
    return answer


def _to_answer(request: Request, gen: Generation) -> Answer:
    if gen.error:
        return Answer(
            request.question,
            "",
            [],
            request.hits,
            raw=gen.text,
            format_ok=False,
            usage=gen.usage,
            error=gen.error,
            unavailable=gen.unavailable,
            failure=gen.failure,
            confidence=request.confidence,
            structured=request.schema is not None,
            context=request.context,
        )
    if request.schema is not None:
        return _structured_answer(request, gen)
    # A hit stands for its chunk, and for an article retriever also for the article's other chunks:
    # an answer may cite the part of the article it quotes.
    by_doc: dict[str, Hit] = {}
    for h in request.hits:
        by_doc.setdefault(h.chunk.doc_id, h)
        for c in h.article_chunks:
            by_doc.setdefault(
                c.doc_id, Hit(c, h.score, h.rank, h.retriever, h.article_chunks, h.article_paragraphs, h.features)
            )
    parsed = parse_output(gen.text, list(by_doc))
    citations = [Citation.from_hit(by_doc[d]) for d in parsed.cited]
    return _answer(request, gen, parsed.answer, citations, format_ok=parsed.format_ok, dropped_ids=parsed.dropped)


def _answer(request: Request, gen: Generation, text: str, citations: list[Citation], **rest) -> Answer:
    """An answer the model gave, with what every answer carries: its request's question, hits, day and
    confidence, the generation's output and usage, and the note on cited texts older than a year."""
    return Answer(
        question=request.question,
        answer=text,
        citations=citations,
        date=request.date,
        validity_note=age_note(citations, request.date) or None,
        retrieved=request.hits,
        context=request.context,
        raw=gen.text,
        usage=gen.usage,
        finish_reason=gen.finish_reason,
        confidence=request.confidence,
        **rest,
    )


def hits_by_doc(request: Request) -> dict[str, Hit]:
    """The hits by DOC id (the ids the prompt showed, which a structured answer may cite)."""
    by_doc: dict[str, Hit] = {}
    for h in request.hits:
        by_doc.setdefault(h.chunk.doc_id, h)
    return by_doc


def markers_of(request: Request, doc_ids: Sequence[str]) -> list[int]:
    """The ``[n]`` of each DOC id: its rank among the retrieved hits, the passage ALCE's ``[n]`` names."""
    ranks: dict[str, int] = {}
    for n, h in enumerate(request.hits, 1):
        ranks.setdefault(h.chunk.doc_id, n)
    return [ranks[d] for d in doc_ids if d in ranks]


NO_SOURCES = "no article was retrieved: the answer cites no sources"


def _structured_answer(request: Request, gen: Generation) -> Answer:
    """A JSON answer -> the answer text with inline [n] markers, its citations and its sentences.

    Output that holds no sentence at all (a server that ignored the schema and wrote text) is read by
    the forgiving text parser instead, and the answer's note says so.
    """
    by_doc = hits_by_doc(request)
    parsed = parse_structured(gen.text, list(by_doc))
    if not parsed.sentences:
        answer = _to_answer(replace(request, schema=None), gen)
        answer.format_ok = False  # JSON was asked for
        answer.note = f"the model did not answer in the JSON format ({parsed.problem}); read as text"
        return answer
    note = None
    if not parsed.format_ok:
        cut = " (cut off at max_tokens)" if gen.finish_reason == "length" else ""
        note = f"the model's JSON is broken{cut}: {parsed.problem}; kept its {len(parsed.sentences)} complete sentences"
    elif not by_doc:
        note = NO_SOURCES
    text = " ".join(marked_text(s.text, markers_of(request, s.sources)) for s in parsed.sentences)
    citations = [Citation.from_hit(by_doc[d]) for d in parsed.cited]
    return _answer(
        request,
        gen,
        text,
        citations,
        format_ok=parsed.format_ok,
        dropped_ids=parsed.dropped,
        structured=True,
        sentences=parsed.sentences,
        note=note,
    )


class ResponseReader:
    """The part of a growing model output that can be shown: answer text, or whole structured sentences.

    A structured request's output is read as JSON when it starts like JSON, and as the text format
    otherwise (a server that ignored the schema); a text request's always as text.
    """

    def __init__(self, request: Request):
        self.request = request
        self.json: bool | None = None if request.schema is not None else False
        self.pending = ""
        self.text = AnswerStream()
        self.sentences = SentenceStream()
        self.resolver = SourceResolver(list(hits_by_doc(request)))
        self.streamed = 0  # structured sentences handed out

    def feed(self, piece: str) -> list[str | StreamedSentence]:
        if self.json is None:
            self.pending += piece
            self.json = looks_structured(self.pending)
            if self.json is None:
                return []
            piece, self.pending = self.pending, ""
        if not self.json:
            text = self.text.feed(piece)
            return [text] if text else []
        out = [self.sentence(self.resolver.resolve(s)) for s in self.sentences.feed(piece)]
        self.streamed += len(out)
        return list(out)

    def sentence(self, s) -> StreamedSentence:
        by_doc = hits_by_doc(self.request)
        citations = [Citation.from_hit(by_doc[d]) for d in s.sources]
        return StreamedSentence(s.text, citations, markers_of(self.request, s.sources))

    def finish(self, answer: Answer) -> list[str | StreamedSentence]:
        """What the final answer holds beyond what was handed out."""
        if answer.structured:
            unsent = answer.sentences[self.streamed :]
            self.streamed = len(answer.sentences)
            return [self.sentence(s) for s in unsent]
        if self.json:  # read as JSON, but no sentence came of it: the answer was read as text at the end
            return [answer.answer] if answer.answer else []
        rest = self.text.finish(answer.answer)
        return [rest] if rest else []


def abstained_answer(request: Request) -> Answer:
    """No article of the corpus answers the question: say so, and offer the closest articles (not cited)."""
    related: list[Citation] = []
    seen: set[tuple[str, str]] = set()
    for h in request.hits:
        key = (h.chunk.law_id, h.chunk.article)
        if key not in seen:
            seen.add(key)
            related.append(Citation.from_hit(h))
    return cited(
        Answer(
            request.question,
            explanation(request.question, request.signals, request.confidence, related[:3]),
            [],
            request.hits,
            confidence=request.confidence,
            abstained=True,
            related=related[:3],
            date=request.date,
            context=request.context,
        )
    )


def _assess(ranking, request: Request, min_confidence: float | None) -> Request:
    """The request with retrieval's confidence (the ranking's last stage) and the pipeline's decision
    (:func:`.abstention.decide`)."""
    decision = decide(ranking.confidence, ranking.threshold, ranking.signals, bool(request.hits), min_confidence)
    return replace(request, confidence=ranking.confidence, signals=ranking.signals, abstain=decision.abstain)


class Pipeline:
    def __init__(
        self,
        retriever: Retriever,
        backend: Backend,
        k: int = 3,
        language: str = "nl",
        min_confidence: float | None = None,
    ):
        """``min_confidence``: abstain below it (0: always answer; None: the calibrated threshold)."""
        check_backend(backend)
        check_retriever(retriever)
        self.retriever = retriever
        self.backend = backend
        self.k = check_k(k)
        self.language = language
        self.min_confidence = min_confidence
        # Structured answers when the backend can hold its output to a schema (and is set to);
        # turned off, once and with a warning, when the model server refuses the schema.
        self.structured = bool(backend.structured)
        self._fallback_lock = threading.Lock()

    def requests(
        self,
        questions: Sequence[str],
        threads: int = 1,
        sampling: Sampling | None = None,
        scope=None,
        contexts: Sequence | None = None,
    ) -> list[Request]:
        """Retrieval and prompts; ``scope`` (a :class:`~wetqa.retrieval.scope.Scope`) replaces the pipeline's;
        ``contexts``: each question's conversation context (:class:`~wetqa.retrieval.conversation.Context` or
        None), read by retrieval beside it and given to the prompt with it."""
        from wetqa.retrieval.pipeline import rank

        qs = [check_question(q) for q in questions]
        if sampling is not None:
            check_sampling(self.backend, sampling)  # before any retrieval or model work
        try:
            rankings = rank(self.retriever, qs, self.k, threads, scope, contexts)
        except RetrievalError as exc:
            raise GenerationError(str(exc)) from None
        day = scope.date if scope is not None else self.retriever.scope.date if self.retriever.scope else None
        built = []
        for q, r in zip(qs, rankings):
            asked = r.context.standalone(q) if r.context is not None else q
            request = build_request(asked, r.hits, self.language, self.structured)
            # The context is reported where retrieval read it (an articles pipeline); the prompt reads it always.
            request = replace(request, question=q, asked=asked,
                              context=r.context.to_json(q) if r.context is not None and r.context_read else None)  # fmt: skip
            built.append(replace(_assess(r, request, self.min_confidence), date=day))
        return [replace(r, sampling=sampling) for r in built] if sampling is not None else built

    def answer_requests(self, requests: Sequence[Request]) -> list[Answer]:
        """Answers in order; a request the pipeline abstains from never reaches the model."""
        todo = [r for r in requests if not r.abstain]
        gens = self.backend.generate(todo) if todo else []
        if len(gens) != len(todo):
            raise GenerationError(f"backend {self.backend.name} returned {len(gens)} outputs for {len(todo)} prompts")
        pairs = iter(self._in_text_if_refused(todo, gens))
        return [abstained_answer(r) if r.abstain else to_answer(*next(pairs)) for r in requests]

    def _in_text_if_refused(
        self, requests: Sequence[Request], gens: Sequence[Generation]
    ) -> list[tuple[Request, Generation]]:
        """Each request with its generation; those whose schema the server refused asked again in text."""
        refused = [i for i, g in enumerate(gens) if g.rejected_schema]
        pairs = list(zip(requests, gens))
        if refused:
            self.refused_schema(gens[refused[0]])
            again = [as_text(requests[i]) for i in refused]
            for i, r, g in zip(refused, again, self.backend.generate(again)):
                pairs[i] = (r, g)
        return pairs

    def refused_schema(self, gen: Generation) -> None:
        """The model server refused the answer schema: from now on the text format, said once."""
        with self._fallback_lock:
            if self.structured:
                self.structured = False
                log.warning(
                    "wetqa: warning: %s; answering in the text format (ANSWER / DOC IDS) instead",
                    gen.error or "the model server refused the answer schema",
                )

    def generate_stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Answer]]:
        """``(index, Answer)`` as each is ready: abstentions at once, the rest as the engine finishes them
        (a backend with ``generate_stream``, vLLM's continuous batching, schedules them all together)."""
        todo = [i for i, r in enumerate(requests) if not r.abstain]
        for i, r in enumerate(requests):
            if r.abstain:
                yield i, abstained_answer(r)
        if not self.backend.schedules:
            for i, answer in zip(todo, self.answer_requests([requests[i] for i in todo])):
                yield i, answer
            return
        for j, gen in self.backend.generate_stream([requests[i] for i in todo]):
            request, gen = self._in_text_if_refused([requests[todo[j]]], [gen])[0]
            if isinstance(requests, MutableSequence):
                requests[todo[j]] = request  # what was asked in the end (a run records its prompt)
            yield todo[j], to_answer(request, gen)

    def ask_many(self, questions: Sequence[str], threads: int = 1) -> list[Answer]:
        """Answers to several questions (retrieved together, generated as one batch); failures are recorded
        in each answer's ``error``."""
        return self.answer_requests(self.requests(questions, threads))

    def ask(self, question: str, sampling: Sampling | None = None, scope=None, context=None) -> Answer:
        """The answer to one question (``context``: the conversation it is the last message of)."""
        return self.answer_one(self.prepare(question, sampling, scope, context))

    def answer_one(self, request: Request) -> Answer:
        """The answer of one prepared request; a failed generation raises (ModelUnavailable: no server)."""
        answer = self.answer_requests([request])[0]
        if answer.error:
            raise_failure(answer.error, answer.failure, answer.unavailable)
        return answer

    def prepare(self, question: str, sampling: Sampling | None = None, scope=None, context=None) -> Request:
        """Retrieval and the prompt for one question (what comes before the model)."""
        return self.requests([question], sampling=sampling, scope=scope, contexts=[context])[0]

    def converse(self, messages: Sequence, sampling: Sampling | None = None, scope=None) -> Request:
        """Retrieval and the prompt for a conversation's last user message, read in the context of the turns
        before it (:mod:`wetqa.retrieval.conversation`; a question that changes the subject is read alone)."""
        conversation, context = self.conversation_of(messages)
        return self.prepare(conversation.question, sampling, scope, context)

    def conversation_of(self, messages: Sequence):
        """(the :class:`~wetqa.retrieval.conversation.Conversation` of chat messages, its context or None)."""
        from wetqa.retrieval.conversation import Conversation, ConversationError

        try:
            conversation = Conversation.of(messages)
        except ConversationError as exc:
            raise GenerationError(str(exc)) from exc  # the cause says which (a chat starts afresh on it)
        features = self.retriever.features
        return conversation, conversation.context(features.law_names if features is not None else None)

    def stream(
        self, question: str, sampling: Sampling | None = None
    ) -> Generator[str | StreamedSentence | Answer, None, None]:
        """The answer as the backend produces it, then the whole :class:`Answer`.

        In the text format, pieces of answer text (never the ids list the model writes after it); in the
        structured format, each sentence as soon as the model has closed it, with its sources
        (:class:`StreamedSentence`). The final Answer carries the citations. A backend that cannot
        stream gives its answer in one go. Closing this iterator early stops the backend's work.
        """
        return self.stream_request(self.prepare(question, sampling))

    def stream_request(self, request: Request) -> Generator[str | StreamedSentence | Answer, None, None]:
        if request.abstain:
            answer = abstained_answer(request)
            yield answer.answer
            yield answer
            return
        reader = ResponseReader(request)
        gen: Generation | None = None
        if isinstance(self.backend, StreamingBackend):
            pieces = self.backend.stream(request)
            try:
                for item in pieces:
                    if isinstance(item, Generation):
                        gen = item
                        break
                    yield from reader.feed(item)
            finally:
                close = getattr(pieces, "close", None)  # a generator, or any iterator that holds a connection
                if close is not None:
                    close()
        else:
            gen = self.backend.generate([request])[0]
        if gen is not None and gen.rejected_schema:  # refused before anything was written: ask again in text
            self.refused_schema(gen)
            yield from self.stream_request(as_text(request))
            return
        yield from self._finish(request, gen, reader)

    async def astream_request(self, request: Request) -> AsyncGenerator[str | StreamedSentence | Answer, None]:
        """:meth:`stream_request` on an event loop, for a backend that is :class:`AsyncStreamingBackend`."""
        if request.abstain:
            answer = abstained_answer(request)
            yield answer.answer
            yield answer
            return
        if not isinstance(self.backend, AsyncStreamingBackend):
            raise TypeError(f"backend {self.backend.name} has no asynchronous stream")
        reader = ResponseReader(request)
        gen: Generation | None = None
        pieces = self.backend.astream(request)
        try:
            async for item in pieces:
                if isinstance(item, Generation):
                    gen = item
                    break
                for piece in reader.feed(item):
                    yield piece
        finally:
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()
        if gen is not None and gen.rejected_schema:
            self.refused_schema(gen)
            async for again in self.astream_request(as_text(request)):
                yield again
            return
        for last in self._finish(request, gen, reader):
            yield last

    def _finish(
        self, request: Request, gen: Generation | None, reader: ResponseReader
    ) -> Iterator[str | StreamedSentence | Answer]:
        if gen is None:
            raise GenerationError(f"backend {self.backend.name} ended its stream without a result")
        answer = to_answer(request, gen)
        if answer.error:
            raise_failure(answer.error, answer.failure, answer.unavailable)
        yield from reader.finish(answer)
        yield answer


class ScopedPipeline:
    """A pipeline whose questions are asked in one scope (an API request's date, kinds, laws,
    jurisdiction); everything else is the pipeline's."""

    def __init__(self, pipeline: Pipeline, scope=None):
        self.pipeline, self.scope = pipeline, scope

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.pipeline, name)

    def prepare(self, question: str, sampling: Sampling | None = None, context=None) -> Request:
        return self.pipeline.prepare(question, sampling, self.scope, context)

    def converse(self, messages: Sequence, sampling: Sampling | None = None) -> Request:
        return self.pipeline.converse(messages, sampling, self.scope)

    def ask(self, question: str, sampling: Sampling | None = None, context=None) -> Answer:
        return self.pipeline.ask(question, sampling, self.scope, context)

    def stream(self, question: str, sampling: Sampling | None = None):
        return self.pipeline.stream_request(self.prepare(question, sampling))
