"""The generated HTML in a real browser (headless Debian Chromium through Playwright, file:// URLs): no
request leaves the file, no JavaScript error, something is drawn, and the attention view's selectors work.

Chromium is required, not optional: ``make chromium`` (run by ``make test``) installs the Debian package.
"""

from __future__ import annotations

import plotly.graph_objects as go
import pytest
import torch

from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.viz.attention import attention_view
from tests.viz.chromium import PageLog, launch, png_colours

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.slow  # about 20 s: Chromium over four pages
torch.set_num_threads(1)
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")
PLOTLY_READY = (
    "(() => { const graphs = [...document.querySelectorAll('.plotly-graph-div')];"
    " return graphs.length > 0 && graphs.every(g => g.querySelector('.main-svg') !== null); })()"
)
CIRCUITSVIS_READY = "document.querySelector('[id^=circuits-vis-] canvas, [id^=circuits-vis-] svg') !== null"
CLICK_LAYER_2_HEAD_3 = """(async () => {
  const graph = document.querySelector('.plotly-graph-div');
  const pause = () => new Promise(done => setTimeout(done, 200));
  const press = (selector, label) => {
    const hits = [...graph.querySelectorAll(selector)].filter(b => b.textContent.startsWith(label));
    hits.forEach(b => b.dispatchEvent(new MouseEvent('click', {bubbles: true})));
    return hits.length;
  };
  const pressed = [press('.updatemenu-button', 'layer 2')];
  await pause();
  pressed.push(press('.updatemenu-header', 'head average'));
  await pause();
  pressed.push(press('.updatemenu-dropdown-button', 'head 3'));
  await pause();
  return {pressed, visible: graph.data.filter(t => t.visible === true).map(t => t.name),
          title: graph.layout.title.text};
})()"""


def write_pages(out):
    """The attention view, a circuitsvis page, an AnalysisResult page and a faulty control page, with the
    JavaScript condition that says each has rendered (and a script to run on it)."""
    torch.manual_seed(0)
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    view = attention_view(model, "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd", max_new_tokens=4)
    bars = go.Figure(go.Bar(x=["1.1", "2.7"], y=[0.2, 0.9]))
    result = AnalysisResult(
        "demo",
        "tiny",
        {"score": 0.5},
        figures={"scores": bars},
        findings=[Finding("matching head", "2.7", "2.7", True)],
    )
    control = out / "control.html"
    control.write_text(
        "<!DOCTYPE html><html><body><img src='http://localhost:9/x.png' style='display:none'>"
        "<script>throw new Error('control error')</script></body></html>"
    )
    return {
        "attention": (view.write(out / "attention.html"), PLOTLY_READY, CLICK_LAYER_2_HEAD_3),
        "circuitsvis": (view.write_circuitsvis(out / "circuitsvis.html", "encoder", 1), CIRCUITSVIS_READY, None),
        "analysis": (result.write(out)["html"], PLOTLY_READY, None),
        "control": (control, "document.readyState === 'complete'", None),
    }


def open_page(browser, path, ready: str, script: str | None):
    """Load ``path``, wait (up to 30 s) for ``ready``, run ``script``; return the log, screenshot, ready flag
    and the script's value."""
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    log = PageLog().watch(page)
    page.goto(path.resolve().as_uri())
    try:
        page.wait_for_function(ready, timeout=30_000)
        ready_now = True
    except sync_api.TimeoutError:
        ready_now = False
    value = page.evaluate(script) if script and ready_now else None
    shot = page.screenshot()
    page.close()
    return log, shot, ready_now, value


def test_pages_render_offline_in_chromium(tmp_path):
    """One test (so that pytest-xdist runs it on one worker, with one browser) over every generated page."""
    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            reports = {
                name: (path, open_page(browser, path, ready, script))
                for name, (path, ready, script) in write_pages(tmp_path).items()
            }
            _check_reports(browser, reports)
        finally:
            browser.close()


def _check_reports(browser, reports) -> None:
    for page in ("attention", "circuitsvis", "analysis"):
        path, (log, shot, ready, _) = reports[page]
        assert ready, f"{page}: the page did not render within the time limit"
        assert log.requests[0] == path.resolve().as_uri(), f"{page}: the page load was not seen"
        assert log.leaving(LOCAL_SCHEMES) == [], f"{page}: requests leave the file"
        assert log.errors == [], f"{page}: JavaScript errors"
        colours, inked = png_colours(browser, shot)
        assert colours >= 50 and inked >= 0.05, f"{page}: {colours} colours, {inked:.1%} of the pixels not white"

    log, shot, _, _ = reports["control"][1]  # the checks above can fail: they catch a faulty page
    assert "http://localhost:9/x.png" in log.requests
    assert any("control error" in error for error in log.errors)
    assert png_colours(browser, shot) == (1, 0.0)

    clicked = reports["attention"][1][3]
    assert clicked == {
        "pressed": [1, 1, 1],
        "visible": ["layer 2 head 3"],
        "title": "encoder self-attention: layer 2, head 3",
    }
