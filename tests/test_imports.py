"""The package's import graph: no cycles, and no module imports a module of a higher layer than its own.

The graph is read from the source with `ast`, without importing anything: every ``import`` and ``from ... import``
of the package, wherever it stands (module level, inside functions: the lazy ones, under ``if TYPE_CHECKING``: a
type-only import still means the module knows the other one). Relative imports are resolved to absolute module
names, and ``from .x import name`` where ``name`` is a submodule counts as importing that submodule. Importing a
module does not count as importing its parent packages' ``__init__`` (Python runs them, but they are the
packages' front doors, not dependencies of the code).

The layers are the table of docs/design.md#layers, parsed here: that page is their single source.

No module has more than `MAX_MODULE_LINES` lines (issue 37: a module of more holds several concepts), but those
in `OVERSIZED_MODULES`, each named with the split that will bring it within the limit.
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import re
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "neuralde_seq"
DESIGN = ROOT / "docs" / "design.md"

# Cycles known and left for a later step of issue 26, each with the reason. The test fails when one of them no
# longer exists (remove it here then), so this list can only shrink.
KNOWN_CYCLES: dict[frozenset, str] = {}  # none left

MAX_MODULE_LINES = 800
# Modules over the limit, each with the split that brings it within: the test fails when one of them is within the
# limit (remove it here then), so this list can only shrink, and it is empty once the splits of issue 37 have landed.
OVERSIZED_MODULES: dict[str, str] = {}  # none left


# ---------------------------------------------------------------------------------------------------
# reading the graph


def package_modules(package_dir: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, whether it is a package's ``__init__``)."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


def imports_of(name: str, path: Path, is_package: bool, modules: dict, package: str) -> list[tuple[str, int]]:
    """(imported module of the package, line) for every import statement of one module, lazy ones included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    own_package = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: level 1 is the module's own package, each further dot one package up
                base = own_package.split(".")
                if node.level - 1 >= len(base):
                    raise ValueError(f"{path}:{node.lineno}: relative import above the top-level package")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # from X import y: the submodule X.y when there is one, else X itself (a name defined in X)
            targets = [
                f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source for alias in node.names
            ]
        else:
            continue
        for target in targets:
            if target != package and not target.startswith(package + "."):
                continue  # another library
            # `import a.b.c` of something that is not a module (a typo) still names a module of the package
            while target not in modules and "." in target:
                target = target.rpartition(".")[0]
            if target != name and (target, node.lineno) not in found:
                found.append((target, node.lineno))
    return found


def module_lines(package_dir: Path, package: str) -> dict[str, int]:
    """Every module of the package: dotted name -> its number of lines."""
    return {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, (path, _) in package_modules(package_dir, package).items()
    }


def oversized(lines: dict[str, int], limit: int, allowed: dict[str, str]) -> tuple[list[str], list[str]]:
    """(modules over ``limit`` lines that ``allowed`` does not name, as "name: N lines", longest first; modules
    ``allowed`` names that are within the limit or gone)."""
    over = sorted(
        ((count, name) for name, count in lines.items() if count > limit and name not in allowed), reverse=True
    )
    within = sorted(name for name in allowed if lines.get(name, 0) <= limit)
    return [f"{name}: {count} lines" for count, name in over], within


def import_graph(package_dir: Path, package: str) -> dict[str, list[tuple[str, int]]]:
    modules = package_modules(package_dir, package)
    return {name: imports_of(name, path, is_package, modules, package) for name, (path, is_package) in modules.items()}


