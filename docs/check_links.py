"""Check every internal link of the built site: ``python docs/check_links.py SITE_DIR``.

Every ``href`` and ``src`` that is not an absolute URL must name a file of the site, and
its ``#fragment``, if any, an element id of that page. Prints each broken link with the
page it is on and exits 1 if there is one. External links are not followed (the build
runs without network access). ``make docs`` runs it after Sphinx.
"""
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)
            elif name == "id" and value:
                self.ids.add(value)


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(errors="replace"))
    return page


def broken_links(site: Path) -> list[str]:
    pages = {p.resolve(): parse(p) for p in site.rglob("*.html")}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc or link.startswith(("mailto:", "javascript:")):
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if not target.exists():
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no such file)")
            elif parts.fragment and target.suffix == ".html" and \
                    unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no such anchor)")
    return broken


def main(site: str) -> int:
    broken = broken_links(Path(site))
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    print(f"check_links: {len(broken)} broken link(s) in {site}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
