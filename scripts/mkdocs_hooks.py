"""MkDocs hooks for the documentation site (mkdocs.yml ``hooks``).

The package's docstrings name other objects with Sphinx roles (``:class:`~forensics.config.Config```),
which the API pages would otherwise show as written: a role is dropped and a ``~`` name keeps
its last part, as Sphinx shows it.

>>> on_page_content(':class:<code>~forensics.config.Config</code> and :mod:<code>forensics.io</code>')
'<code>Config</code> and <code>forensics.io</code>'
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj):<code>(~?)([\w.]+)</code>")


def _shown(match: re.Match[str]) -> str:
    name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
    return f"<code>{name}</code>"


def on_page_content(html: str, *args: Any, **kwargs: Any) -> str:
    """A page's HTML with the Sphinx roles of its docstrings shown as code."""
    return _ROLE.sub(_shown, html)
