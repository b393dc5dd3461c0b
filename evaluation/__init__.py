"""Evaluate retrieval, generated answers and reference attribution.

Names are imported from their modules when first used.
"""

from typing import TYPE_CHECKING

from wetqa.lazy import lazy

_EXPORTS = {
    **dict.fromkeys(["DatasetError", "GoldArticle", "QAItem", "article_key", "load_dataset"], "wetqa.corpus.dataset"),
    "evaluate_retrieval": ".ranking",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)

if TYPE_CHECKING:
    from wetqa.corpus.dataset import DatasetError, GoldArticle, QAItem, article_key, load_dataset

    from .ranking import evaluate_retrieval
