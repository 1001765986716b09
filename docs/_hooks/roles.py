"""MkDocs hook: the docstrings' Sphinx roles (``:meth:`x```, ``:class:`~a.b.C```) read as plain
code in the generated API pages (mkdocstrings renders them as the role's text otherwise)."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:meth|class|func|attr|mod|data|exc|obj|ref):<code>(~?)([^<]*)</code>")


def _plain(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"<code>{target.rsplit('.', 1)[-1] if short else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_plain, html)
