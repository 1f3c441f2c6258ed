"""``shardkit view``: a local, read-only web viewer of a dataset's samples.

:class:`Viewer` serves a paged grid of thumbnails, a page per sample with every field,
filters by key and class, and a stats page, over the standard library's
``ThreadingHTTPServer`` (no dependency, no front-end build, nothing fetched at run time,
no script in any page). Everything read from a shard is untrusted: see
:mod:`shardkit.tools.view._pages` (escaping) and :mod:`shardkit.tools.view._server`
(headers, routes). Design and limits: docs/view.md.
"""

from __future__ import annotations

from ._catalog import Catalog, Entry, Page
from ._server import CSP, Viewer

__all__ = ["CSP", "Catalog", "Entry", "Page", "Viewer"]
