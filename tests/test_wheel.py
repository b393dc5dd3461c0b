"""The built wheel, installed (not editable) into a fresh virtual environment outside the repository.

Only the wheel's own ``wetqa`` is importable there: its dependencies come from the test
environment's site-packages through a path entry that is appended after the fresh
environment's own (so no editable finder of the checkout is involved).
"""

from __future__ import annotations

import json
import os
import site
import socket
import subprocess
import sys
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from .conftest import FIXTURES, ROOT

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory):
    work = tmp_path_factory.mktemp("wheel")
    dist = work / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        text=True,
    )
    wheel = next(dist.glob("wetqa-*.whl"))
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    purelib = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # The dependencies: this environment's site-packages, as a plain path entry (its .pth files,
    # among them the editable install's finder, are not run for such an entry).
    (Path(purelib) / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
        text=True,
    )
    return {"wheel": wheel, "python": py, "bin": venv / "bin", "cwd": work}


def _run(env, *args, **kw):
    return subprocess.run(
        [str(env["bin"] / "wetqa"), *args], cwd=env["cwd"], capture_output=True, text=True, timeout=300, **kw
    )


def test_wheel_holds_only_the_wetqa_namespace_and_its_data(wheel_env):
    names = zipfile.ZipFile(wheel_env["wheel"]).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"wetqa"}
    assert "wetqa/serve/static/index.html" in names and "wetqa/corpus/reference_corpus.tsv" in names
    assert "wetqa/corpus/build.py" in names and "wetqa/generation/backends/extractive.py" in names


def test_installed_wheel_runs_the_commands(wheel_env, tmp_path):
    where = subprocess.run(
        [str(wheel_env["python"]), "-c", "import wetqa.corpus; print(wetqa.corpus.__file__)"],
        cwd=wheel_env["cwd"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(ROOT) not in where and "site-packages" in where  # the wheel's copy, not the checkout

    r = _run(wheel_env, "--help")
    assert r.returncode == 0 and "corpus" in r.stdout and "serve" in r.stdout, r.stderr
    r = _run(wheel_env, "doctor", "--output", "json")
    assert r.returncode == 0, r.stderr
    assert "packages" in json.loads(r.stdout)

    corpus, index = tmp_path / "corpus", tmp_path / "index"
    r = _run(
        wheel_env,
        "corpus",
        "build",
        "--source",
        str(FIXTURES / "bwb"),
        "--out",
        str(corpus),
        "--workers",
        "1",
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr
    r = _run(wheel_env, "index", "--corpus", str(corpus), "--retriever", "bm25s", "--out", str(index), "--no-progress")
    assert r.returncode == 0, r.stderr

    port = _free_port()
    server = subprocess.Popen(
        [str(wheel_env["bin"] / "wetqa"), "serve", "--index", str(index), "--port", str(port)],
        cwd=wheel_env["cwd"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "WETQA_API_KEY"},  # no key (an empty one is refused)
    )
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as resp:
                    page = resp.read().decode()
                    assert resp.status == 200 and resp.headers["content-type"].startswith("text/html")
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    raise AssertionError(f"server did not come up: {server.stderr.read().decode()[-2000:]}") from None
                time.sleep(0.3)
        assert "<html" in page.lower() and "wetqa" in page.lower()
    finally:
        server.terminate()
        server.wait(timeout=20)


@pytest.fixture(scope="module")
def base_env(wheel_env, tmp_path_factory):
    """The wheel with its base dependencies only (no extras), from the package index, in a fresh venv."""
    venv = tmp_path_factory.mktemp("base") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    r = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            str(wheel_env["wheel"]),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if r.returncode != 0:
        pytest.fail(f"the base install failed: {r.stderr[-2000:]}")
    return {"bin": venv / "bin", "python": venv / "bin" / "python", "cwd": venv.parent}


def test_a_base_install_runs_the_commands_without_extras(base_env, tmp_path):
    py = str(base_env["python"])
    listed = subprocess.run([py, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True).stdout.lower()
    for extra_only in ("fastapi", "uvicorn", "torch", "transformers", "sentence-transformers", "openai", "nltk"):
        assert f"\n{extra_only}==" not in "\n" + listed, f"{extra_only} is installed: not a base install"
    env = {k: v for k, v in os.environ.items() if k != "WETQA_API_KEY"}
    env["WETQA_HOME"] = str(tmp_path / "home")

    def run(*args):
        return subprocess.run(
            [str(base_env["bin"] / "wetqa"), *args],
            cwd=base_env["cwd"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )

    r = run("--help")
    assert r.returncode == 0 and "serve" in r.stdout
    r = run("corpus", "build", "--source", str(FIXTURES / "bwb"), "--workers", "1", "--no-progress")
    assert r.returncode == 0, r.stderr
    r = run("index", "--no-progress")  # the articles retriever
    assert r.returncode == 0, r.stderr
    r = run("search", "gezag ouder beëindigen", "-k", "2", "--output", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["hits"], r.stderr
    r = run("ask", "Wanneer kan de rechtbank het gezag van een ouder beëindigen?", "--generator", "extractive")
    assert r.returncode == 0 and "Bronnen:" in r.stdout, r.stderr
    # What needs an extra says which, and how to install it, in one line, exit 3.
    for argv, extra in (
        (("serve",), "serve"),
        (("ask", "Wanneer?", "--generator", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"), "openai"),
        (("index", "--retriever", "dense", "--out", str(tmp_path / "d"), "--no-progress"), "dense"),
    ):
        r = run(*argv)
        lines = [line for line in r.stderr.splitlines() if line.strip()]
        assert r.returncode == 3 and len(lines) == 1, (argv, r.stderr)
        assert f"pip install 'wetqa[{extra}]'" in lines[0] and "Traceback" not in r.stderr, lines[0]
