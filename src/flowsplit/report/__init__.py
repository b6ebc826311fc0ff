"""Report rendering shared by every flowsplit study.

* :mod:`flowsplit.report.tables`: column specs and cell formatting.
* :mod:`flowsplit.report.html`: a self-contained HTML page (escaped text, inline CSS,
  figures embedded as base64 PNG).
* :mod:`flowsplit.report.markdown`: the same tables and text as Markdown.
* :mod:`flowsplit.report.figures`: matplotlib (Agg, no pyplot state) plot builders.

Anything that comes from user data (capture names, class names, model names) is
escaped at render time, so callers pass plain strings and never pre-escape.
"""
