"""Every Python example of the manual runs, so the manual cannot rot (issue 19, item 8).

Each fenced ``python`` block of README.md and docs/*.md is written to a file in
a temporary folder and run there as a script with this interpreter (a script,
not ``exec``: examples with worker processes need a real ``__main__`` module).
A block that writes files writes them there. A block preceded by an HTML
comment ``<!-- no-test: reason -->`` is skipped with that reason; it is meant
for the few examples that need Spark. Shell blocks are not run.

Most of an example's time is the interpreter start and ``import elastream``,
so the examples start a few at a time, in the background, when the first of
them is tested; each test then waits for its own.

The README stays a short user's manual: its first two commands are
``make demo`` and ``make test``, its links to docs/ resolve, and it keeps to
its line budget (details belong in docs/).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MANUAL = (README, *sorted((ROOT / "docs").glob("*.md")))
#: The README's budget: about 300 lines, the generated figures included.
README_MAX_LINES = 320
#: Per example; a small example takes well under a few seconds even on a loaded machine.
EXAMPLE_TIMEOUT_S = 60
#: Examples running at once (each is one short-lived interpreter).
CONCURRENT_EXAMPLES = 4

FENCE = re.compile(r"^```(?P<lang>[^\n`]*)\n(?P<code>.*?)^```[ \t]*$", re.S | re.M)
NO_TEST = re.compile(r"<!--\s*no-test:\s*(?P<reason>.*?)\s*-->\s*$", re.S)


@dataclass(frozen=True)
class Example:
    """One fenced Python block of a manual page."""

    page: str
    line: int
    code: str
    skip_reason: str | None = None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def python_examples(path: Path, root: Path = ROOT) -> list[Example]:
    """The ``python`` blocks of ``path`` in order, each with its 1-based line and any no-test reason."""
    text = path.read_text(encoding="utf-8")
    page = path.relative_to(root).as_posix()
    examples = []
    for block in FENCE.finditer(text):
        if block["lang"].strip() != "python":
            continue
        marker = NO_TEST.search(text[:block.start()].rstrip() + "\n")
        examples.append(Example(page, text.count("\n", 0, block.start()) + 1, block["code"],
                                marker["reason"] if marker else None))
    return examples


def shell_commands(path: Path) -> list[str]:
    """The command lines of the plain (language-less) fenced blocks of ``path``, comments dropped."""
    commands = []
    for block in FENCE.finditer(path.read_text(encoding="utf-8")):
        if not block["lang"].strip():
            commands += [line.split("#")[0].strip() for line in block["code"].splitlines() if line.strip()]
    return commands


def run_example(example: Example, folder: Path) -> subprocess.CompletedProcess:
    """Run ``example`` as the script ``folder/example.py`` with ``folder`` as its working directory."""
    folder.mkdir(parents=True)
    script = folder / "example.py"
    script.write_text(example.code, encoding="utf-8")
    return subprocess.run([sys.executable, str(script)], cwd=folder, capture_output=True, text=True,
                          timeout=EXAMPLE_TIMEOUT_S)


EXAMPLES = [example for page in MANUAL for example in python_examples(page)]


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Future]]:
    """Every runnable example, started in the background: example id → its run's future."""
    base = tmp_path_factory.mktemp("examples")
    with ThreadPoolExecutor(CONCURRENT_EXAMPLES, thread_name_prefix="manual-example") as pool:
        yield {e.id: pool.submit(run_example, e, base / f"example{i}")
               for i, e in enumerate(EXAMPLES) if not e.skip_reason}


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.id for e in EXAMPLES])
def test_example_runs(example: Example, example_runs: dict[str, Future]) -> None:
    if example.skip_reason:
        pytest.skip(f"{example.id}: {example.skip_reason}")
    done = example_runs[example.id].result()
    assert done.returncode == 0, (f"the example at {example.id} failed (exit {done.returncode}):\n"
                                  f"{done.stderr[-4000:]}")


def test_every_page_of_the_manual_has_examples_and_few_are_exempt() -> None:
    pages = {e.page for e in EXAMPLES}
    assert "README.md" in pages and len(pages) >= 3
    exempt = [e for e in EXAMPLES if e.skip_reason]
    assert all("Spark" in e.skip_reason for e in exempt), "no-test is for examples that need Spark"
    assert len(exempt) <= 2


def test_readme_starts_with_the_two_commands() -> None:
    assert shell_commands(README)[:2] == ["make demo", "make test"]


def test_readme_is_a_short_manual_with_working_links() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    assert "<!-- bench:begin -->" in text and "<!-- bench:end -->" in text
    links = re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", text)
    assert {"docs/architecture.md", "docs/performance.md", "docs/processes-and-rings.md",
            "docs/ordered-parallelism.md"} <= set(links)
    assert [link for link in links if not (ROOT / link).exists()] == []


@pytest.mark.parametrize("page", MANUAL, ids=[p.name for p in MANUAL])
def test_links_between_pages_resolve(page: Path) -> None:
    targets = re.findall(r"\]\(([^):#]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8"))
    assert [t for t in targets if not (page.parent / t).exists()] == []


def test_the_extractor_reads_fences_markers_and_lines(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nprint(1)\n```\n\n<!-- no-test: needs Spark -->\n```python\nx = 2\n```\n\n"
                    "```\nmake demo   # first\n```\n\n```python\ny = 3\n```\n", encoding="utf-8")
    found = python_examples(page, root=tmp_path)
    assert [(e.line, e.code, e.skip_reason) for e in found] == [
        (3, "print(1)\n", None), (8, "x = 2\n", "needs Spark"), (16, "y = 3\n", None)]
    assert shell_commands(page) == ["make demo"]


def test_bench_report_puts_headlines_in_the_readme_and_every_table_in_docs(tmp_path: Path) -> None:
    import json

    from elastream.bench import report

    results = json.loads((ROOT / "bench" / "results" / "latest.json").read_text(encoding="utf-8"))
    readme, page = tmp_path / "README.md", tmp_path / "docs" / "performance.md"
    readme.write_text("intro\n<!-- bench:begin -->\nold\n<!-- bench:end -->\noutro\n", encoding="utf-8")
    assert report.performance_page(str(readme), None) is None     # no docs page beside it: left alone
    page.parent.mkdir()
    page.write_text("notes\n<!-- bench:begin -->\n<!-- bench:end -->\n", encoding="utf-8")
    assert report.performance_page(str(readme), None) == page
    assert report.performance_page(str(readme), "") is None
    report.update_readme(readme, report.render_summary(results))
    report.update_readme(page, report.render_markdown(results))
    summary = readme.read_text(encoding="utf-8")
    assert "\nold\n" not in summary and summary.endswith("outro\n") and "docs/performance.md" in summary
    # One headline row per benchmark in the README; the full tables only in docs.
    assert summary.count("\n| ") == 2 + len(results["results"])      # header, rule, one row each
    assert "Engine overhead" in summary and "| policy | threads |" not in summary
    assert "| policy | threads |" in page.read_text(encoding="utf-8")
