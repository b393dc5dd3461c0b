"""Official BWB law XML (or another registered source's files) -> articles -> chunks with stable ids.

>>> from wetqa.corpus import build_corpus, parse_law, load_chunks

Names are imported from their modules when first used, so ``import wetqa.corpus.records`` stays cheap.
"""

from typing import TYPE_CHECKING

from wetqa.lazy import lazy

_EXPORTS = {
    **dict.fromkeys(
        [
            "BuildOptions",
            "BuildReport",
            "CorpusBuildError",
            "build_corpus",
            "load_articles",
            "load_chunks",
            "read_manifest",
        ],
        ".build",
    ),
    **dict.fromkeys(["BWBParseError", "parse_law", "parse_law_bytes"], ".bwb"),
    **dict.fromkeys(["ChunkingOptions", "chunk_articles"], ".chunking"),
    **dict.fromkeys(["Article", "Chunk", "Division", "DocumentError", "Law", "ParsedLaw"], ".records"),
    **dict.fromkeys(["FileVersion", "Source", "all_sources", "get_source", "register"], ".sources"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .build import (
        BuildOptions,
        BuildReport,
        CorpusBuildError,
        build_corpus,
        load_articles,
        load_chunks,
        read_manifest,
    )
    from .bwb import BWBParseError, parse_law, parse_law_bytes
    from .chunking import ChunkingOptions, chunk_articles
    from .records import Article, Chunk, Division, DocumentError, Law, ParsedLaw
    from .sources import FileVersion, Source, all_sources, get_source, register
