"""ALCE-style citation recall and precision with an NLI model, batched.

Per answer sentence with cited passages C: recall is 1 when the
concatenation of C entails the sentence. Precision (ALCE's rule): a citation
c of an entailed sentence is over-cited when c alone does not entail the
sentence but C without c still does; precision is the share of citations
that are not over-cited in entailed sentences.
"""

from __future__ import annotations

from collections.abc import Sequence

from wetqa.dataset import QAItem
from wetqa.generation.sentences import split_sentences

DEFAULT_NLI_MODEL = "MoritzLaurer/mDeBERTa-v3-base-xnli-multilingual-nli-2mil7"


class NLIModel:
    """Entailment probabilities from a sequence-classification NLI model, in batches."""

    def __init__(
        self, model: str = DEFAULT_NLI_MODEL, batch_size: int = 16, max_length: int = 512, device: str | None = None
    ):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForSequenceClassification.from_pretrained(model).eval()
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model.to(self.device)
        labels = {v.lower(): int(k) for k, v in self.model.config.id2label.items()}
        if "entailment" not in labels:
            raise ValueError(f"{model} has no 'entailment' label (labels: {sorted(labels)}); is it an NLI model?")
        self.labels = labels
        self.entail = labels["entailment"]
        self.batch_size = batch_size
        self.max_length = min(max_length, int(getattr(self.tokenizer, "model_max_length", max_length) or max_length))
        self.name = model

    def probabilities(self, pairs: Sequence[tuple[str, str]]) -> list[dict[str, float]]:
        """Label probabilities for (premise, hypothesis) pairs. Long premises are truncated, never the hypothesis."""
        out: list[dict[str, float]] = []
        names = {i: n for n, i in self.labels.items()}
        for start in range(0, len(pairs), self.batch_size):
            batch = pairs[start : start + self.batch_size]
            enc = self.tokenizer(
                [p for p, _ in batch],
                [h for _, h in batch],
                truncation="only_first",
                max_length=self.max_length,
                padding=True,
                return_tensors="pt",
            )
            with self.torch.no_grad():
                probs = self.torch.softmax(self.model(**enc.to(self.device)).logits.float(), dim=-1)
            out += [{names[i]: float(row[i]) for i in range(row.shape[0])} for row in probs]
        return out

    def entailment(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return [p["entailment"] for p in self.probabilities(pairs)]


def nli_citation_scores(
    nli: NLIModel, pairs: Sequence[tuple[dict, QAItem]], chunk_texts: dict[str, str], threshold: float = 0.5
) -> list[dict]:
    """``nli_citation_recall`` and ``nli_citation_precision`` per answer (0..1)."""
    jobs = []  # (answer index, sentence, cited texts)
    for i, (rec, _) in enumerate(pairs):
        cited = [chunk_texts[c] for c in rec.get("cited_ids") or [] if c in chunk_texts]
        for sentence in split_sentences(rec.get("answer", "")):
            jobs.append((i, sentence, cited))
    # Batch 1: every sentence against all its citations joined.
    joint = nli.entailment([("\n".join(c), s) for _, s, c in jobs]) if jobs else []
    # Batch 2: for entailed sentences with several citations, each citation alone and the rest without it.
    singles, rests, where = [], [], []
    for j, (_, s, cited) in enumerate(jobs):
        if joint[j] >= threshold and len(cited) > 1:
            for k in range(len(cited)):
                singles.append((cited[k], s))
                rests.append(("\n".join(cited[:k] + cited[k + 1 :]), s))
                where.append(j)
    single_p = nli.entailment(singles) if singles else []
    rest_p = nli.entailment(rests) if rests else []
    overcited = [0] * len(jobs)
    for n, j in enumerate(where):
        if single_p[n] < threshold and rest_p[n] >= threshold:
            overcited[j] += 1
    results = []
    for i in range(len(pairs)):
        idx = [j for j, job in enumerate(jobs) if job[0] == i]
        if not idx:
            results.append({"nli_citation_recall": 0.0, "nli_citation_precision": 0.0, "nli_sentences": 0})
            continue
        entailed = [j for j in idx if joint[j] >= threshold and jobs[j][2]]
        total_cites = sum(len(jobs[j][2]) for j in idx)
        good = sum(len(jobs[j][2]) - overcited[j] for j in entailed)
        results.append(
            {
                "nli_citation_recall": len(entailed) / len(idx),
                "nli_citation_precision": good / total_cites if total_cites else 0.0,
                "nli_sentences": len(idx),
            }
        )
    return results
