"""ALCE citation recall and precision with an NLI model (see :func:`nli_citation_scores`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from wetqa.console import check_model_ref
from wetqa.corpus.dataset import QAItem
from wetqa.generation.sentences import split_sentences
from wetqa.settings import setting

from .metrics import Metric, Scorer, register

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

    def fits(self, premise: str, hypothesis: str) -> bool:
        """Whether the pair fits the model's window without cutting the premise."""
        n = len(self.tokenizer(premise, hypothesis, truncation=False)["input_ids"])
        return n <= self.max_length


# An inline citation: "[3]" (the third retrieved passage, as in ALCE) or "[DOC0012]" (wetqa's prompt ids).
_INLINE = re.compile(r"\[(DOC[\s_-]?)?0*(\d{1,7})\]", re.IGNORECASE)
AT_MOST_CITATIONS = 3  # ALCE's default


_MARKER = re.compile(r"\s*" + _INLINE.pattern, re.IGNORECASE)


def cited_sentences(answer: str) -> list[tuple[str, list[re.Match]]]:
    """The answer's sentences without their markers, each with the markers that belong to it.

    Markers are taken out before splitting (a splitter does not end a sentence at "[2]."), and each
    goes to the sentence it stood in: the last sentence starting at or before its place.
    """
    clean, places, at = [], [], 0
    for m in _MARKER.finditer(answer):
        clean.append(answer[at : m.start()])
        places.append((sum(len(x) for x in clean), m))
        at = m.end()
    clean.append(answer[at:])
    text = "".join(clean)
    out: list[tuple[str, list[re.Match]]] = []
    starts = []
    cursor = 0
    for sentence in split_sentences(text):
        start = text.find(sentence, cursor)
        start = cursor if start < 0 else start
        starts.append(start)
        cursor = start + len(sentence)
        out.append((sentence, []))
    for place, m in places:
        owner = max((i for i, st in enumerate(starts) if st <= place), default=0)
        if out:
            out[owner][1].append(m)
    return out


def resolve_markers(markers: Sequence[re.Match], retrieved: Sequence[dict]) -> list[str] | None:
    """Chunk ids of the markers ([n]: the n-th retrieved passage; [DOCn]: that DOC id); None if one is out of range."""
    by_doc = {str(r.get("doc_id", "")).upper(): r["id"] for r in retrieved}
    refs = []
    for m in markers:
        if m.group(1):
            ref = by_doc.get(f"DOC{int(m.group(2)):04d}") or by_doc.get(f"DOC{m.group(2)}")
        else:
            n = int(m.group(2))
            ref = retrieved[n - 1]["id"] if 1 <= n <= len(retrieved) else None
        if ref is None:
            return None
        refs.append(ref)
    return refs


def nli_citation_scores(
    nli, pairs: Sequence[tuple[dict, QAItem]], chunk_texts: dict[str, str], threshold: float = 0.5
) -> list[dict]:
    """ALCE's citation recall and precision per answer, as ALCE's ``eval.py`` computes them.

    Each sentence is judged against its own inline citations (at most 3): recall counts the sentences
    whose cited passages, joined, entail them; a sentence without citations, or citing a passage out of
    range, scores 0. Precision: of the citations of all sentences, those that are not irrelevant, where
    a citation of a multi-citation sentence is irrelevant when it alone does not entail the sentence but
    the others without it still do; a single citation counts when it entails. An answer with no inline
    marker at all is judged with its answer-level DOC IDS for every sentence (``nli_citation_rule``
    says which rule was used). When the passages and the sentence exceed the NLI model's window, each
    passage is judged alone and the sentence is entailed if one entails it (``nli_window_splits``).
    """
    results = []
    for rec, _ in pairs:
        retrieved = rec.get("retrieved") or []
        sentences = cited_sentences(rec.get("answer", ""))
        inline = any(markers for _, markers in sentences)
        answer_level = [c for c in rec.get("cited_ids") or [] if c in chunk_texts][:AT_MOST_CITATIONS]
        entail = entail_prec = total = splits = 0
        for text, markers in sentences:
            refs = resolve_markers(markers, retrieved) if inline else list(answer_level)
            if not refs or any(r not in chunk_texts for r in refs):
                continue  # no citation or one out of range: the sentence scores 0, its citations are not counted
            refs = refs[:AT_MOST_CITATIONS]
            total += len(refs)
            passages = [chunk_texts[r] for r in refs]
            joint, split = _entails(nli, passages, text, threshold)
            splits += split
            entail += joint
            if joint and len(refs) > 1:
                for k in range(len(refs)):
                    alone, split = _entails(nli, [passages[k]], text, threshold)
                    splits += split
                    if alone:
                        entail_prec += 1
                        continue
                    rest, split = _entails(nli, passages[:k] + passages[k + 1 :], text, threshold)
                    splits += split
                    entail_prec += 0 if rest else 1
            else:
                entail_prec += joint
        results.append(
            {
                "nli_citation_recall": entail / len(sentences) if sentences else 0.0,
                "nli_citation_precision": entail_prec / total if total else 0.0,
                "nli_sentences": len(sentences),
                "nli_citation_rule": "inline" if inline else "answer-level",
                "nli_window_splits": splits,
            }
        )
    return results


def _entails(nli, passages: Sequence[str], hypothesis: str, threshold: float) -> tuple[int, int]:
    """(1 if the joined passages entail the hypothesis, 1 if they had to be judged one by one)."""
    premise = "\n".join(passages)
    if len(passages) == 1 or nli.fits(premise, hypothesis):
        return int(nli.entailment([(premise, hypothesis)])[0] >= threshold), 0
    return int(max(nli.entailment([(p, hypothesis) for p in passages])) >= threshold), 1


@dataclass(frozen=True, slots=True)
class NLISettings:
    # None stands for the default model, so scores made with it keep their recorded inputs.
    nli_model: str | None = setting(None, f"NLI model id or path (default {DEFAULT_NLI_MODEL})", metavar="ID_OR_PATH")


class _LazyNLI:
    """The NLI model of a scorer, loaded when an answer first needs it (not for scores already made)."""

    def __init__(self, model: str):
        self.model = model
        self._nli: NLIModel | None = None

    def __call__(self, pairs: Sequence[tuple[dict, QAItem]], corpus) -> list[dict]:
        if self._nli is None:
            self._nli = NLIModel(self.model)
        return nli_citation_scores(self._nli, pairs, corpus.texts)


def make_scorer(settings: NLISettings, folder: Path | None) -> Scorer:
    return _LazyNLI(check_model_ref(settings.nli_model or DEFAULT_NLI_MODEL, "NLI model"))


def _depends_on(rec: dict, item, corpus, settings) -> list:
    cited = [str(c) for c in rec.get("cited_ids") or []]
    return [cited, [corpus.texts.get(c) for c in cited], settings.nli_model or "default"]


register(
    Metric(
        name="nli",
        scores=("nli_citation_recall", "nli_citation_precision"),
        complete=("nli_citation_recall",),
        prefixes=("nli_",),
        depends_on=_depends_on,
        settings=NLISettings,
        make_scorer=make_scorer,
    )
)