def cycles(graph: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """The cycles of the graph: in each strongly connected component of more than one module (Tarjan), the shortest
    cycle through each member (each cycle once), as its modules in import order, the first repeated at the end."""
    edges = {name: sorted({target for target, _ in targets}) for name, targets in graph.items()}
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(start):  # iterative Tarjan: no recursion limit on deep graphs
        work = [(start, iter(edges.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(edges.get(successor, ()))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(set(component))

    for name in sorted(edges):
        if name not in index:
            visit(name)
    found, seen = [], set()
    for component in components:
        for start in sorted(component):  # the shortest cycle through each member: every cycle gets named
            cycle = _shortest_cycle(start, edges, component)
            if frozenset(cycle) not in seen:
                seen.add(frozenset(cycle))
                found.append(cycle)
    return sorted(found, key=lambda cycle: (len(cycle), cycle))


def _shortest_cycle(start: str, edges: dict[str, list[str]], component: set[str]) -> list[str]:
    previous, queue = {start: None}, deque([start])
    while queue:  # breadth first from start back to start, inside the component (which holds such a path)
        node = queue.popleft()
        successors = [s for s in edges[node] if s in component]
        if start in successors:
            path = [start]
            while node is not None:
                path.append(node)
                node = previous[node]
            return path[::-1]
        for successor in successors:
            if successor not in previous:
                previous[successor] = node
                queue.append(successor)
    raise AssertionError(f"{start} is on no cycle of its component")


# ---------------------------------------------------------------------------------------------------
# the layers of docs/design.md


def _architecture_script():
    """docs/figures/architecture.py, which draws the picture from the same table: its reader is the one reader."""
    spec = importlib.util.spec_from_file_location("architecture", ROOT / "docs" / "figures" / "architecture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_layers(design_text: str) -> list[tuple[int, str, list[str]]]:
    """The rows of the table under ``## Layers``: (layer number, its title, its module patterns), read by the
    picture script's `layer_rows`."""
    if re.search(r"^## Layers\s*$", design_text, flags=re.M) is None:
        raise AssertionError("docs/design.md has no '## Layers' section: the import test reads the layers there")
    rows = [(number, title, modules) for number, title, modules, _ in _architecture_script().layer_rows(design_text)]
    if not rows:
        raise AssertionError(
            "the '## Layers' section of docs/design.md has no table rows '| <number> ... | `module`, ... |'"
        )
    return rows


def module_layers(rows, modules, package: str) -> tuple[dict[str, int], list[str]]:
    """Each module's layer (a name listed on its own wins over a ``pkg.*`` pattern; of two patterns, the longer),
    and the problems of the table: modules in no layer, names listed twice, entries that match no module."""
    exact, patterns, problems = {}, [], []
    for number, _, names in rows:
        for entry in names:
            full = package if entry == "__init__" else f"{package}.{entry}"
            if entry.endswith(".*"):
                patterns.append((full, number))
            elif full in exact:
                problems.append(f"`{entry}` is listed in layers {exact[full]} and {number}")
            else:
                exact[full] = number
    layers = {}
    for name in modules:
        if name in exact:
            layers[name] = exact[name]
            continue
        matching = sorted((p for p in patterns if fnmatch.fnmatchcase(name, p[0])), key=lambda p: -len(p[0]))
        if matching:
            layers[name] = matching[0][1]
        else:
            problems.append(f"module {name} is in no layer of docs/design.md#layers: add it to the table")
    for full in exact:
        if full not in modules:
            problems.append(f"docs/design.md#layers lists {full}, which is not a module of the package")
    for pattern, _ in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in modules):
            problems.append(f"docs/design.md#layers lists {pattern}, which matches no module of the package")
    return layers, problems


def upward_imports(graph, layers) -> list[str]:
    return [
        f"{name} (layer {layers[name]}) imports {target} (layer {layers[target]}) at line {line}"
        for name, targets in sorted(graph.items())
        for target, line in targets
        if name in layers and target in layers and layers[target] > layers[name]
    ]


@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT / PACKAGE, PACKAGE)


@pytest.fixture(scope="module")
def layers(graph):
    found, problems = module_layers(read_layers(DESIGN.read_text(encoding="utf-8")), graph, PACKAGE)
    return found, problems


# ---------------------------------------------------------------------------------------------------
# the package


def test_every_module_has_exactly_one_layer(layers):
    _, problems = layers
    assert not problems, "the layer table of docs/design.md does not fit the package:\n" + "\n".join(problems)


def test_the_package_has_no_import_cycle(graph):
    found = cycles(graph)
    unexpected = [cycle for cycle in found if frozenset(cycle) not in KNOWN_CYCLES]
    assert not unexpected, (
        "import cycles (each module imports the next, lazy imports included; break each by "
        "moving what both need into a lower module):\n" + "\n".join(" -> ".join(cycle) for cycle in unexpected)
    )
    gone = [sorted(members) for members in KNOWN_CYCLES if frozenset(members) not in {frozenset(c) for c in found}]
    assert not gone, f"these known cycles no longer exist: remove them from KNOWN_CYCLES: {gone}"


def test_no_module_imports_a_higher_layer(graph, layers):
    found, _ = layers
    upward = upward_imports(graph, found)
    assert not upward, (
        "imports from a higher layer than the importing module's own (docs/design.md#layers):\n" + "\n".join(upward)
    )


def test_no_module_has_more_than_800_lines():
    over, within = oversized(module_lines(ROOT / PACKAGE, PACKAGE), MAX_MODULE_LINES, OVERSIZED_MODULES)
    assert not over, (
        f"modules of more than {MAX_MODULE_LINES} lines (split each into rooms by concept, "
        "docs/design.md#architecture):\n" + "\n".join(over)
    )
    assert not within, f"within {MAX_MODULE_LINES} lines now: remove them from OVERSIZED_MODULES: {within}"


# ---------------------------------------------------------------------------------------------------
# the reader itself, on a package written here: each kind of import it must see


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for relative, text in files.items():
        path = root / "toy" / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "toy"


def test_the_reader_sees_lazy_relative_typing_and_submodule_imports(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "__init__.py": "from .low import a\n",
            "low.py": "def a():\n    from .high import b  # lazy\n    return b\n",
            "high.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub.leaf import c\nimport os\n",
            "sub/__init__.py": "",
            "sub/leaf.py": "from .. import low\nfrom ..sub import other\nimport toy.high as h\n",
            "sub/other.py": "x = 1\n",
        },
    )
    graph = import_graph(package, "toy")
    edges = {name: sorted({target for target, _ in targets}) for name, targets in graph.items()}
    assert edges == {
        "toy": ["toy.low"],
        "toy.low": ["toy.high"],  # inside a function
        "toy.high": ["toy.sub.leaf"],  # under TYPE_CHECKING; os is another library
        "toy.sub": [],
        "toy.sub.leaf": ["toy.high", "toy.low", "toy.sub.other"],  # `from .. import low`: the submodule low
        "toy.sub.other": [],
    }
    assert cycles(graph) == [
        ["toy.high", "toy.sub.leaf", "toy.high"],
        ["toy.low", "toy.high", "toy.sub.leaf", "toy.low"],
    ]


def test_the_layer_check_names_an_upward_import_and_the_package_init(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "__init__.py": "from .front import f\n",
            "front.py": "from .base import g\n",
            "base.py": "def g():\n"
            "    from . import __version__  # the package's __init__: upward\n"
            "    from .front import f\n",
        },
    )
    graph = import_graph(package, "toy")
    table = (
        "## Layers\n\n| layer | modules |\n|---|---|\n| 0 base | `base` |\n| 1 front | `front`, `__init__` |\n"
        "\n## Next\n| 9 not a layer row | `base` |\n"
    )
    found, problems = module_layers(read_layers(table), graph, "toy")
    assert problems == [] and found == {"toy": 1, "toy.front": 1, "toy.base": 0}
    assert upward_imports(graph, found) == [
        "toy.base (layer 0) imports toy (layer 1) at line 2",
        "toy.base (layer 0) imports toy.front (layer 1) at line 3",
    ]
    _, problems = module_layers(read_layers(table.replace("`front`, ", "`gone`, ")), graph, "toy")
    assert problems == [
        "module toy.front is in no layer of docs/design.md#layers: add it to the table",
        "docs/design.md#layers lists toy.gone, which is not a module of the package",
    ]


def test_the_line_count_names_each_module_over_the_limit_and_each_exception_within_it(tmp_path):
    package = _write_package(
        tmp_path,
        {
            "__init__.py": "x = 1\n" * 3,
            "at_limit.py": "x = 1\n" * 10,
            "over.py": "x = 1\n" * 11,  # no newline at the end of the last line counts the same
            "sub/__init__.py": "",
            "sub/longest.py": "x = 1\n" * 19 + "x = 1",
            "excused.py": "x = 1\n" * 12,
            "split.py": "x = 1\n" * 4,
        },
    )
    lines = module_lines(package, "toy")
    assert lines == {
        "toy": 3,
        "toy.at_limit": 10,
        "toy.excused": 12,
        "toy.over": 11,
        "toy.split": 4,
        "toy.sub": 0,
        "toy.sub.longest": 20,
    }
    assert oversized(lines, 10, {"toy.excused": "split later", "toy.split": "split already", "toy.gone": "moved"}) == (
        ["toy.sub.longest: 20 lines", "toy.over: 11 lines"],
        ["toy.gone", "toy.split"],
    )
