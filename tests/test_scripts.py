"""The README's scripts: what the main job leaves behind when it stops."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.integration


def test_the_main_job_leaves_no_temporary_file_when_it_stops_early(tmp_path):
    """No law XML where WETQA_BWB_DIR points: the corpus build stops the job, and the temporary file it made for
    the reader's fetch log is gone with it (each run left one in /tmp before)."""
    work = tmp_path / "repo"
    (work / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "demo.sh", work / "scripts" / "demo.sh")
    # The set-up is not what is tested here: the project's .venv is set up already (the suite runs in it).
    (work / "scripts" / "setup.sh").write_text("exit 0\n", encoding="utf-8")
    (work / ".venv").symlink_to(ROOT / ".venv")
    tmp, laws = tmp_path / "tmp", tmp_path / "no-laws"
    tmp.mkdir()
    laws.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "WETQA_BWB_DIR": str(laws), "WETQA_READER": "0"}
    env["WETQA_HOME"] = str(tmp_path / "home")
    done = subprocess.run(
        ["bash", str(work / "scripts" / "demo.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode != 0, done.stdout[-2000:]
    assert "wetqa:" in done.stderr  # the corpus build's one line
    assert sorted(p.name for p in tmp.iterdir()) == []
