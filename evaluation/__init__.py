"""Evaluate retrieval, generated answers and reference attribution."""

from wetqa.dataset import DatasetError, GoldArticle, QAItem, article_key, load_dataset

from .ranking import evaluate_retrieval

__all__ = ["DatasetError", "GoldArticle", "QAItem", "article_key", "evaluate_retrieval", "load_dataset"]
