"""Question -> retrieved chunks -> prompt -> backend -> parsed, cited answer."""

from __future__ import annotations

from collections.abc import Sequence

from wetqa.retrieval._base import Hit, RetrievalError, Retriever, check_k

from ._base import Answer, Backend, Citation, Generation, GenerationError, Request
from .parser import parse_output
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
    )


class Pipeline:
    def __init__(self, retriever: Retriever, backend: Backend, k: int = 3, language: str = "nl"):
        self.retriever = retriever
        self.backend = backend
        self.k = check_k(k)
        self.language = language

    def requests(self, questions: Sequence[str], threads: int = 1) -> list[Request]:
        qs = [check_question(q) for q in questions]
        try:
            hits = self.retriever.batch_search(qs, self.k, threads)
        except RetrievalError as exc:
            raise GenerationError(str(exc)) from None
        return [build_request(q, h, self.language) for q, h in zip(qs, hits)]

    def answer_requests(self, requests: Sequence[Request]) -> list[Answer]:
        gens = self.backend.generate(requests)
        if len(gens) != len(requests):
            raise GenerationError(
                f"backend {self.backend.name} returned {len(gens)} outputs for {len(requests)} prompts"
            )
        return [to_answer(r, g) for r, g in zip(requests, gens)]

    def ask(self, question: str) -> Answer:
        answer = self.answer_requests(self.requests([question]))[0]
        if answer.error:
            raise GenerationError(answer.error)
        return answer

    def ask_many(self, questions: Sequence[str], threads: int = 1) -> list[Answer]:
        return self.answer_requests(self.requests(questions, threads))
