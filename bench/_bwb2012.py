"""The whole BWB of October 2012 (../shared/data/bwb-2012.tar.xz), unpacked once outside the repository.

The archive is unpacked into ``$WETQA_BWB2012`` (default ``~/.cache/wetqa-bwb2012``) under a temporary
name and renamed when complete, so an interrupted unpack is redone, never half-used (about a minute).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("WETQA_SHARED_DATA", ROOT.parent / "shared" / "data"))
CURRENT = SHARED / "bwb"
ARCHIVE = SHARED / "bwb-2012.tar.xz"
VALID_ON = "2012-10-04"  # the snapshot's day: its files hold the text in force then


def unpacked() -> Path:
    """The folder of the 2012 XML files (18,008), unpacked when it is not there yet."""
    home = Path(os.environ.get("WETQA_BWB2012", Path.home() / ".cache" / "wetqa-bwb2012"))
    xml = home / "xml"
    if xml.is_dir():
        return xml
    if not ARCHIVE.is_file():
        raise SystemExit(f"bench: {ARCHIVE} not found (set WETQA_SHARED_DATA)")
    partial = home / "xml.partial"
    shutil.rmtree(partial, ignore_errors=True)  # ours: a previous unpack that did not finish
    partial.mkdir(parents=True)
    print(f"unpacking {ARCHIVE} into {home} (about a minute)", file=sys.stderr)
    subprocess.run(["tar", "-xJf", str(ARCHIVE), "-C", str(partial)], check=True)
    inner = [p for p in partial.iterdir() if p.is_dir()]
    source = inner[0] if len(inner) == 1 and not any(partial.glob("*.xml")) else partial
    if source is partial:
        partial.rename(xml)
    else:
        source.rename(xml)
        shutil.rmtree(partial)
    return xml


def law_id(path: Path) -> str:
    return path.name.split("_")[0].split(".")[0]


def linked_sources(out: Path, files: list[Path]) -> Path:
    """A folder of symbolic links to ``files`` (the corpus builder reads folders), made afresh: only
    links are removed, and a folder holding anything else is refused (it is not one this made)."""
    if out.exists():
        others = [p.name for p in out.iterdir() if not p.is_symlink()]
        if others:
            raise SystemExit(f"bench: {out} holds files that are not links ({others[0]}, ...): choose another --out")
        for link in out.iterdir():
            link.unlink()
    out.mkdir(parents=True, exist_ok=True)
    for f in files:
        (out / f.name).symlink_to(f.resolve())
    return out


FIXTURES_2012 = ROOT / "tests" / "fixtures" / "bwb2012"


def smoke_old_texts(current: list[Path], out: Path) -> list[Path]:
    """For smoke runs, without unpacking the archive: each current file again as an undated "2012" text
    (no version date in its name or XML) with one word changed, so that both versions differ."""
    import re

    out.mkdir(parents=True, exist_ok=True)
    made = []
    for f in current:
        text = f.read_text(encoding="utf-8")
        text = re.sub(r' inwerkingtreding(sdatum)?="[^"]*"', "", text)
        text = re.sub(r"\s*<bwb-inputbestand>.*?</bwb-inputbestand>", "", text)
        text = re.sub(r"(<al>[^<]*?)\bde\b", r"\1het", text, count=1)
        target = out / f"{law_id(f)}.xml"
        target.write_text(text, encoding="utf-8")
        made.append(target)
    return made
