"""Open an HTML report in headless Chromium: load, images, console errors, screenshot.

    python benchmarks/report_browser.py OUT/report.html [--screenshot OUT/report.png]

Exits 0 when the page loaded, every image decoded (naturalWidth > 0) and the console
stayed clean; 1 otherwise; 2 when no Chromium is installed (apt-get install chromium).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from flowsplit.report.browser import check_page, find_chromium


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("page", type=Path)
    p.add_argument("--screenshot", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None, help="also write the check as JSON")
    args = p.parse_args(argv)
    if find_chromium() is None:
        print("no chromium found (apt-get install chromium)", file=sys.stderr)
        return 2
    shot = args.screenshot or args.page.with_suffix(".png")
    res = check_page(args.page, screenshot=shot)
    doc = {
        "page": str(args.page),
        "loaded": res.loaded,
        "title": res.title,
        "images": len(res.images),
        "broken_images": res.broken_images,
        "min_natural_width": min((i["natural_width"] for i in res.images), default=None),
        "console_errors": res.console_errors,
        "screenshot": res.screenshot,
        "ok": res.ok,
    }
    print(json.dumps(doc, indent=1))
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1) + "\n")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
