"""WordNet for METEOR without a download: built from Debian's wordnet-base packages.

nltk's WordNet data is normally fetched with ``nltk.download``; offline, the
same WordNet 3.0 database comes from Debian's ``wordnet-base`` and
``wordnet-sense-index`` (in /usr/share/wordnet). Its files are copied (not
linked, so the folder survives the packages) into an NLTK_DATA folder, with
the ``lexnames`` file the Debian packages lack, generated from the fixed
45-entry list that lexnames(5WN) documents.
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

DEBIAN_WORDNET = Path("/usr/share/wordnet")
_FILES = [f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")] + [
    "noun.exc",
    "verb.exc",
    "adj.exc",
    "adv.exc",
    "index.sense",
    "cntlist.rev",
]
# lexnames(5WN): file number, lexicographer file name, syntactic category (1 noun, 2 verb, 3 adj, 4 adv).
LEXNAMES = [
    "adj.all",
    "adj.pert",
    "adv.all",
    "noun.Tops",
    "noun.act",
    "noun.animal",
    "noun.artifact",
    "noun.attribute",
    "noun.body",
    "noun.cognition",
    "noun.communication",
    "noun.event",
    "noun.feeling",
    "noun.food",
    "noun.group",
    "noun.location",
    "noun.motive",
    "noun.object",
    "noun.person",
    "noun.phenomenon",
    "noun.plant",
    "noun.possession",
    "noun.process",
    "noun.quantity",
    "noun.relation",
    "noun.shape",
    "noun.state",
    "noun.substance",
    "noun.time",
    "verb.body",
    "verb.change",
    "verb.cognition",
    "verb.communication",
    "verb.competition",
    "verb.consumption",
    "verb.contact",
    "verb.creation",
    "verb.emotion",
    "verb.motion",
    "verb.perception",
    "verb.possession",
    "verb.social",
    "verb.stative",
    "verb.weather",
    "adj.ppl",
]
_CATEGORY = {"noun": 1, "verb": 2, "adj": 3, "adv": 4}


def lexnames_text() -> str:
    return "".join(f"{i:02d}\t{name}\t{_CATEGORY[name.split('.')[0]]}\n" for i, name in enumerate(LEXNAMES))


def default_nltk_data() -> Path:
    return Path(
        os.environ.get("WETQA_NLTK_DATA")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wetqa" / "nltk_data"
    )


def install_wordnet(nltk_data: Path | None = None, source: Path = DEBIAN_WORDNET) -> Path | None:
    """Copy Debian's WordNet into ``nltk_data/corpora/wordnet``; None when the packages are absent."""
    target = (nltk_data or default_nltk_data()) / "corpora" / "wordnet"
    if (target / "lexnames").is_file() and (target / "data.noun").is_file():
        return target
    if not all((source / f).is_file() for f in _FILES if f != "cntlist.rev"):
        return None
    tmp = target.with_name(f".wordnet.{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in _FILES:
        if (source / f).is_file():
            shutil.copyfile(source / f, tmp / f)
    (tmp / "lexnames").write_text(lexnames_text(), encoding="ascii")
    if target.exists():
        shutil.rmtree(target)
    os.replace(tmp, target)
    return target


def load_wordnet(nltk_data: Path | None = None):
    """An nltk WordNet reader, or None when no WordNet data can be had offline."""
    root = install_wordnet(nltk_data)
    if root is None:
        return None
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    # nltk only reads corpora below a folder on its data path.
    base = str(root.parent.parent)
    if base not in nltk.data.path:
        nltk.data.path.insert(0, base)
    with warnings.catch_warnings():
        # Debian's English WordNet has no multilingual tables; nltk says so on every load, to every user.
        warnings.filterwarnings("ignore", message="The multilingual functions", category=UserWarning)
        return WordNetCorpusReader(str(root), None)
