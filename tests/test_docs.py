"""The documentation the code relies on: cited sections exist, and every public name documents its arguments.

The site itself is built strictly in CI (`mkdocs build --strict`: broken links, anchors and docstring entries that
are not in a signature fail it); these tests cover what the site build cannot see: citations of pages under docs/ from
code comments and scripts, and arguments a docstring leaves out; and the README's two snippets that the Getting
Started page includes run as written.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CITATION = re.compile(r"docs/([A-Za-z0-9_]+\.md)(?:#([A-Za-z0-9_-]+))?")
PUBLIC_MODULES = [
    "neuralde_seq",
    "neuralde_seq.models",
    "neuralde_seq.data",
    "neuralde_seq.training",
    "neuralde_seq.sklearn",
    "neuralde_seq.rules",
    "neuralde_seq.signatures",
    "neuralde_seq.ops",
    "neuralde_seq.solvers",
    "neuralde_seq.basis",
    "neuralde_seq.reference",
    "neuralde_seq.random_features",
]


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
    assert (
        github_anchor("What is solved, how, and what is done with the answer")
        == "what-is-solved-how-and-what-is-done-with-the-answer"
    )


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
        # a Protocol (e.g. `Dynamics`) is never constructed: its __init__ is typing's placeholder
        targets = [obj.__init__] if "__init__" in vars(obj) and not getattr(obj, "_is_protocol", False) else []
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


# ------------------------------------------------------------------------------------------------------------------
# Equations (issue 25, "Docs"): the pages write their math as LaTeX in $...$ and $$...$$ (pymdownx.arithmatex,
# typeset by MathJax on the site; GitHub reads the same delimiters). These checks would have caught the pages that
# wrote pseudo-LaTeX as plain text (`R^{d_v × d_k}`, `e^{−c‖k‖²h}`).

# The TeX macros the pages use, each one MathJax 3's TeX input knows: a misspelt or unknown macro shows in red.
ALLOWED_MACROS = {
    "alpha",
    "beta",
    "gamma",
    "delta",
    "Delta",
    "varepsilon",
    "theta",
    "lambda",
    "Lambda",
    "mu",
    "pi",
    "sigma",
    "tau",
    "varphi",
    "psi",
    "omega",
    "ell",
    "mathbb",
    "mathcal",
    "text",
    "operatorname",
    "top",
    "times",
    "cdot",
    "circ",
    "odot",
    "in",
    "sim",
    "approx",
    "le",
    "ge",
    "to",
    "mapsto",
    "leftarrow",
    "frac",
    "dfrac",
    "sqrt",
    "sum",
    "prod",
    "int",
    "log",
    "exp",
    "sin",
    "cos",
    "tanh",
    "sinh",
    "max",
    "lVert",
    "rVert",
    "lvert",
    "rvert",
    "lceil",
    "rceil",
    "big",
    "Big",
    "dots",
    "qquad",
    "quad",
    "begin",
    "end",
    "|",
    ",",
    ";",
    "!",
    "\\",
}
# Characters that stand for a macro (or for plain ASCII) inside math: MathJax would typeset them, but as text glyphs
# in the wrong font and spacing, and `‖` is the pseudo-LaTeX norm.
UNICODE_IN_MATH = "‖ᵀ−×σβλγ∈Σ∫√²³⁻₀₁₂⊙≈→"
PSEUDO_LATEX_OUTSIDE_MATH = re.compile(r"\^\{|_\{|‖|ᵀ|\b[A-Za-z]\^[0-9A-Za-z(]")
EQUATION_PAGES = [
    "equations.md",
    "concepts.md",
    "gating.md",
    "linear_cdes.md",
    "log_ncde.md",
    "stateful_odenets.md",
    "design.md",
]
INLINE_MATH = re.compile(r"(?<![\\$])\$(?![\s$])((?:\\.|[^\\$])+?)(?<!\s)\$")


def prose_lines(page: Path):
    """(line number, line) outside fenced code blocks, and the $$...$$ blocks as (first line number, TeX)."""
    lines, blocks = [], []
    fence, block = None, None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
        elif block is not None:
            if stripped == "$$":
                blocks.append(block)
                block = None
            else:
                block = (block[0], block[1] + "\n" + stripped)
        elif stripped.startswith("```"):
            fence = "```"
        elif stripped == "$$":
            block = (number, "")
        else:
            lines.append((number, line))
    assert fence is None and block is None, f"docs/{page.name}: a code fence or $$ block is not closed"
    return lines, blocks


def math_problems(tex: str) -> list[str]:
    problems = []
    depth = 0
    for char in re.sub(r"\\[{}|]", "", tex):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if depth < 0:
            break
    if depth != 0:
        problems.append("unbalanced braces")
    unknown = {m for m in re.findall(r"\\([A-Za-z]+|.)", tex)} - ALLOWED_MACROS
    if unknown:
        problems.append(f"macros not in the allowed list: {sorted(unknown)}")
    found = sorted({c for c in tex if c in UNICODE_IN_MATH})
    if found:
        problems.append(f"unicode {found} instead of TeX")
    if len(re.findall(r"\\left(?![A-Za-z])", tex)) != len(re.findall(r"\\right(?![A-Za-z])", tex)) or tex.count(
        r"\begin{"
    ) != tex.count(r"\end{"):
        problems.append("unbalanced \\left/\\right or \\begin/\\end")
    return problems


def test_math_checks_catch_pseudo_latex():
    # The checks against the kind of text the pages had before (a wrong check would pass them).
    assert math_problems(r"\frac{1 - e^{-c\|k\|^2 h}}{\|k\|^2}") == []
    assert math_problems(r"e^{−c‖k‖²h}") == ["unicode ['²', '‖', '−'] instead of TeX"]
    assert math_problems(r"\frac{1}{2") == ["unbalanced braces"]
    assert math_problems(r"\mathbbm{R}") == ["macros not in the allowed list: ['mathbbm']"]
    assert "unbalanced \\left/\\right or \\begin/\\end" in math_problems(r"\left( x \leftarrow y")
    assert PSEUDO_LATEX_OUTSIDE_MATH.search("the fast weight is W ∈ R^{d_v × d_k}")
    assert not PSEUDO_LATEX_OUTSIDE_MATH.search(INLINE_MATH.sub("", r"is $W \in \mathbb{R}^{d_v \times d_k}$"))


@pytest.mark.parametrize("page", sorted(p.name for p in (ROOT / "docs").glob("*.md")))
def test_page_math_is_latex_in_delimiters(page):
    """Every math span and block is well-formed TeX with known macros; no pseudo-LaTeX is left outside math; in a
    table row, math holds no `|` (it would split the cell: \\lVert, \\rvert instead)."""
    lines, blocks = prose_lines(ROOT / "docs" / page)
    problems = [f"docs/{page}:{n}: $$ block: {p}" for n, tex in blocks for p in math_problems(tex)]
    for number, line in lines:
        text = re.sub(r"`[^`]*`", "", line)  # code spans are code, not math
        if text.count("$") % 2:
            problems.append(f"docs/{page}:{number}: an odd number of $ (math must open and close on one line)")
            continue
        spans = INLINE_MATH.findall(text)
        for tex in spans:
            problems += [f"docs/{page}:{number}: ${tex}$: {p}" for p in math_problems(tex)]
            if line.lstrip().startswith("|") and "|" in tex:
                problems.append(f"docs/{page}:{number}: ${tex}$: a | inside a table cell's math")
        outside = INLINE_MATH.sub("", text)
        if PSEUDO_LATEX_OUTSIDE_MATH.search(outside):
            problems.append(f"docs/{page}:{number}: pseudo-LaTeX outside $...$: {line.strip()[:100]}")
        if page in EQUATION_PAGES and re.search(r"[‖ᵀ]", outside):
            problems.append(f"docs/{page}:{number}: a norm or transpose as unicode outside math")
    assert not problems, "\n".join(problems)


def mkdocs_config() -> dict:
    yaml = pytest.importorskip("yaml")

    class Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml's !!python/... tags (the slugify function) are not needed here.
    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)


def test_site_enables_arithmatex_and_mathjax():
    config = mkdocs_config()
    extensions = {}
    for entry in config["markdown_extensions"]:
        extensions.update(entry if isinstance(entry, dict) else {entry: None})
    assert extensions.get("pymdownx.arithmatex") == {"generic": True}
    scripts = config["extra_javascript"]
    assert (ROOT / "docs" / "javascripts" / "mathjax.js").is_file() and "javascripts/mathjax.js" in scripts
    assert any(re.search(r"mathjax@3[\d.]*/es5/tex-mml-chtml\.js$", s) for s in scripts)
    # The MathJax configuration typesets arithmatex's output: \( \) inline and \[ \] display.
    js = (ROOT / "docs" / "javascripts" / "mathjax.js").read_text()
    assert 'processHtmlClass: "arithmatex"' in js and r'["\\(", "\\)"]' in js and r'["\\[", "\\]"]' in js


@pytest.mark.parametrize("page", EQUATION_PAGES)
def test_equation_pages_render_every_dollar_as_math(page):
    """The page through the site's Markdown extensions: every $ is consumed by arithmatex (none shows as text,
    e.g. a $$ block indented too little inside a list item), and the page has math."""
    markdown = pytest.importorskip("markdown")
    pytest.importorskip("pymdownx.arithmatex")
    config = mkdocs_config()
    names, options = [], {}
    for entry in config["markdown_extensions"]:
        name, settings = next(iter(entry.items())) if isinstance(entry, dict) else (entry, None)
        if name in ("toc", "pymdownx.snippets"):  # anchors and file inclusion: irrelevant here
            continue
        names.append(name)
        if settings:
            options[name] = settings
    html = markdown.markdown((ROOT / "docs" / page).read_text(), extensions=names, extension_configs=options)
    assert html.count('class="arithmatex"') >= 3
    text = re.sub(r"<code>.*?</code>|<pre>.*?</pre>", "", html, flags=re.S)
    text = re.sub(r'<(span|div) class="arithmatex">.*?</\1>', "", text, flags=re.S)
    assert "$" not in text, f"docs/{page}: a $ left as text: {text[max(0, text.find('$') - 80) : text.find('$') + 80]}"


# ------------------------------------------------------------------------------------------------------------------
# The architecture picture (docs/design.md#architecture) is drawn from the layer table: it may not drift from it.


def test_architecture_picture_is_drawn_from_the_layer_table():
    """docs/figures/architecture.svg equals what docs/figures/architecture.py draws from today's table (rerun the
    script after changing the table), and it names every layer and every module entry of the table."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("architecture", ROOT / "docs" / "figures" / "architecture.py")
    architecture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(architecture)
    rows = architecture.layer_rows((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    committed = (ROOT / "docs" / "figures" / "architecture.svg").read_text(encoding="utf-8")
    assert committed == architecture.svg(rows), (
        "docs/figures/architecture.svg is stale: run docs/figures/architecture.py"
    )
    # independent of the drawing code: every table entry appears as text in the picture
    table = re.search(r"^## Layers\s*$(.*?)(?=^## |\Z)", (ROOT / "docs" / "design.md").read_text(), re.M | re.S)
    entries = re.findall(r"^\|\s*(\d+[^|]*?)\s*\|([^|]*)\|", table.group(1), re.M)
    assert len(entries) >= 5
    text = " ".join(re.findall(r">([^<]*)</text>", committed))
    for title, modules in entries:
        assert title in text, title
        for module in re.findall(r"`([^`]+)`", modules):
            assert module in text, module
    assert "figures/architecture.svg" in (ROOT / "docs" / "design.md").read_text()


def _readme_snippet(name: str) -> str:
    """The Python code of the README snippet ``name`` (between its ``--8<--`` markers; the Getting Started page
    includes it)."""
    text = (ROOT / "README.md").read_text()
    found = re.search(
        rf"<!-- --8<-- \[start:{re.escape(name)}\] -->\n```python\n(.*?)```\n<!-- --8<-- \[end:{re.escape(name)}\] -->",
        text,
        re.S,
    )
    assert found, f"README has no python snippet {name!r}"
    return found.group(1)


def test_readme_first_model_runs_as_written():
    """The README's first model, run unchanged: logits (8, 4) with finite gradients for every parameter, and the
    sequence-to-sequence read-out at every knot."""
    import torch

    scope: dict = {}
    exec(compile(_readme_snippet("first-model"), "README.md:first-model", "exec"), scope)
    assert scope["logits"].shape == (8, 4) and bool(torch.isfinite(scope["logits"]).all())
    grads = [p.grad for p in scope["model"].parameters() if p.requires_grad]
    assert grads and all(g is not None and bool(torch.isfinite(g).all()) for g in grads)
    assert scope["outputs"].shape == (8, int(scope["lengths"].max()), 64)


def test_readme_estimator_runs_as_written(capsys):
    """The README's scikit-learn snippet, run unchanged: predictions among the given labels, probabilities summing
    to 1."""
    import numpy as np

    scope: dict = {}
    exec(compile(_readme_snippet("estimator"), "README.md:estimator", "exec"), scope)
    clf, X, times = scope["clf"], scope["X"], scope["times"]
    assert set(clf.predict(X[:5], times=times[:5])) <= {"walk", "run"}
    np.testing.assert_allclose(clf.predict_proba(X[:5], times=times[:5]).sum(1), 1.0, rtol=1e-6)


def test_readme_records_run_as_written():
    """The README's records snippet, run unchanged: the long frame read back holds every simulated stay, and the
    trained model ranks the held-out stays' outcomes far better than chance (a broken path, e.g. the outcome or the
    counts of observations lost on the way, gives about 0.5), as does the summary-feature reference beside it."""
    import warnings

    scope: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one warning per fit naming the channels a stay never measures
        exec(compile(_readme_snippet("records"), "README.md:records", "exec"), scope)
    assert len(scope["X"]) == 600 and all(x.shape[1] == 7 for x in scope["X"])
    assert set(scope["y"]) == {"good outcome", "poor outcome"}
    assert scope["auroc"].keys() == {"SequenceClassifier", "SummaryFeatureClassifier"}
    assert min(scope["auroc"].values()) > 0.8, scope["auroc"]
    assert len(_readme_snippet("records").strip().splitlines()) <= 12


def test_the_api_pages_citations_of_the_docs_become_links_to_their_sections():
    # docstrings cite docs/<page>.md#<section> as text: on the site's API pages it was text, not a link
    pytest.importorskip("mkdocs", reason="the site's hook needs mkdocs: pip install -e '.[docs]'")
    import importlib.util

    from mkdocs.config import load_config
    from mkdocs.structure.files import get_files
    from mkdocs.structure.pages import Page

    spec = importlib.util.spec_from_file_location("doc_citations", ROOT / "mkdocs_hooks" / "doc_citations.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    config = load_config(str(ROOT / "mkdocs.yml"))
    files = get_files(config)
    page = Page(None, files.get_file_from_path("api/rules.md"), config)
    html = (
        "<p>Exact steps (docs/equations.md#closed-forms-on-constant-inputs), see docs/benchmarks.md; "
        '<a href="https://example.org/docs/design.md">kept</a></p>'
    )
    out = hook.on_page_content(html, page, config, files)
    assert out == (
        '<p>Exact steps (<a href="../../equations/#closed-forms-on-constant-inputs">'
        "docs/equations.md#closed-forms-on-constant-inputs</a>), see "
        '<a href="../../benchmarks/">docs/benchmarks.md</a>; '
        '<a href="https://example.org/docs/design.md">kept</a></p>'
    )
    missing = "docs/" + "nowhere.md"  # (spelt apart: test_cited_doc_sections_exist reads this file's citations)
    with pytest.raises(Exception, match=f"cites {missing}"):
        hook.on_page_content(f"<p>{missing}</p>", page, config, files)
    # a page outside the API reference is Markdown with links of its own: left alone
    guide = Page(None, files.get_file_from_path("benchmarks.md"), config)
    assert hook.on_page_content(html, guide, config, files) == html
