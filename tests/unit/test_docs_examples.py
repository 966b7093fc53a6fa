"""Every ```python block of ``docs/`` runs as written, so the pages cannot drift from the code.

How a page is read (the conventions a page's author follows):

* A ```python block **runs** by default. The blocks of one page run in order, in one namespace
  (``__name__ == "__main__"``, like a script the reader pastes together), in a fresh interpreter
  whose working directory is an empty temporary directory: ``sqlite:///jobs.db`` lands there.
* A block whose first line is ``# file: PATH`` is a module the reader saves: it is written to
  ``PATH`` in that directory (which is on ``sys.path``) before anything runs, and not executed.
* A block whose first line is ``# script: PATH`` is saved the same way and then run as
  ``python PATH`` at its place in the page; what it prints counts as the page's output.
* A block directly below a line ``<!-- not-runnable: REASON -->`` is skipped. The reason is
  required: say what the block needs that the page cannot give (a server, the reader's own
  functions).
* A ```text block directly below ``<!-- output -->`` is what the python block before it printed,
  exactly (trailing blank lines aside); ``…`` stands for any text within a line. Below
  ``<!-- output, any order -->`` each of its lines must appear somewhere in that output instead
  (for lines printed by worker threads).

A page whose blocks start a worker must stop it: the page's interpreter must exit by itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"\s*<!--\s*(.*?)\s*-->\s*")
FILE = re.compile(r"\A# (file|script): (\S+)[^\n]*\n")
PAGE_TIMEOUT = 120

#: The interpreter that runs one page's steps (argument: a JSON file of the page's name, the
#: timeout of a script, and the steps).
RUNNER = r"""
import contextlib, io, json, re, subprocess, sys, traceback

doc, timeout, steps = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {"__name__": "__main__", "__builtins__": __builtins__}
out = io.StringIO()

def pattern(text):
    return "[^\n]*?".join(re.escape(part) for part in text.split("\u2026"))

def fail(line, message):
    sys.stderr.write(f"{doc}:{line}: {message}\n--- output so far ---\n{out.getvalue()}")
    sys.exit(1)

for step in steps:
    kind, line, text = step["kind"], step["line"], step["text"]
    if kind in ("run", "script"):
        out = io.StringIO()
    if kind == "run":
        code = compile("\n" * (line - 1) + text, doc, "exec")
        try:
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
        except BaseException:
            fail(line, "the block raised\n" + traceback.format_exc())
    elif kind == "script":
        done = subprocess.run(
            [sys.executable, text], capture_output=True, text=True, timeout=timeout
        )
        out.write(done.stdout)
        if done.returncode:
            fail(line, f"python {text} exited {done.returncode}\n{done.stderr}")
    else:
        printed, expected = out.getvalue(), text
        if kind == "output":
            regex = pattern(expected.rstrip("\n"))
            if not re.fullmatch(regex, printed.rstrip("\n"), re.DOTALL):
                fail(line, f"printed\n{printed}\nbut the page shows\n{expected}")
        else:
            for wanted in filter(None, expected.splitlines()):
                if not re.search(pattern(wanted), printed):
                    fail(line, f"{wanted!r} was not printed")
"""


@dataclass(frozen=True)
class Block:
    language: str
    line: int
    """The line of the page where the block's text starts (after the opening fence)."""
    text: str
    marker: str | None
    """The HTML comment on the line above the fence, without ``<!--`` and ``-->``."""


def blocks(page: Path) -> list[Block]:
    source = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(source):
        before = source[: match.start()].rstrip(" \t")
        above = before[:-1] if before.endswith("\n") else before
        last = above.rsplit("\n", 1)[-1]
        marker = MARKER.fullmatch(last)
        line = source.count("\n", 0, match.start()) + 2
        found.append(Block(match.group(1), line, match.group(2), marker and marker.group(1)))
    return found


def steps(page: Path) -> tuple[dict[str, str], list[dict[str, object]]]:
    """The files a page asks the reader to save, and what its interpreter does in order."""
    files: dict[str, str] = {}
    plan: list[dict[str, object]] = []
    for block in blocks(page):
        where = f"{page.name}:{block.line}"
        if block.marker is not None and block.marker.startswith("not-runnable"):
            reason = block.marker.removeprefix("not-runnable").lstrip(":").strip()
            assert reason, f"{where}: say why the block is not runnable"
            assert block.language == "python", f"{where}: only python blocks run"
            continue
        if block.language == "text" and block.marker in ("output", "output, any order"):
            kind = "output" if block.marker == "output" else "output-any"
            plan.append({"kind": kind, "line": block.line, "text": block.text})
            continue
        assert block.marker is None, f"{where}: unknown marker <!-- {block.marker} -->"
        if block.language != "python":
            continue
        header = FILE.match(block.text)
        if header is None:
            plan.append({"kind": "run", "line": block.line, "text": block.text})
            continue
        kind, path = header.groups()
        assert not Path(path).is_absolute() and ".." not in Path(path).parts, where
        assert path not in files, f"{where}: {path} is saved twice"
        files[path] = block.text
        if kind == "script":
            plan.append({"kind": "script", "line": block.line, "text": path})
    return files, plan


