"""A forgiving parser for ``ANSWER: ... DOC IDS: ...`` output.

Open models often ignore the format: markers in other languages or cases, in
Markdown bold, ids in brackets or lists, bare numbers. Text after the answer
marker up to the ids marker is the answer; with no answer marker the whole
response is. Ids not among the retrieved chunks are dropped and counted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_ANSWER = re.compile(r"(?:^|\n)[ \t>#*_]*(?:answer|antwoord)[ \t*_]*(?::|-|\n)[ \t*_]*", re.IGNORECASE)
_IDS = re.compile(
    r"(?:(?:^|\n)[ \t>#*_\[(-]*(?:bronnen|sources|gebruikte\s+artikelen)"
    r"|(?:^|[\s(\[*_>#-])(?:doc[\s_-]*ids?|doc[\s_-]*id'?s|document[\s_-]*ids?))"
    r"[ \t*_\])]*(?::|-|\n)",
    re.IGNORECASE,
)
# Every ids marker contains one of these keywords. str.find on the lower-cased text
# is far cheaper than any regex tried at every position (about 90 us per KB).
_IDS_KEYWORDS = ("doc", "bronnen", "sources", "gebruikte")
# Characters that re.IGNORECASE matches to a keyword letter but str.lower() does not
# turn into it (dotless i, long s); with them present the shortcut is not taken.
_ODD_FOLDS = ("\u0131", "\u017f")
_DOC = re.compile(r"\bDOC[\s_-]?0*(\d{1,7})\b", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.:])0*(\d{1,7})(?![\w.:])")


@dataclass(slots=True)
class ParsedOutput:
    answer: str
    cited: list[str]  # doc ids among the retrieved chunks, in order of first mention
    dropped: list[str] = field(default_factory=list)  # cited ids that were not retrieved
    has_answer_marker: bool = False
    has_ids_marker: bool = False

    @property
    def format_ok(self) -> bool:
        return self.has_answer_marker and self.has_ids_marker


def _number(doc_id: str) -> int | None:
    m = re.search(r"(\d+)$", doc_id)
    return int(m.group(1)) if m else None


def _clean_answer(text: str) -> str:
    text = text.strip().strip("*_").strip()
    return re.sub(r"\n{3,}", "\n\n", text)


def _find_ids_marker(raw: str, start: int) -> re.Match | None:
    """``_IDS.search(raw, start)``, started at the line of the first keyword instead.

    A marker match starts on the line of its keyword (at the newline before it at
    the earliest), so no match can begin before the first keyword's line.
    """
    low = raw.lower()
    if len(low) != len(raw) or any(c in raw for c in _ODD_FOLDS):  # positions would not line up
        return _IDS.search(raw, start)
    found = [i for i in (low.find(k, start) for k in _IDS_KEYWORDS) if i >= 0]
    if not found:
        return None
    return _IDS.search(raw, max(start, raw.rfind("\n", start, min(found))))


def parse_output(raw: str, retrieved_doc_ids: Sequence[str]) -> ParsedOutput:
    raw = raw or ""
    by_number: dict[int, str] = {}
    for d in retrieved_doc_ids:
        n = _number(d)
        if n is not None:
            by_number.setdefault(n, d)

    ans_m = _ANSWER.search(raw)
    start = ans_m.end() if ans_m else 0
    ids_m = _find_ids_marker(raw, start)
    if ids_m:
        answer_text = raw[start : ids_m.start()]
        ids_text = raw[ids_m.end() :]
        # A model may keep talking after the id list: ids end at the first blank line.
        ids_text = re.split(r"\n\s*\n", ids_text.strip(), maxsplit=1)[0]
    else:
        answer_text = raw[start:]
        ids_text = ""

    mentions: list[int] = []
    if ids_m:
        found = [int(m.group(1)) for m in _DOC.finditer(ids_text)]
        if not found:  # bare numbers: "226, 227" or "[226]"
            found = [int(m.group(1)) for m in _NUMBER.finditer(ids_text)]
        mentions = found
    else:
        mentions = [int(m.group(1)) for m in _DOC.finditer(answer_text)]  # inline [DOC0226] citations

    cited: list[str] = []
    dropped: list[str] = []
    for n in mentions:
        doc = by_number.get(n)
        if doc is None:
            label = f"DOC{n:04d}"
            if label not in dropped:
                dropped.append(label)
        elif doc not in cited:
            cited.append(doc)

    return ParsedOutput(
        answer=_clean_answer(answer_text),
        cited=cited,
        dropped=dropped,
        has_answer_marker=bool(ans_m),
        has_ids_marker=bool(ids_m),
    )


# Text this close to the end may still turn out to be the start of an ids marker ("\nDOC IDS:",
# "**Bronnen**:", "Gebruikte artikelen:"), so it is held back until more arrives.
_HOLD_BACK = 32


class AnswerStream:
    """The answer part of an ``ANSWER: ... DOC IDS: ...`` output, handed out while the output grows.

    ``feed`` takes the next piece of raw output and returns the answer text that is now certain:
    a leading answer marker is dropped, and nothing from an ids marker on is ever returned. What
    :func:`parse_output` later makes of the whole output can differ only at the edges (trimmed
    markup), so ``finish`` returns what is left of that final answer, if it continues the text sent.
    """

    def __init__(self) -> None:
        self.raw = ""
        self.sent = ""
        self._start: int | None = None  # where the answer begins in raw, once known
        self._pos = 0  # raw up to here has been sent (or skipped as leading space)
        self._ended = False  # an ids marker was seen

    def feed(self, piece: str) -> str:
        self.raw += piece
        if self._ended:
            return ""
        if self._start is None:
            lead = self.raw.lstrip(" \t\n>#*_")
            # A marker ("ANSWER:", "**Antwoord**:") is short: wait until it can be told apart.
            if len(lead) < 12 and "\n" not in lead:
                return ""
            m = _ANSWER.match(self.raw)
            self._start = self._pos = m.end() if m else 0
        ids_m = _find_ids_marker(self.raw, self._start)
        end = ids_m.start() if ids_m else len(self.raw) - _HOLD_BACK
        self._ended = ids_m is not None
        if end <= self._pos:
            return ""
        text = self.raw[self._pos : end]
        # Space at the end is sent with the text that follows it: the answer may end there.
        kept = text.rstrip().rstrip("*_").rstrip() if self._ended else text.rstrip()
        self._pos += len(kept)
        text = kept
        if not self.sent:
            text = text.lstrip().lstrip("*_").lstrip()
        self.sent += text
        return text

    def finish(self, final_answer: str) -> str:
        """The rest of the parsed answer after what was sent ("" if the two do not line up)."""
        if final_answer.startswith(self.sent):
            rest = final_answer[len(self.sent) :]
            self.sent = final_answer
            return rest
        return ""
