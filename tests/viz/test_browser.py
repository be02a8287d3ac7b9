"""The generated HTML in a real browser (headless Chromium, file:// URLs): no request leaves the file, no
JavaScript error, something is drawn, and the attention view's selectors work when clicked.

Chromium is required, not optional: CI (``.ci/run``) installs the Debian package ``chromium`` when missing.
"""

from __future__ import annotations

import plotly.graph_objects as go
import pytest
import torch

from lsa_interp.analysis.types import AnalysisResult, Finding
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.viz.attention import attention_view
from tests.viz.devtools import LOCAL_SCHEMES, Browser, find_chromium, open_page, png_colours

torch.set_num_threads(1)

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


@pytest.fixture
def browser(tmp_path):
    binary = find_chromium()
    if binary is None:
        pytest.fail(
            "Chromium is not installed, and the browser tests need it: apt-get install chromium "
            "(.ci/run installs it), or set CHROMIUM to a Chromium/Chrome binary"
        )
    chromium = Browser(binary, tmp_path / "chromium-profile")
    yield chromium
    chromium.close()


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


def test_pages_render_offline_in_chromium(browser, tmp_path):
    """One test (so that pytest-xdist runs it on one worker, with one browser) over every generated page."""
    reports = {
        name: (path, open_page(browser, path, ready, script))
        for name, (path, ready, script) in write_pages(tmp_path).items()
    }
    for page in ("attention", "circuitsvis", "analysis"):
        path, report = reports[page]
        assert report.ready, f"{page}: the page did not render within the time limit"
        assert report.requests[0] == path.resolve().as_uri(), f"{page}: the page load was not seen"
        leaving = [url[:120] for url in report.requests if not url.startswith(LOCAL_SCHEMES)]
        assert leaving == [], f"{page}: requests leave the file"
        assert report.errors == [], f"{page}: JavaScript errors"
        colours, inked = png_colours(report.screenshot)
        assert colours >= 50 and inked >= 0.05, f"{page}: {colours} colours, {inked:.1%} of the pixels not white"

    control = reports["control"][1]  # the checks above can fail: they catch a faulty page
    assert "http://localhost:9/x.png" in control.requests
    assert any("control error" in error for error in control.errors)
    assert png_colours(control.screenshot) == (1, 0.0)

    clicked = reports["attention"][1].script_value
    assert clicked == {
        "pressed": [1, 1, 1],
        "visible": ["layer 2 head 3"],
        "title": "encoder self-attention: layer 2, head 3",
    }