PAGES = sorted(p for p in DOCS.glob("*.md") if any(b.language == "python" for b in blocks(p)))
#: Pages run two at a time (the examples are CPU-bound: mostly imports and SQLite migrations).
PARALLEL = 2


def run_steps(
    work: Path, doc: str, files: dict[str, str], plan: list[dict[str, object]], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Save ``files`` in the new directory ``work`` and run ``plan`` there in a fresh interpreter."""
    work.mkdir()
    for rel, body in files.items():
        target = work / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
    plan_file = work.parent / f"{work.name}-steps.json"
    plan_file.write_text(json.dumps([doc, timeout, plan]), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(work)}
    env.pop("PYTHONSTARTUP", None)
    return subprocess.run(
        [sys.executable, "-c", RUNNER, str(plan_file)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def page_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """The runs of the selected pages, started together, :data:`PARALLEL` at a time."""
    selected = [
        item.callspec.params["page"]
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_page_examples_run"
        and hasattr(item, "callspec")
    ]
    with ThreadPoolExecutor(PARALLEL) as pool:
        runs = {}
        for page in selected:
            files, plan = steps(page)
            if any(step["kind"] in ("run", "script") for step in plan):
                work = tmp_path_factory.mktemp(page.stem) / "work"
                run = pool.submit(run_steps, work, f"docs/{page.name}", files, plan, PAGE_TIMEOUT)
                runs[page.name] = run
        yield runs
        for run in runs.values():
            run.cancel()


def test_every_page_is_covered() -> None:
    assert {"lifecycle.md", "workflows.md", "recurring.md"} <= {p.name for p in PAGES}
    for page in DOCS.glob("*.md"):  # an indented fence (in a list) would escape FENCE
        indented = re.search(r"^[ \t]+```python", page.read_text(encoding="utf-8"), re.M)
        assert indented is None, f"{page.name}: a python block must start at the margin"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples_run(
    page: Path, page_runs: dict[str, Future[subprocess.CompletedProcess[str]]]
) -> None:
    if page.name not in page_runs:
        pytest.skip(f"{page.name}: every python block is marked not runnable")
    done = page_runs[page.name].result()
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------- the conventions themselves
def run_markdown(root: Path, markdown: str) -> subprocess.CompletedProcess[str]:
    """Run ``markdown`` as a page, in a new directory ``root``."""
    root.mkdir()
    page = root / "page.md"
    page.write_text(markdown, encoding="utf-8")
    files, plan = steps(page)
    return run_steps(root / "work", "page.md", files, plan, 60)


FENCED = "```"


def test_a_failing_block_fails_the_page_and_names_its_line(tmp_path: Path) -> None:
    done = run_markdown(
        tmp_path / "page",
        f"# T\n\n{FENCED}python\nx = 1\n{FENCED}\n\n{FENCED}python\nassert x == 2\n{FENCED}\n",
    )
    assert done.returncode == 1
    assert 'page.md", line 8' in done.stderr and "AssertionError" in done.stderr


def test_blocks_share_a_namespace_and_import_saved_files(tmp_path: Path) -> None:
    done = run_markdown(
        tmp_path / "page",
        f"{FENCED}python\n# file: pkg/mod.py\nVALUE = 41\n{FENCED}\n"
        f"{FENCED}python\nfrom pkg import mod\nx = mod.VALUE\n{FENCED}\n"
        f"{FENCED}python\nprint(x + 1)\n{FENCED}\n"
        f"<!-- output -->\n{FENCED}text\n42\n{FENCED}\n",
    )
    assert done.returncode == 0, done.stderr


def test_a_wrong_output_block_fails(tmp_path: Path) -> None:
    done = run_markdown(
        tmp_path / "page",
        f"{FENCED}python\nprint('job 7 done')\n{FENCED}\n"
        f"<!-- output -->\n{FENCED}text\njob … failed\n{FENCED}\n",
    )
    assert done.returncode == 1 and "but the page shows" in done.stderr
    done = run_markdown(
        tmp_path / "any-order",
        f"{FENCED}python\nprint('b'); print('job 7 done')\n{FENCED}\n"
        f"<!-- output, any order -->\n{FENCED}text\njob … done\nb\n{FENCED}\n",
    )
    assert done.returncode == 0, done.stderr


def test_a_not_runnable_block_is_skipped_and_needs_a_reason(tmp_path: Path) -> None:
    done = run_markdown(
        tmp_path / "page",
        f"<!-- not-runnable: needs a server -->\n{FENCED}python\nraise SystemExit(3)\n{FENCED}\n"
        f"{FENCED}python\nprint('ran')\n{FENCED}\n",
    )
    assert done.returncode == 0, done.stderr
    page = tmp_path / "bare.md"
    page.write_text(f"<!-- not-runnable -->\n{FENCED}python\npass\n{FENCED}\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="say why"):
        steps(page)
