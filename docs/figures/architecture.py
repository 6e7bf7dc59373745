"""Draw docs/figures/architecture.svg from the layer table of docs/design.md#layers (the table's single source).

Run after changing the table: ``python docs/figures/architecture.py``. tests/test_docs.py fails when the picture
misses a module or layer of the table, or shows one the table no longer has. Plain SVG written here (no plotting
library), so the file is the same on every machine.
"""

from __future__ import annotations

import re
import textwrap
from html import escape
from pathlib import Path

HERE = Path(__file__).resolve().parent
DESIGN = HERE.parent / "design.md"
OUT = HERE / "architecture.svg"

# Where a newcomer adds each kind of thing: (layer number, what, where).
ADDITIONS = {
    1: "new learning rule: a LearningRule subclass + register_rule (rules)",
    2: "new dataset: a module in data/sources that calls register_task",
    3: "new solver method: a Method subclass in solvers/methods (+ its kernel in solvers/)",
    4: "new model: a module in models/ + register_model (models)",
    5: "new closed-form method: an estimator + register_reference_method (reference.registry)",
    6: "new estimator: a class on estimator_base's SequenceEstimatorBase and a classifier or regressor mixin",
}

WIDTH, LEFT, NAME_WIDTH, ROW_GAP, LINE = 1000, 20, 215, 12, 17
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"


def layer_rows(design_text: str) -> list[tuple[int, str, list[str], str]]:
    """(number, title, module names, what lives there) of every row of the table under ``## Layers``, top layer
    first."""
    section = re.search(r"^## Layers\s*$(.*?)(?=^## |\Z)", design_text, flags=re.M | re.S)
    if section is None:
        raise SystemExit("docs/design.md has no '## Layers' section")
    rows = []
    for line in section.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and re.match(r"\d+\b", cells[0]):
            # the cell's prose without its links to other sections ("see [Data wing](#data-wing)")
            what = re.sub(r"[:;,]?\s*(see\s+)?\[[^]]*\]\([^)]*\)", "", cells[2] if len(cells) > 2 else "")
            rows.append(
                (
                    int(re.match(r"\d+", cells[0]).group()),
                    cells[0],
                    re.findall(r"`([^`]+)`", cells[1]),
                    " ".join(what.replace("`", "").split()),
                )
            )
    return sorted(rows, reverse=True)


def svg(rows) -> str:
    """The picture: one box per layer, highest on top (imports point down), its modules inside, and where a new
    rule, dataset, solver method, model, closed-form method or estimator goes."""
    parts, y = [], 50
    shades = ["#eef3fb", "#e3ecf8"]
    for i, (number, title, modules, what) in enumerate(rows):
        lines = textwrap.wrap(", ".join(modules), 95)
        notes = textwrap.wrap(what, 105)
        addition = ADDITIONS.get(number)
        height = 16 + LINE * (len(lines) + len(notes) + (1 if addition else 0)) + 8
        box_width = WIDTH - 2 * LEFT - 60
        parts.append(
            f"<rect x='{LEFT}' y='{y}' width='{box_width}' height='{height}' rx='6' fill='{shades[i % 2]}' "
            f"stroke='#6b8bc3'/>"
        )
        parts.append(
            f"<text x='{LEFT + 10}' y='{y + 22}' {FONT} font-size='14' font-weight='bold' "
            f"fill='#1f3b6e'>{escape(title)}</text>"
        )
        for j, line in enumerate(lines):
            parts.append(
                f"<text x='{LEFT + NAME_WIDTH}' y='{y + 22 + LINE * j}' {FONT} font-size='12.5' "
                f"fill='#222'>{escape(line)}</text>"
            )
        for j, line in enumerate(notes, start=len(lines)):
            parts.append(
                f"<text x='{LEFT + NAME_WIDTH}' y='{y + 22 + LINE * j}' {FONT} font-size='11.5' "
                f"fill='#666'>{escape(line)}</text>"
            )
        if addition:
            parts.append(
                f"<text x='{LEFT + NAME_WIDTH}' y='{y + 22 + LINE * (len(lines) + len(notes))}' {FONT} "
                "font-size='12.5' "
                f"font-style='italic' fill='#a0522d'>+ {escape(addition)}</text>"
            )
        y += height + ROW_GAP
    arrow_x = WIDTH - LEFT - 25
    parts.append(
        f"<line x1='{arrow_x}' y1='60' x2='{arrow_x}' y2='{y - 30}' stroke='#555' stroke-width='2' "
        "marker-end='url(#head)'/>"
    )
    parts.append(
        f"<text x='{arrow_x + 12}' y='{(y + 30) // 2}' {FONT} font-size='12' fill='#555' "
        f"transform='rotate(90 {arrow_x + 12} {(y + 30) // 2})' text-anchor='middle'>imports point down</text>"
    )
    header = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{WIDTH}' height='{y + 10}' "
        f"viewBox='0 0 {WIDTH} {y + 10}'>\n"
        "<defs><marker id='head' markerWidth='10' markerHeight='10' refX='5' refY='5' orient='auto'>"
        "<path d='M0,0 L10,5 L0,10 z' fill='#555'/></marker></defs>\n"
        f"<rect width='{WIDTH}' height='{y + 10}' fill='white'/>\n"
        f"<text x='{LEFT}' y='30' {FONT} font-size='16' font-weight='bold' fill='#111'>neuralde_seq: layers "
        "(a module imports only its own layer or lower ones)</text>\n"
    )
    return header + "\n".join(parts) + "\n</svg>\n"


def main() -> None:
    OUT.write_text(svg(layer_rows(DESIGN.read_text(encoding="utf-8"))), encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
