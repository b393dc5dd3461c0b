"""Question -> retrieved chunks -> prompt -> backend -> parsed, cited answer."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Iterator, Sequence
from dataclasses import replace

from wetqa.retrieval._base import Hit, RetrievalError, Retriever, check_k

from ._base import (
    Answer,
    AsyncStreamingBackend,
    Backend,
    Citation,
    Generation,
    GenerationError,
    ModelUnavailable,
    Request,
    Sampling,
    StreamingBackend,
    age_note,
    check_sampling,
)
from .parser import AnswerStream, parse_output
from .prompt import build_request


def check_question(question: str) -> str:
    if not isinstance(question, str) or not question.strip():
        raise GenerationError("empty question: ask something about Dutch law")
    return question.strip()


def to_answer(request: Request, gen: Generation) -> Answer:
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
            confidence=request.confidence,
        )
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
    return Answer(
        question=request.question,
        answer=parsed.answer,
        citations=citations,
        date=request.date,
        note=age_note(citations, request.date),
        retrieved=request.hits,
        raw=gen.text,
        format_ok=parsed.format_ok,
        dropped_ids=parsed.dropped,
        usage=gen.usage,
        finish_reason=gen.finish_reason,
        confidence=request.confidence,
    )


def abstained_answer(request: Request) -> Answer:
    """No article of the corpus answers the question: say so, and offer the closest articles (not cited)."""
    related: list[Citation] = []
    seen: set[tuple[str, str]] = set()
    for h in request.hits:
        key = (h.chunk.bwb_id, h.chunk.article)
        if key not in seen:
            seen.add(key)
            related.append(Citation.from_hit(h))
    return Answer(
        request.question,
        abstention_text(request, related[:3]),
        [],
        request.hits,
        confidence=request.confidence,
        abstained=True,
        related=related[:3],
        date=request.date,
    )


def abstention_text(request: Request, related: Sequence[Citation]) -> str:
    from wetqa.retrieval.confidence import MIN_CONTENT_WORDS

    signals = request.signals
    if not request.hits or signals.get("content_words", MIN_CONTENT_WORDS) < MIN_CONTENT_WORDS:
        lead = "De vraag is te kort of te algemeen om er een wetsartikel bij te zoeken. Stel een volledige vraag."
    else:
        lead = (
            "Ik heb in de wetten van dit corpus geen artikel gevonden dat deze vraag beantwoordt. Het corpus bevat "
            "niet alle Nederlandse wetgeving: de vraag gaat mogelijk over een wet die er niet in staat."
        )
        if signals.get("english"):
            lead += " Stel de vraag in het Nederlands: wetqa zoekt in Nederlandse wetteksten."
    if request.confidence is not None:
        lead += f" (Zekerheid: {request.confidence:.0%}.)"
    if related:
        lead += "\n\nMogelijk verwant (niet als antwoord aangehaald):\n" + "\n".join(
            f"- {c.law}, {c.article}" for c in related
        )
    return lead


def _assess(retriever: Retriever, request: Request, min_confidence: float | None) -> Request:
    """The request with retrieval's confidence, and whether the pipeline abstains from answering it."""
    from wetqa.retrieval.confidence import estimate, model_for

    confidence, signals = estimate(retriever, request.question, request.hits)
    if min_confidence is None:
        model = model_for(signals)
        min_confidence = model.threshold if model is not None else 0.0
    abstain = not request.hits or (min_confidence > 0 and confidence < min_confidence)
    return replace(request, confidence=confidence, signals=signals, abstain=abstain)


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
        self.retriever = retriever
        self.backend = backend
        self.k = check_k(k)
        self.language = language
        self.min_confidence = min_confidence

    def requests(
        self, questions: Sequence[str], threads: int = 1, sampling: Sampling | None = None, scope=None
    ) -> list[Request]:
        """Retrieval and prompts; ``scope`` (a :class:`~wetqa.retrieval.scope.Scope`) replaces the pipeline's."""
        from wetqa.retrieval._base import search_in

        qs = [check_question(q) for q in questions]
        if sampling is not None:
            check_sampling(self.backend, sampling)  # before any retrieval or model work
        try:
            hits = search_in(self.retriever, qs, self.k, threads, scope)
        except RetrievalError as exc:
            raise GenerationError(str(exc)) from None
        day = scope.date if scope is not None else getattr(getattr(self.retriever, "scope", None), "date", None)
        built = [
            replace(_assess(self.retriever, build_request(q, h, self.language), self.min_confidence), date=day)
            for q, h in zip(qs, hits)
        ]
        return [replace(r, sampling=sampling) for r in built] if sampling is not None else built

    def answer_requests(self, requests: Sequence[Request]) -> list[Answer]:
        """Answers in order; a request the pipeline abstains from never reaches the model."""
        todo = [r for r in requests if not r.abstain]
        gens = self.backend.generate(todo) if todo else []
        if len(gens) != len(todo):
            raise GenerationError(f"backend {self.backend.name} returned {len(gens)} outputs for {len(todo)} prompts")
        made = iter(gens)
        return [abstained_answer(r) if r.abstain else to_answer(r, next(made)) for r in requests]

    def generate_stream(self, requests: Sequence[Request]) -> Iterator[tuple[int, Answer]]:
        """``(index, Answer)`` as each is ready: abstentions at once, the rest as the engine finishes them
        (a backend with ``generate_stream``, vLLM's continuous batching, schedules them all together)."""
        todo = [i for i, r in enumerate(requests) if not r.abstain]
        for i, r in enumerate(requests):
            if r.abstain:
                yield i, abstained_answer(r)
        stream = getattr(self.backend, "generate_stream", None)
        if stream is None:
            for i, answer in zip(todo, self.answer_requests([requests[i] for i in todo])):
                yield i, answer
            return
        for j, gen in stream([requests[i] for i in todo]):
            yield todo[j], to_answer(requests[todo[j]], gen)

    def ask_many(self, questions: Sequence[str], threads: int = 1) -> list[Answer]:
        """Answers to several questions (retrieved together, generated as one batch); failures are recorded
        in each answer's ``error``."""
        return self.answer_requests(self.requests(questions, threads))

    def ask(self, question: str, sampling: Sampling | None = None, scope=None) -> Answer:
        return self.answer_one(self.requests([question], sampling=sampling, scope=scope)[0])

    def answer_one(self, request: Request) -> Answer:
        """The answer of one prepared request; a failed generation raises (ModelUnavailable: no server)."""
        answer = self.answer_requests([request])[0]
        if answer.error:
            raise (ModelUnavailable if answer.unavailable else GenerationError)(answer.error)
        return answer

    def prepare(self, question: str, sampling: Sampling | None = None, scope=None) -> Request:
        """Retrieval and the prompt for one question (what comes before the model)."""
        return self.requests([question], sampling=sampling, scope=scope)[0]

    def stream(self, question: str, sampling: Sampling | None = None) -> Generator[str | Answer, None, None]:
        """The answer's text as the backend produces it, then the whole :class:`Answer`.

        Only answer text is handed out (never the ids list the model writes after it); the final
        Answer carries the citations. A backend that cannot stream gives its answer as one piece.
        Closing this iterator early stops the backend's work.
        """
        return self.stream_request(self.prepare(question, sampling))

    def stream_request(self, request: Request) -> Generator[str | Answer, None, None]:
        if request.abstain:
            answer = abstained_answer(request)
            yield answer.answer
            yield answer
            return
        parser = AnswerStream()
        gen: Generation | None = None
        if isinstance(self.backend, StreamingBackend):
            pieces = self.backend.stream(request)
            try:
                for item in pieces:
                    if isinstance(item, Generation):
                        gen = item
                        break
                    text = parser.feed(item)
                    if text:
                        yield text
            finally:
                close = getattr(pieces, "close", None)
                if close is not None:
                    close()
        else:
            gen = self.backend.generate([request])[0]
        yield from self._finish(request, gen, parser)

    async def astream_request(self, request: Request) -> AsyncGenerator[str | Answer, None]:
        """:meth:`stream_request` on an event loop, for a backend that is :class:`AsyncStreamingBackend`."""
        if request.abstain:
            answer = abstained_answer(request)
            yield answer.answer
            yield answer
            return
        if not isinstance(self.backend, AsyncStreamingBackend):
            raise TypeError(f"backend {self.backend.name} has no asynchronous stream")
        parser = AnswerStream()
        gen: Generation | None = None
        pieces = self.backend.astream(request)
        try:
            async for item in pieces:
                if isinstance(item, Generation):
                    gen = item
                    break
                text = parser.feed(item)
                if text:
                    yield text
        finally:
            aclose = getattr(pieces, "aclose", None)
            if aclose is not None:
                await aclose()
        for out in self._finish(request, gen, parser):
            yield out

    def _finish(self, request: Request, gen: Generation | None, parser: AnswerStream) -> Iterator[str | Answer]:
        if gen is None:
            raise GenerationError(f"backend {self.backend.name} ended its stream without a result")
        answer = to_answer(request, gen)
        if answer.error:
            raise GenerationError(answer.error)
        rest = parser.finish(answer.answer)
        if rest:
            yield rest
        yield answer
