"""The articles engine, wetqa's default: one folder, as Pyserini keeps one per engine.

- :mod:`.bm25`: the index (BM25 over an article's chunks, its whole text and its headings, with the law table)
  and its retriever, registered as ``articles``;
- :mod:`.passages`: the passage vectors of the dense signals; :mod:`.questions_view`: the questions each article
  answers, as a view of their own;
- :mod:`.candidates`: a question's candidates from every source and their evidence (the features), the shipped
  linear models (``ranking/ranking.json``);
- :mod:`.reader`: the reader's stage (EmbeddingGemma's cosines of the first candidates, the laws read whole);
- :mod:`.stages`: the stages over a ranking's candidates; :mod:`.stage_list`: their list, in order (the
  registry entry names it, so the index never imports its own stages).

Fitting the models (:mod:`wetqa.retrieval.fitting`) and making the encoders' ONNX exports
(:mod:`wetqa.retrieval.tooling`) are off the query path, in rooms of their own.
"""
