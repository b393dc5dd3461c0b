"""Official BWB law XML -> articles -> chunks with stable ids.

>>> from wetqa.corpus import build_corpus, parse_law, load_chunks
"""

from .build import BuildOptions, BuildReport, CorpusBuildError, build_corpus, load_articles, load_chunks, read_manifest
from .bwb import BWBParseError, parse_law, parse_law_bytes
from .chunking import ChunkingOptions, chunk_articles
from .records import Article, Chunk, Division, Law

__all__ = [
    "Article",
    "BWBParseError",
    "BuildOptions",
    "BuildReport",
    "Chunk",
    "ChunkingOptions",
    "CorpusBuildError",
    "Division",
    "Law",
    "build_corpus",
    "chunk_articles",
    "load_articles",
    "load_chunks",
    "parse_law",
    "parse_law_bytes",
    "read_manifest",
]
