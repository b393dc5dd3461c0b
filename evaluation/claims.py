"""Claim-level attribution: segment answers, judge claims, find and relate evidence.

Answer segmentation: sentences (syntok), LLM claim segmentation into atomic
facts, or direct segmentation with context (each claim rewritten to stand
alone using the question and the whole answer). Claims are classified for
check-worthiness and independence (a dependent claim is enriched into one
that stands alone) with prompts written for wetqa, parsed robustly. Evidence
is found post hoc: each unit is searched in the index, the best sentences of
the hits are picked with BM25, and an NLI model labels the relation
(entailment / contradiction / no relation), batched.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from wetqa.generation.sentences import split_sentences

from .attribution import BM25Attributor

Complete = Callable[[str], str]  # prompt -> model text

SEGMENT_PROMPT = """Splits de volgende tekst op in atomaire feitelijke beweringen: korte zinnen die elk precies één feit bevatten.
Neem geen informatie op die niet in de tekst staat.
Antwoord alleen met een JSON-lijst van strings, bijvoorbeeld ["bewering 1", "bewering 2"].

Tekst: {text}"""

CONTEXT_SEGMENT_PROMPT = """Hieronder staan een vraag, een volledig antwoord en één zin uit dat antwoord.
Splits de zin op in atomaire beweringen en maak elke bewering zelfstandig leesbaar: vervang verwijzingen
zoals "hij", "deze wet" of "dit lid" door wat ermee bedoeld wordt, met behulp van de vraag en het antwoord.
Antwoord alleen met een JSON-lijst van strings.

Vraag: {question}
Antwoord: {answer}
Zin: {sentence}"""

WORTHINESS_PROMPT = """Classificeer de bewering in precies één categorie:
- "feitelijk": een controleerbare feitelijke bewering
- "mening": een mening, oordeel of advies
- "geen bewering": een vraag, aankondiging, verwijzing of overgangszin zonder inhoud
- "anders": iets anders
Antwoord alleen met JSON: {{"categorie": "<categorie>"}}

Bewering: {claim}"""

INDEPENDENCE_PROMPT = """Is de bewering zelfstandig te begrijpen zonder de rest van het antwoord? Zo niet, herschrijf haar zo dat ze
zelfstandig leesbaar is, met behulp van de vraag en het antwoord, zonder nieuwe informatie toe te voegen.
Antwoord alleen met JSON: {{"zelfstandig": true of false, "herschreven": "<de zelfstandige bewering>"}}

Vraag: {question}
Antwoord: {answer}
Bewering: {claim}"""

WORTHINESS_LABELS = ("factual", "opinion", "not_a_claim", "other")
_WORTHINESS_WORDS = {
    "factual": ("feitelijk", "factual", "fact", "feit"),
    "opinion": ("mening", "opinion", "oordeel", "advies"),
    "not_a_claim": ("geen bewering", "not a claim", "no claim", "geen claim"),
    "other": ("anders", "other", "overig"),
}


def _json_in(text: str):
    """The first JSON value in a model's text (inside ``` fences or prose), or None."""
    text = text or ""
    for m in re.finditer(r"[\[{]", text):
        try:
            return json.JSONDecoder().raw_decode(text[m.start() :])[0]
        except json.JSONDecodeError:
            continue
    return None


def parse_claim_list(text: str) -> list[str]:
    value = _json_in(text)
    if isinstance(value, dict):
        value = next((v for v in value.values() if isinstance(v, list)), None)
    if isinstance(value, list):
        return [" ".join(str(c).split()) for c in value if isinstance(c, (str, int, float)) and str(c).strip()]
    # Fallback: a bulleted or numbered list.
    items = []
    for line in (text or "").splitlines():
        m = _LIST_ITEM.match(line)
        if m and m.group(1).strip():
            items.append(m.group(1).strip().strip('"'))
    return items


_LIST_ITEM = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*)$")


def parse_worthiness(text: str) -> str:
    value = _json_in(text)
    raw = ""
    if isinstance(value, dict):
        raw = str(next(iter(value.values()), ""))
    raw = (raw or text or "").lower()
    # "geen bewering" before "bewering"-like words; order of checks matters.
    for label in ("not_a_claim", "opinion", "factual", "other"):
        if any(w in raw for w in _WORTHINESS_WORDS[label]):
            return label
    return "other"


