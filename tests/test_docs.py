"""Every Python code block in README.md and docs/ runs: the blocks of one page, in order, as one
script in a fresh process (a page reads as a session: a later block may use an earlier one's
names), in a temporary directory. Shell blocks are install and launch lines (pip, mpirun), run by
CI and fresh-check as a new user would; they are not run here.

    python tests/test_docs.py docs/guides/porting-keras.md   # one page, with its output
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def script(page: Path) -> str:
    """The page's Python blocks, each preceded by a comment naming its line, for tracebacks."""
    text = page.read_text(encoding="utf-8")
    parts = []
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start(1)) + 1
        parts.append(f"# {page.relative_to(ROOT)}, line {line}\n{match.group(1)}")
    return "\n".join(parts)


def run(page: Path, directory: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "CLNET_QUIET": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", script(page)], cwd=directory, env=env, capture_output=True, text=True,
                          timeout=600)


# README's page is in the quick suite; the docs pages, whose code builds many programs cold (the
# models page alone minutes on 2 cores), in the slow set that CI runs.
@pytest.mark.parametrize("page", [p if p.name == "README.md" else pytest.param(p, marks=pytest.mark.slow)
                                  for p in PAGES if BLOCK.search(p.read_text(encoding="utf-8"))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_page_code_runs(page, tmp_path):
    result = run(page, tmp_path)
    assert result.returncode == 0, f"{page.relative_to(ROOT)}:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"


if __name__ == "__main__":
    import tempfile
    for name in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as directory:
            result = run(Path(name).resolve(), Path(directory))
        print(result.stdout, result.stderr, sep="\n")
        print(f"{name}: exit status {result.returncode}")
