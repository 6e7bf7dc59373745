"""mkdocs hook: the API pages' citations of the docs (``docs/equations.md#forget-gate`` in a docstring) become links.

Docstrings cite the Markdown pages by their paths in the repository, which read well in ``help()``, an editor and on
GitHub; on the site the same text becomes a link to the page and section. tests/test_docs.py checks that every cited
page and heading exists; here a citation of a page the site does not have fails the build too.
"""

from __future__ import annotations

import re

from mkdocs.exceptions import PluginError
from mkdocs.utils import get_relative_url

# a citation in text: not part of a URL or an attribute already (no "/" or quote before it)
CITATION = re.compile(r"(?<![/\"'=\w])docs/(?P<page>[A-Za-z0-9_]+\.md)(?:#(?P<anchor>[A-Za-z0-9_-]+))?")


def on_page_content(html, page, config, files):
    if not page.file.src_uri.startswith("api/"):
        return html

    def link(match: re.Match) -> str:
        target = files.get_file_from_path(match["page"])
        if target is None:
            raise PluginError(f"{page.file.src_uri}: a docstring cites {match[0]}, a page the site does not have")
        url = get_relative_url(target.url, page.url) + (f"#{match['anchor']}" if match["anchor"] else "")
        return f'<a href="{url}">{match[0]}</a>'

    return CITATION.sub(link, html)
