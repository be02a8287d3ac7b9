"""The offline page of plotly figures: plotly.js inlined once, each figure under its heading, the findings table."""

from __future__ import annotations

from html.parser import HTMLParser

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from lsa_interp.analysis.types import Finding
from lsa_interp.viz.html import figures_page, findings_table


class _Elements(HTMLParser):
    """Every start tag with its attributes and text, in order; the tags closed; the document's declaration."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.opened: list[tuple[str, dict[str, str | None]]] = []
        self.closed: list[str] = []
        self.text: dict[int, str] = {}
        self.declarations: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.opened.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        self.closed.append(tag)

    def handle_data(self, data):
        if self.opened:
            index = len(self.opened) - 1
            self.text[index] = self.text.get(index, "") + data

    def handle_decl(self, decl):
        self.declarations.append(decl)

    def texts(self, tag: str) -> list[str]:
        return [self.text.get(i, "").strip() for i, (name, _) in enumerate(self.opened) if name == tag]


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    parser.close()
    return parser


FINDINGS = [
    Finding("head <2.7> matches", "yes & always", "0.71", True),
    Finding("no-copy lacks it", "5/20", "7/20", False),
    Finding("untested", "-", "-", None),
]


def test_the_findings_table_has_a_row_per_finding_with_its_verdict_and_class():
    table = _parse(findings_table(FINDINGS))
    assert [tag for tag, _ in table.opened if tag == "table"] == ["table"]
    assert table.opened[0] == ("table", {"class": "findings"})
    assert table.texts("th") == ["finding", "paper", "ours", "verdict"]
    assert table.texts("td") == [
        "head <2.7> matches", "yes & always", "0.71", "holds",
        "no-copy lacks it", "5/20", "7/20", "does not hold",
        "untested", "-", "-", "n/a",
    ]  # fmt: skip
    verdict_classes = [attrs.get("class") for tag, attrs in table.opened if tag == "td"][3::4]
    assert verdict_classes == ["holds", "fails", ""]
    assert table.closed.count("tr") == 4 and table.closed.count("td") == 12 and table.closed[-1] == "table"


def test_the_findings_table_escapes_what_it_shows():
    markup = findings_table([Finding("<script>x</script>", "a<b", "c&d", True)])
    assert "<script>" not in markup and "&lt;script&gt;x&lt;/script&gt;" in markup
    assert "<td>a&lt;b</td><td>c&amp;d</td>" in markup


def test_no_findings_make_no_table():
    assert findings_table([]) == ""
    page = figures_page("t", {})
    assert page.split("<body>")[1] == "<h1>t</h1>\n\n</body></html>", "no intro, no table, no figure: the title alone"
    assert "<script" not in page and len(page) < 1000, "no figure: no plotly.js (4.5 MB) to draw none"


def _figure(name: str) -> go.Figure:
    return go.Figure(go.Bar(x=[1, 2], y=[3, 4], name=name))


def test_the_page_inlines_plotly_once_and_shows_each_figure_under_its_heading():
    page = figures_page("Report <copy-200>", {"first & one": _figure("a"), "second": _figure("b")}, FINDINGS,
                        intro="<p class='intro'>Read me.</p>")  # fmt: skip
    assert page.startswith("<!DOCTYPE html><html><head><meta charset='utf-8'>")
    assert page.endswith("</body></html>")
    assert page.count(get_plotlyjs()) == 1, "plotly.js inlined once, in the head, and fetched from nowhere"
    assert page.count("<script type='text/javascript'>") == 1
    outside_plotly = page.replace(get_plotlyjs(), "")
    assert "cdn.plot.ly" not in outside_plotly and "src=" not in outside_plotly
    elements = _parse(page)
    assert elements.declarations == ["DOCTYPE html"]
    assert elements.texts("title") == ["Report <copy-200>"] and elements.texts("h1") == ["Report <copy-200>"]
    assert elements.texts("h2") == ["first & one", "second"]
    assert elements.texts("p") == ["Read me."]
    assert elements.texts("th") == ["finding", "paper", "ours", "verdict"]
    assert [tag for tag, _ in elements.opened][:5] == ["html", "head", "meta", "title", "style"]
    assert elements.closed[-2:] == ["body", "html"] and elements.closed.count("head") == 1
    assert "<html" not in page[len("<!DOCTYPE html><html>") :], "each figure is a fragment, not a document"
    order = [page.index(part) for part in ("<h1>", "Read me.", "class='findings'", "first &amp; one", "second</h2>")]
    assert order == sorted(order)
    plots = [attrs for tag, attrs in elements.opened if tag == "div" and attrs.get("class") == "plotly-graph-div"]
    assert len(plots) == 2


def test_the_page_styles_the_verdicts():
    style = _parse(figures_page("t", {}, FINDINGS)).texts("style")[0]
    assert "td.holds { color: #1a7f37" in style and "td.fails { color: #cf222e" in style
    assert "table.findings" in style