def parse_independence(text: str, claim: str) -> tuple[bool, str]:
    value = _json_in(text)
    if isinstance(value, dict):
        ind = value.get("zelfstandig", value.get("independent"))
        rewritten = value.get("herschreven") or value.get("rewritten") or claim
        if isinstance(ind, str):
            ind = ind.strip().lower() in ("true", "ja", "yes", "waar")
        return bool(ind) if ind is not None else True, " ".join(str(rewritten).split()) or claim
    lowered = (text or "").lower()
    independent = not re.search(r"\b(false|nee|niet zelfstandig|no)\b", lowered)
    return independent, claim


@dataclass(slots=True)
class Claim:
    text: str
    sentence: str
    worthiness: str | None = None
    independent: bool | None = None
    original: str | None = None  # before enrichment
    evidence: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _claims_prompt(sentence: str, question: str, answer: str) -> str:
    return SEGMENT_PROMPT.format(text=sentence)


def _context_prompt(sentence: str, question: str, answer: str) -> str:
    return CONTEXT_SEGMENT_PROMPT.format(question=question, answer=answer, sentence=sentence)


# How each unit is asked for: None keeps the sentences; otherwise an LLM splits each sentence with this prompt.
UNITS: dict[str, Callable[[str, str, str], str] | None] = {
    "sentence": None,
    "claims": _claims_prompt,
    "context": _context_prompt,
}
DEFAULT_UNIT = "sentence"


def segment(answer: str, question: str = "", mode: str = DEFAULT_UNIT, complete: Complete | None = None) -> list[Claim]:
    if mode not in UNITS:
        raise ValueError(f"unknown unit {mode!r}; choose {', '.join(UNITS)}")
    sentences = split_sentences(answer)
    prompt = UNITS[mode]
    if prompt is None:
        return [Claim(s, s) for s in sentences]
    if complete is None:
        raise ValueError(f"segmentation mode {mode!r} needs an LLM (--llm)")
    out: list[Claim] = []
    for s in sentences:
        claims = parse_claim_list(complete(prompt(s, question, answer))) or [s]  # nothing usable keeps the sentence
        out += [Claim(c, s) for c in claims]
    return out


def classify(claims: Sequence[Claim], question: str, answer: str, complete: Complete) -> None:
    for c in claims:
        c.worthiness = parse_worthiness(complete(WORTHINESS_PROMPT.format(claim=c.text)))
        independent, rewritten = parse_independence(
            complete(INDEPENDENCE_PROMPT.format(question=question, answer=answer, claim=c.text)), c.text
        )
        c.independent = independent
        if not independent and rewritten != c.text:
            c.original, c.text = c.text, rewritten


RELATIONS = {"entailment": "entailment", "contradiction": "contradiction", "neutral": "no_relation"}


def find_evidence(claims: Sequence[Claim], retriever, k: int = 3, per_claim: int = 2, nli=None) -> None:
    """Post-hoc evidence: search each claim, pick the best sentences of the hits with BM25, relate with NLI."""
    if not claims:
        return
    bm25 = BM25Attributor(backend="python")
    hits_per_claim = retriever.batch_search([c.text for c in claims], k)
    for claim, hits in zip(claims, hits_per_claim):
        cands = [(h, s) for h in hits for s in split_sentences(h.chunk.text)]
        if not cands:
            continue
        scores = bm25.normalised_matrix([claim.text], [s for _, s in cands])[0]
        best = sorted(range(len(cands)), key=lambda i: -scores[i])[:per_claim]
        claim.evidence = [
            {
                "id": cands[i][0].chunk.id,
                "doc_id": cands[i][0].chunk.doc_id,
                "law": cands[i][0].chunk.law,
                "article": cands[i][0].chunk.article,
                "sentence": cands[i][1],
                "score": round(scores[i], 4),
            }
            for i in best
            if scores[i] > 0
        ]
    if nli is not None:
        pairs = [(e["sentence"], c.text) for c in claims for e in c.evidence]  # premise: evidence, hypothesis: claim
        probs = nli.probabilities(pairs) if pairs else []
        it = iter(probs)
        for c in claims:
            for e in c.evidence:
                p = next(it)
                label = max(p, key=p.get)
                e["relation"] = RELATIONS.get(label, label)
                e["relation_probability"] = round(p[label], 4)


EVIDENCE_FORMAT = "attribution/1"
_EVIDENCE_KEYS = {"id", "question", "answer"}


