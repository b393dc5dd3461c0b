"""The articles engine's stages in the order they run, and the parts they share (its registry entry names
:func:`stages_for`)."""

from __future__ import annotations

import contextvars
import logging
from pathlib import Path

log = logging.getLogger("wetqa.retrieval")

# Set while `wetqa fit confidence` builds the pipelines whose confidence it fits: their ranking models are used
# though no confidence model was fitted for them yet (everywhere else a ranking model is used only beside one).
FITTING_CONFIDENCE: contextvars.ContextVar[bool] = contextvars.ContextVar("fitting_confidence", default=False)


def stages_for(spec, index, path: Path, dense_model: str | None, reader):
    """(stages, candidate features, pipeline key) of an articles index, in the order they run:

        candidates -> features -> learned [-> reader -> learned]

    or None when no ranking model is fitted for the pipeline (its hits are then the index's BM25 ones). The
    questions view is read only when a confidence model was fitted for the pipeline's key too (the two are fitted
    by two commands: a ranking model alone would rank without a confidence, and answer every question)."""
    from ..ranking.confidence import model_for_key as confidence_for_key

    built = _stages(spec, index, path, dense_model, reader, spec.questions)
    if built is None:
        return None
    features, key = built[1], built[2]
    if features.questions is not None and confidence_for_key(key) is None and not FITTING_CONFIDENCE.get():
        log.warning("wetqa: warning: no confidence model is fitted for %s: the index's questions are not read", key)
        return _stages(spec, index, path, dense_model, reader, False)
    return built


def _stages(spec, index, path: Path, dense_model: str | None, reader, questions: bool):
    from ..ranking.keys import with_context, with_reader
    from .candidates import RankingModel, model_for_key, shipped_models
    from .stages import ArticleCandidates, ArticleFeatures, LearnedScorer

    features, model, key = _parts(index, path, dense_model, questions)
    if features is None or model is None:
        return None
    fitted = shipped_models().get  # exactly this key, or None (a follow-up without one is ranked as a single question)
    second = None
    if reader is not None:
        from .reader import LawReader

        read_key = with_reader(key)
        second = model_for_key(read_key)
        fitted_dim = ((second.spec.get("reader") or {}).get("dim") if second is not None else None) or 0
        if second is None:
            log.warning("wetqa: warning: no ranking model is fitted for %s: the reader is not used", read_key)
        elif reader.encoder.dim < fitted_dim:
            # Another model than the one its weights were fitted with (mE5's 384 dimensions for EmbeddingGemma's
            # 768): its cosines mean something else. A Matryoshka cut (--reader-dim) keeps the model's own.
            log.warning(
                "wetqa: warning: the ranking models of %s were fitted with a %d-dimensional reader; %s gives %d "
                "dimensions: the reader is not used (fit the ranking with it: wetqa fit ranking --reader ...)",
                read_key, fitted_dim, reader.model, reader.encoder.dim,
            )  # fmt: skip
            second = None
        else:
            features.laws_read = LawReader.load(path, reader)  # the index's laws read whole, if it keeps them
    stages = [ArticleCandidates(features, reader if second is not None else None), ArticleFeatures(features)]
    if second is None:
        stages.append(LearnedScorer(model, key, fitted(with_context(key))))
        return stages, features, key
    from .reader import ArticleReader

    # The first model is the one the reader's model was fitted after (it chose the candidates read).
    first = RankingModel(second.spec["first"], key) if "first" in second.spec else model
    second_ctx = fitted(with_context(read_key))
    first_ctx = RankingModel(second_ctx.spec["first"], key) if second_ctx and "first" in second_ctx.spec else None
    depth = spec.read_depth if spec.read_depth is not None else second.spec.get("reader", {}).get("depth")
    stages += [
        LearnedScorer(first, key, first_ctx),
        ArticleReader(reader, features, depth or spec.read_depth_or_default),
        LearnedScorer(second, read_key, second_ctx),
    ]
    return stages, features, read_key


def _parts(index, path: Path, dense_model: str | None, questions: bool = True):
    """(candidate features, the shipped ranking model, its key) for an articles index; no model: (None,)*3.
    ``questions``: read the index's questions view, when it keeps one and a model was fitted with it."""
    from ..engines.index import check_rescore_probe, dense_parts
    from ..scope import holds_whole_bwb
    from .candidates import RELATION_FEATURES, CandidateFeatures, model_for_key, model_key
    from .questions_view import QuestionsView

    laws = index.laws
    whole = laws is not None and holds_whole_bwb(laws.held)
    view = QuestionsView.load(path, index) if questions else None
    key = model_key(dense=dense_model is not None, whole=whole, questions=view is not None)
    learned = model_for_key(key)
    if learned is None and view is not None:
        log.warning("wetqa: warning: no ranking model is fitted for %s: the index's questions are not read", key)
    if learned is None and view is not None:
        view = None
        key = model_key(dense=dense_model is not None, whole=whole)
        learned = model_for_key(key)
    if learned is None:
        return None, None, ""
    if learned.key != key:
        key = learned.key  # a whole BWB no model was fitted for: the general one
    if (
        whole
        and laws is not None
        and RELATION_FEATURES[0] in learned.features
        and all(r.get("parent") is None for r in laws.records)
    ):
        log.warning(
            "wetqa: warning: %s holds a corpus without the laws its regulations rest on (an older wetqa's): its "
            "ranking lacks the decree-beside-its-law relations; rebuild the corpus and the index",
            path,
        )
    encoder, cache, passages = dense_parts(index, path, dense_model) if dense_model is not None else (None, None, None)
    if dense_model is not None:
        check_rescore_probe(path, encoder, dense_model)
    return CandidateFeatures(index, passages, encoder, cache, questions=view), learned, key
