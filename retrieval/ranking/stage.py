"""The one protocol every retrieval stage declares: the pipeline reads these, never probes a stage for them.

A stage takes the rankings of a batch of questions and moves them on, in place (:mod:`.stages` has the
articles ranking's; :mod:`.readers`, :mod:`.rescoring` and :mod:`.rerankers` the others).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..scope import Scope


class Stage:
    name: str = ""
    # candidates | features | scorer | reader | rescore | reranker | confidence
    kind: str = ""
    # What a ranking holds when the stage reads it: "question" (a first stage), "candidates" (an articles index's
    # candidates with their features) or "hits" (the pipeline turns the best candidates into hits before it).
    needs: str = "hits"
    # It may run a model: a server runs it in a worker thread, never on its event loop.
    calls_model: bool = True
    # Its weights were fitted with the stages before it. Before a stage that was not (a re-ranker), the pipeline
    # keeps the hits as the fitted stages left them: the confidence reads those, never a margin it changed.
    fitted: bool = False
    # The hits it works on (a re-ranker's, re-scoring's): what the stages before it must give (0: as many as asked).
    depth: int = 0
    # It reads a conversation's context (the articles candidates): only a pipeline with such a stage says, in
    # its rankings and answers, that it read the earlier turns.
    reads_context: bool = False

    def begin(self, rankings: list) -> Future | None:
        """Work that needs only the questions (a model's question vectors), started beside the first stage."""
        return None

    def run(self, rankings: list, need: int, scope: Scope | None) -> None:
        raise NotImplementedError

    def warm(self) -> None:
        """What a long-lived process prepares before its first questions (compiled kernels)."""
        return None
