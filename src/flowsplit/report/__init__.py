"""Report rendering shared by every flowsplit study.

* :mod:`flowsplit.report.page`: a report written once as a page of sections and blocks
  (text, lists, tables, figures, folded parts), rendered as a self-contained HTML page
  (escaped text, inline CSS, figures embedded as base64 PNG) and as its Markdown twin;
  the tables' column specs and cell formatting.
* :mod:`flowsplit.report.figures`: matplotlib (Agg, no pyplot state) plot builders.

Anything that comes from user data (capture names, class names, model names) is
escaped at render time, so callers pass plain strings and never pre-escape.
"""
