"""Main text of an HTML page with the standard library: drop scripts, menus and footers, prefer <main>/<article>."""

from __future__ import annotations

from html.parser import HTMLParser

_SKIP = {
    "script",
    "style",
    "noscript",
    "template",
    "svg",
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "button",
    "select",
    "iframe",
    "head",
}
_MAIN = {"main", "article"}
_BLOCK = {
    "p",
    "div",
    "section",
    "li",
    "ul",
    "ol",
    "br",
    "tr",
    "table",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
    "pre",
    "dd",
    "dt",
    "figcaption",
    "td",
    "th",
} | _MAIN
_VOID = {"br", "img", "hr", "meta", "link", "input", "area", "base", "col", "embed", "source", "track", "wbr"}


class _TextCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skip_depth = 0
        self.main_depth = 0
        self.in_title = False
        self.title: list[str] = []
        self.all_text: list[str] = []
        self.main_text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        if tag in _VOID:
            self._break()
            return
        if tag in _SKIP:
            self.skip_depth += 1
        if tag in _MAIN:
            self.main_depth += 1
        if tag in _BLOCK:
            self._break()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in _SKIP and self.skip_depth:
            self.skip_depth -= 1
        if tag in _MAIN and self.main_depth:
            self.main_depth -= 1
        if tag in _BLOCK:
            self._break()

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title.append(data)
            return
        if self.skip_depth:
            return
        self.all_text.append(data)
        if self.main_depth:
            self.main_text.append(data)

    def _break(self) -> None:
        self.all_text.append("\n")
        if self.main_depth:
            self.main_text.append("\n")


def _tidy(parts: list[str]) -> str:
    lines = (" ".join(line.split()) for line in "".join(parts).splitlines())
    return "\n".join(line for line in lines if line)


def html_to_text(markup: str) -> tuple[str, str]:
    """(title, main text) of an HTML document; never raises on broken markup."""
    parser = _TextCollector()
    parser.feed(markup)
    parser.close()
    main = _tidy(parser.main_text)
    # A page whose <main> holds only a heading is mis-marked up; the whole body then says more.
    text = main if len(main) >= 200 else _tidy(parser.all_text)
    return " ".join("".join(parser.title).split()), text