class EvidenceFile:
    """``wetqa attribute``'s resumable evidence file at a path the user names, and what wetqa knows of it.

    Beside it (``.<name>.wetqa.json``, by its real path) wetqa keeps the inputs it was made with and the
    length and SHA-256 of what wetqa has written, updated after every record (the record synced to disk
    first). A file is written into only when it is new or empty, or when its content is still what wetqa
    wrote (records written after the last update, and at most one torn by an interruption, may follow; the
    torn one is cut off): a user's file, one that replaced wetqa's, or evidence of an earlier wetqa (no record
    beside it) is refused in one line. Evidence made with other inputs is refused, or with ``force`` started
    again. The file is locked from the check to the end of the run (a second run into it is refused), and
    :meth:`open`, called when everything the run needs has loaded, checks it again before it cuts or empties
    anything."""

    def __init__(self, out: Path, inputs: dict, force: bool = False):
        import fcntl
        import hashlib

        from wetqa.io import OutputError, wetqa_made

        self.out, self.inputs = out, inputs
        if out.exists() and (out.is_dir() or not out.is_file()):
            raise OutputError(f"--out {out} is not a file: name the JSONL file the evidence goes into")
        real = out.resolve()
        self.sidecar = real.with_name(f".{real.name}.wetqa.json")
        if self.sidecar.exists() and not wetqa_made(self.sidecar):
            raise OutputError(
                f"{self.sidecar} is not a file wetqa wrote; wetqa will not overwrite it: give another --out"
            )
        record = json.loads(self.sidecar.read_text(encoding="utf-8")) if self.sidecar.exists() else None
        data = out.read_bytes() if out.is_file() else b""
        self.keep = 0  # bytes of the file that are wetqa's whole records (the rest: a torn record, cut off)
        self.restart = False
        if data and (record is None or not self._ours(data, record)):
            earlier = (
                " (an earlier wetqa's evidence has no record beside it and is not resumed)" if record is None else ""
            )
            raise OutputError(
                f"{out} is not evidence this wetqa wrote, or it changed since{earlier}; wetqa will not write into "
                "it: give another --out"
            )
        if data and record is not None:
            old = record.get("inputs") or {}
            changed = sorted(k for k in set(old) | set(inputs) if old.get(k) != inputs.get(k))
            if changed and not force:
                raise OutputError(
                    f"{out} holds evidence made with other inputs ({', '.join(changed)} changed); give another "
                    "--out, or --force to attribute again"
                )
            self.restart = bool(changed)
        self._fh = open(out, "ab")  # a new file is made here (empty until a record is written)
        try:
            fcntl.flock(self._fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.close()
            raise OutputError(
                f"{out} is being written by another wetqa attribute; wait for it, or give another --out"
            ) from None
        self._checked = hashlib.sha256(data).hexdigest()

    def _ours(self, data: bytes, record: dict) -> bool:
        """The recorded prefix unchanged, then only whole evidence records and at most one torn one."""
        import hashlib

        try:
            n = int(record.get("bytes", -1))
        except (TypeError, ValueError):
            return False
        if n < 0 or len(data) < n or hashlib.sha256(data[:n]).hexdigest() != record.get("sha256"):
            return False
        tail = data[n:].split(b"\n")
        torn = tail.pop()
        for line in tail:
            try:
                rec = json.loads(line)
            except ValueError:
                return False
            if not (isinstance(rec, dict) and set(rec) - {"attribution", "error"} == _EVIDENCE_KEYS):
                return False
        start = b'{"id": '  # how every record wetqa writes begins
        if torn and not (torn.startswith(start) or start.startswith(torn)):
            return False
        self.keep = len(data) - len(torn)
        return True

    def open(self):
        """The locked file to append records to, after checking it is as it was when checked (then emptied
        when ``force`` starts it again, or a torn record cut off); call :meth:`written` after each record."""
        import hashlib

        from wetqa.io import OutputError

        data = self.out.read_bytes()
        if hashlib.sha256(data).hexdigest() != self._checked:
            self.close()
            raise OutputError(f"{self.out} changed while the models loaded; nothing was written into it")
        self._fh.truncate(0 if self.restart else self.keep)
        self._hash = hashlib.sha256(b"" if self.restart else data[: self.keep])
        self._bytes = 0 if self.restart else self.keep
        self._note()
        return self._fh

    def written(self, line: str) -> None:
        """After a record (its line, flushed) was appended: synced, then counted beside the file."""
        import os

        os.fsync(self._fh.fileno())  # the record on disk before the record of it: a crash leaves it resumable
        data = line.encode("utf-8")
        self._hash.update(data)
        self._bytes += len(data)
        self._note()

    def close(self) -> None:
        self._fh.close()  # and its lock

    def _note(self) -> None:
        from wetqa.io import FORMAT_KEY, atomic_file

        with atomic_file(self.sidecar) as fh:
            json.dump({FORMAT_KEY: EVIDENCE_FORMAT, "inputs": self.inputs, "bytes": self._bytes,
                       "sha256": self._hash.hexdigest()}, fh, ensure_ascii=False)  # fmt: skip
