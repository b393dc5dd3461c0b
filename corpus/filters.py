"""The published pipeline's filter: leave out technical and administrative laws by title words."""

from __future__ import annotations

TECHNICAL_TITLE_WORDS = (
    "aanpassingswet",
    "aanwijzingswet",
    "verzamelwet",
    "implementatiewet",
    "belastingplan",
    "intrekkingswet",
    "invoeringswet",
    "overige fiscale maatregelen",
    "tijdelijke wet",
    "uitvoeringswet",
    "wet aanpassing",
    "wet aanvullende",
    "wijzigingswet",
)


def technical_title_word(title: str) -> str | None:
    """The filter word a law title contains, or None when the law is kept."""
    lowered = title.lower()
    for word in TECHNICAL_TITLE_WORDS:
        if word in lowered:
            return word
    return None
