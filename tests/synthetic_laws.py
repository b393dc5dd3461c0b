"""Synthetic BWB laws for tests that need many articles: random words with a skewed frequency,
headings, lists, expired articles and articles long enough to be cut into several chunks."""

from __future__ import annotations

import random
from pathlib import Path
from xml.sax.saxutils import escape

_SYLLABLES = ["ge", "zag", "ver", "recht", "be", "stuur", "ouder", "kind", "wet", "raad", "han", "del", "over",
              "eigen", "dom", "erf", "pacht", "huur", "koop", "schuld", "boete", "straf", "tijd", "lijk"]  # fmt: skip


def vocabulary(size: int, rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _sentence(words: list[str], weights: list[float], rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(words, weights, k=n)).capitalize() + "."


def write_laws(folder: Path, n_laws: int, articles_per_law: int, seed: int = 0) -> Path:
    """``n_laws`` laws of ``articles_per_law`` articles each, as official toestand XML files."""
    rng = random.Random(seed)
    words = vocabulary(400, rng)
    weights = [1 / (i + 1) ** 1.1 for i in range(len(words))]  # Zipf-like: a few common words, many rare
    folder.mkdir(parents=True, exist_ok=True)
    for law in range(n_laws):
        bwb = f"BWBR98{law:05d}"
        title = _sentence(words, weights, rng, rng.randint(2, 5)).rstrip(".")
        parts = []
        for chapter in range(1, 4):
            head = _sentence(words, weights, rng, rng.randint(1, 4)).rstrip(".")
            arts = []
            for a in range(articles_per_law // 3 + (chapter == 1) * (articles_per_law % 3)):
                nr = f"{chapter}.{a + 1}"
                if rng.random() < 0.08:
                    arts.append(
                        f'<artikel label="Artikel {nr}" status="vervallen"><kop><label>Artikel</label><nr>{nr}</nr>'
                        "</kop><al>Vervallen</al></artikel>"
                    )
                    continue
                kop_title = f"<titel>{escape(_sentence(words, weights, rng, 3))}</titel>" if rng.random() < 0.5 else ""
                leden = []
                for lid in range(1, rng.randint(1, 4) + 1):
                    text = " ".join(
                        _sentence(words, weights, rng, rng.randint(5, 40)) for _ in range(rng.randint(1, 6))
                    )
                    if rng.random() < 0.3:
                        items = "".join(
                            f"<li><li.nr>{c}.</li.nr><al>{escape(_sentence(words, weights, rng, rng.randint(4, 12)))}</al></li>"
                            for c in "abc"
                        )
                        text_xml = f"<al>{escape(text)}:</al><lijst>{items}</lijst>"
                    else:
                        text_xml = f"<al>{escape(text)}</al>"
                    leden.append(f"<lid><lidnr>{lid}</lidnr>{text_xml}</lid>")
                arts.append(
                    f'<artikel label="Artikel {nr}" status="goed"><kop><label>Artikel</label><nr>{nr}</nr>{kop_title}'
                    f"</kop>{''.join(leden)}</artikel>"
                )
            parts.append(
                f"<hoofdstuk><kop><label>Hoofdstuk</label><nr>{chapter}</nr><titel>{escape(head)}</titel></kop>"
                f"{''.join(arts)}</hoofdstuk>"
            )
        xml = (
            f'<?xml version="1.0" encoding="UTF-8"?>\n<toestand bwb-id="{bwb}" inwerkingtreding="2024-01-01">'
            f'<wetgeving soort="wet" xml:lang="nl" inwerkingtredingsdatum="2024-01-01">'
            f'<citeertitel status="officieel">{escape(title)}</citeertitel>'
            f"<wet-besluit><wettekst>{''.join(parts)}</wettekst></wet-besluit></wetgeving></toestand>\n"
        )
        (folder / f"{bwb}.xml").write_text(xml, encoding="utf-8")
    return folder
