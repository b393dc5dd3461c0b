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
    Request,
    Sampling,
    StreamingBackend,
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
            request.question, "", [], request.hits, raw=gen.text, format_ok=False, usage=gen.usage, error=gen.error
        )
    # A hit stands for its chunk, and for an article retriever also for the article's other chunks:
    # an answer may cite the part of the article it quotes.
    by_doc: dict[str, Hit] = {}
    for h in request.hits:
        by_doc.setdefault(h.chunk.doc_id, h)
        for c in h.article_chunks:
            by_doc.setdefault(c.doc_id, Hit(c, h.score, h.rank, h.retriever, h.article_chunks, h.article_paragraphs))
    parsed = parse_output(gen.text, list(by_doc))
    return Answer(
        question=request.question,
        answer=parsed.answer,
        citations=[Citation.from_hit(by_doc[d]) for d in parsed.cited],
        retrieved=request.hits,
        raw=gen.text,
        format_ok=parsed.format_ok,
        dropped_ids=parsed.dropped,
        usage=gen.usage,
        finish_reason=gen.finish_reason,
    )


class Pipeline:
    def __init__(self, retriever: Retriever, backend: Backend, k: int = 3, language: str = "nl"):
        self.retriever = retriever
        self.backend = backend
        self.k = check_k(k)
        self.language = language

    def requests(self, questions: Sequence[str], threads: int = 1, sampling: Sampling | None = None) -> list[Request]:
        qs = [check_question(q) for q in questions]
        if sampling is not None:
            check_sampling(self.backend, sampling)  # before any retrieval or model work
        try:
            hits = self.retriever.batch_search(qs, self.k, threads)
        except RetrievalError as exc:
            raise GenerationError(str(exc)) from None
        built = [build_request(q, h, self.language) for q, h in zip(qs, hits)]
        return [replace(r, sampling=sampling) for r in built] if sampling is not None else built

    def answer_requests(self, requests: Sequence[Request]) -> list[Answer]:
        gens = self.backend.generate(requests)
        if len(gens) != len(requests):
            raise GenerationError(
                f"backend {self.backend.name} returned {len(gens)} outputs for {len(requests)} prompts"
            )
        return [to_answer(r, g) for r, g in zip(requests, gens)]

    def ask_many(self, questions: Sequence[str], threads: int = 1) -> list[Answer]:
        """Answers to several questions (retrieved together, generated as one batch); failures are recorded
        in each answer's ``error``."""
        return self.answer_requests(self.requests(questions, threads))

    def ask(self, question: str, sampling: Sampling | None = None) -> Answer:
        answer = self.answer_requests(self.requests([question], sampling=sampling))[0]
        if answer.error:
            raise GenerationError(answer.error)
        return answer

    def prepare(self, question: str, sampling: Sampling | None = None) -> Request:
        """Retrieval and the prompt for one question (what comes before the model)."""
        return self.requests([question], sampling=sampling)[0]

    def stream(self, question: str, sampling: Sampling | None = None) -> Generator[str | Answer, None, None]:
        """The answer's text as the backend produces it, then the whole :class:`Answer`.

        Only answer text is handed out (never the ids list the model writes after it); the final
        Answer carries the citations. A backend that cannot stream gives its answer as one piece.
        Closing this iterator early stops the backend's work.
        """
        return self.stream_request(self.prepare(question, sampling))

    def stream_request(self, request: Request) -> Generator[str | Answer, None, None]:
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
