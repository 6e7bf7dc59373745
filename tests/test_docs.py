"""The documentation the code relies on: cited sections exist, and every public name documents its arguments.

The site itself is built strictly in CI (`mkdocs build --strict`: broken links, anchors and docstring entries that
are not in a signature fail it); these tests cover what the site build cannot see: citations of pages under docs/ from
code comments and scripts, and arguments a docstring leaves out.
"""
from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"docs/([A-Za-z0-9_]+\.md)(?:#([A-Za-z0-9_-]+))?")
PUBLIC_MODULES = ["neuralde_seq", "neuralde_seq.models", "neuralde_seq.data", "neuralde_seq.training",
                  "neuralde_seq.sklearn", "neuralde_seq.rules", "neuralde_seq.signatures", "neuralde_seq.ops",
                  "neuralde_seq.basis", "neuralde_seq.reference", "neuralde_seq.random_features"]


def github_anchor(heading: str) -> str:
    """The anchor GitHub (and the site's pymdownx slugify) gives a heading: lower case, punctuation removed,
    each space a hyphen (runs are not collapsed)."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    inside_fence = False
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            inside_fence = not inside_fence
        elif not inside_fence and line.startswith("#"):
            found.add(github_anchor(line.lstrip("#")))
    return found


def test_github_anchor_rule():
    # The rule against headings whose GitHub anchors are known (a wrong rule would pass broken citations).
    assert github_anchor("Closed forms on constant inputs") == "closed-forms-on-constant-inputs"
    assert github_anchor("aeon's ACSF1, OSULeaf: 30 % dropped, 3 seeds") == "aeons-acsf1-osuleaf-30--dropped-3-seeds"
    assert github_anchor("What is solved, how, and what is done with the answer") == \
        "what-is-solved-how-and-what-is-done-with-the-answer"


def cited_sections():
    files = [ROOT / "README.md", *ROOT.glob("docs/*.md")]
    for folder in ("neuralde_seq", "tests", "benchmarks", "tasks", "notebooks"):
        files += sorted((ROOT / folder).rglob("*.py"))
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for page, anchor in CITATION.findall(line):
                yield f"{path.relative_to(ROOT)}:{number}", page, anchor


def test_cited_doc_sections_exist():
    """Every `docs/<page>.md#<anchor>` named in code, tests, scripts, notebooks or docs is a heading of that page."""
    citations = list(cited_sections())
    assert len(citations) > 20  # the code cites the equations and design pages throughout
    broken = []
    for where, page, anchor in citations:
        path = ROOT / "docs" / page
        if not path.is_file():
            broken.append(f"{where}: docs/{page} does not exist")
        elif anchor and anchor not in anchors(path):
            broken.append(f"{where}: docs/{page} has no heading with anchor #{anchor}")
    assert not broken, "\n".join(broken)


def public_callables():
    seen = set()
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if id(obj) in seen or not callable(obj) or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            seen.add(id(obj))
            yield f"{module_name}.{name}", obj


def undocumented_arguments(obj) -> list[str]:
    """Parameters of the function, or of the class's constructor (and of forward for modules), that its docstrings
    do not mention by name."""
    targets = [obj]
    if inspect.isclass(obj):
        targets = [obj.__init__] if "__init__" in vars(obj) else []
        if "forward" in vars(obj):
            targets.append(obj.forward)
    text = (inspect.getdoc(obj) or "") + "\n" + "\n".join(inspect.getdoc(target) or "" for target in targets)
    missing = []
    for target in targets:
        try:
            parameters = inspect.signature(target).parameters
        except (TypeError, ValueError):
            continue
        for parameter in parameters.values():
            if parameter.name in ("self", "cls"):
                continue
            if not re.search(rf"(?<![\w]){re.escape(parameter.name)}(?![\w])", text):
                missing.append(parameter.name)
    return missing


def test_every_public_name_has_a_docstring_naming_each_argument():
    names = list(public_callables())
    assert len(names) > 100
    problems = []
    for qualified, obj in names:
        if not (inspect.getdoc(obj) or "").strip():
            problems.append(f"{qualified}: no docstring")
            continue
        missing = undocumented_arguments(obj)
        if missing:
            problems.append(f"{qualified}: arguments not in its docstring: {', '.join(missing)}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", ["getting_started.md", "concepts.md", "notebooks.md", "index.md"])
def test_site_pages_name_only_existing_notebooks(page):
    """Links to executed notebooks point at a notebooks/NN_name.py source (the .ipynb is generated from it)."""
    text = (ROOT / "docs" / page).read_text()
    for stem in re.findall(r"notebooks/(\d\d_[a-z_]+)\.ipynb", text):
        assert (ROOT / "notebooks" / f"{stem}.py").is_file(), f"docs/{page} links notebook {stem} with no source"
