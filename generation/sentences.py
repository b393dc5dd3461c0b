"""Dutch sentence splitting that works offline (syntok; nltk's Dutch punkt data is not available).

Law text adds its own structure: paragraph numbers ("1.") and list items
("a.", "1°.") start new lines, and each line is split further by syntok.
"""

from __future__ import annotations

import re
from functools import lru_cache

_LIST_MARKER = re.compile(r"^\s*(?:\d+[a-z]?\.|[a-z]\.|\d+°\.?)\s*$")


def split_sentences(text: str) -> list[str]:
    out: list[str] = []
    for line in (text or "").split("\n"):
        line = line.strip()
        if line:
            out.extend(_split_line(line))
    return out


@lru_cache(maxsize=1 << 16)
def _split_line(line: str) -> tuple[str, ...]:
    # Cached: law text is static, and answers mostly quote or paraphrase it line by line.
    from syntok import segmenter

    out: list[str] = []
    for paragraph in segmenter.process(line):
        for sentence in paragraph:
            s = "".join(t.spacing + t.value for t in sentence).strip()
            if not s:
                continue
            # syntok may cut "1." or "a." off as a sentence of its own: glue it to what follows.
            if out and _LIST_MARKER.match(out[-1]):
                out[-1] = f"{out[-1]} {s}"
            else:
                out.append(s)
    return tuple(out)
