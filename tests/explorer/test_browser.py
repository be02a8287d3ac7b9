"""The explorer in a real headless Chromium (Playwright), one browser for the module, one page driven through
every scenario (loading the app once); after each, no JavaScript error was logged and no request left
127.0.0.1:

- pick a task, patch the matching heads from a succ task into a pred task and see the answer the patching
  API gives, follow the copied link, ablate a head, reset;
- drag a box on the hidden-state heatmap and see the answer `ablate_cells` gives for the cells in the URL;
- draw tasks filtered by transformation, alphabet and outcome, and open one;
- export the view: an offline page (plotly inlined, no script src) that renders from file:// on its own;
- the activation-patching tab: a heat map per site for the opening task and its succ twin;
- the training tab of a sweep's run: its validation curves and the sweep's run table;
- a link naming a model the explorer does not offer: the message on both tabs, the link kept.
"""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote_plus

import pytest
import torch
from werkzeug.serving import make_server

from lsa_interp.analysis.matching import matching_heads
from lsa_interp.analysis.patching import patch_pairs
from lsa_interp.analysis.planted import READOUT_HEAD, planted_model
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.data.task import Task
from lsa_interp.explorer import ModelCatalogue, ablate_cells, ablate_heads, create_app, discover_models
from lsa_interp.explorer.draw import filter_tasks, outcome_of
from lsa_interp.explorer.state import ViewState, parse_cells
from lsa_interp.explorer.training import RUNS_TABLE
from lsa_interp.model import save_model
from tests.viz.chromium import PageLog, launch

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.slow
torch.set_num_threads(1)
TIMEOUT_MS = 120_000
SWEEP_RUN = "sweep/stack-000/replicate-0"


def _sweep(root: Path, model) -> Path:
    """A sweep directory holding ``model`` as the first run of a stack with three recorded epochs."""
    stack = root / "sweep" / "stacks" / "stack-000"
    save_model(model, stack / "replicate-0" / "model")
    (stack / "train_config.json").write_text(json.dumps({"preset": "copy-20", "batching": "random"}))
    records = [
        {"type": "epoch", "replicate": 0, "epoch": e, "val_acc": 0.3 * e, "val_acc_copy": 0.3 * e,
         "val_acc_by_transformation": {"succ": 0.25 * e, "fix_pred_succ": 0.05 * e}}
        for e in (1, 2, 3)
    ]  # fmt: skip
    (stack / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    shutil.copy(RUNS_TABLE, root / "sweep" / "results.csv")
    return root / "sweep"


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny):
    model = planted_model()
    sweep = _sweep(tmp_path_factory.mktemp("explorer"), model)
    catalogue = ModelCatalogue(discover_models([sweep], shipped=False), {"planted": model})
    catalogue.memo("planted", "matching", lambda m: tuple(matching_heads(m)))  # detected once, before the clock
    catalogue.memo("planted", "dataset", lambda m: tiny)  # the test sets to draw from: a small dataset
    app = create_app(catalogue)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", model
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    """One Chromium and one context (pages share its HTTP cache: the app's scripts load once), every graph
    in view."""
    with sync_api.sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium.new_context(viewport={"width": 1400, "height": 3000})
        chromium.close()


def _enter(page, selector: str, text: str) -> None:
    page.fill(selector, text)
    page.press(selector, "Enter")


def _summary_has(page, text: str) -> None:
    page.wait_for_function(
        "text => (document.querySelector('#summary') || {innerText: ''}).innerText.includes(text)",
        arg=text,
        timeout=TIMEOUT_MS,
    )


def _choose(page, dropdown: str, value: str) -> None:
    page.click(f"#{dropdown}")
    page.click(f".dash-dropdown-option:has(input[value='{value}'])")


def _offline(log: PageLog, base: str, scenario: str) -> None:
    assert log.requests and log.leaving((base + "/",)) == [], f"{scenario}: requests left the machine"
    assert log.errors == [], f"{scenario}: JavaScript errors"


def _patch_ablate_reset(page, base: str, model) -> None:
    pair = minimal_pairs("succ", "pred", 1, lengths=(3,))[0]
    target, source = pair.target.with_answer(None), pair.source.with_answer(None)
    expected = patch_pairs(model, [pair], "auto")
    assert expected.clean[0] != expected.patched[0]  # the test can only pass if patching changes the answer
    ablated = ablate_heads(model, target, [READOUT_HEAD]).answer
    assert ablated != expected.clean[0]

    _enter(page, "#task", str(target))
    _summary_has(page, f"answer: {expected.clean[0]} (no intervention)")
    _enter(page, "#source", str(source))
    page.click("#matching")
    _summary_has(page, f"answer: {expected.clean[0]} -> {expected.patched[0]} (changed)")
    assert page.inner_text("#verdict") == "the answer changed"
    link = page.url
    assert "patch=auto" in link and str(target) in unquote_plus(link)

    again = page.context.new_page()  # a copied link reproduces the view
    log = PageLog().watch(again)
    again.goto(link, timeout=TIMEOUT_MS)
    _summary_has(again, f"answer: {expected.clean[0]} -> {expected.patched[0]} (changed)")
    again.close()
    _offline(log, base, "copied link")

    page.click("#reset")
    _summary_has(page, f"answer: {expected.clean[0]} (no intervention)")
    _enter(page, "#ablate", READOUT_HEAD.label)
    _summary_has(page, f"answer: {expected.clean[0]} -> {ablated or '(empty)'}")
    _enter(page, "#ablate", "9.9")  # a head outside the model: an inline message, the app keeps serving
    page.wait_for_function(
        "(document.querySelector('#error') || {innerText: ''}).innerText.includes('no head')",
        timeout=TIMEOUT_MS,
    )
    page.click("#reset")
    _summary_has(page, f"answer: {expected.clean[0]} (no intervention)")
    assert page.inner_text("#error") == ""
    assert page.input_value("#ablate") == ""


_BOX_DRAG = """([x0, y0, x1, y1]) => {
  const gd = document.querySelector('#graph-hidden .js-plotly-plot');
  const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const px = (axis, v, from) => from + axis.l2p(v);
  return [px(xa, x0, box.left), px(ya, y0, box.top), px(xa, x1, box.left), px(ya, y1, box.top)];
}"""
_HIDDEN_LAYER_3 = (
    "(() => { const gd = document.querySelector('#graph-hidden .js-plotly-plot');"
    " return !!gd && gd.layout.title.text.startsWith('encoder layer 3 hidden'); })()"
)


def _drag_box(page, model) -> None:
    """Zero the cells of rows 30-31 (the arrow after the example output and the next token), every dimension,
    in encoder layer 3, by dragging a box over them on the hidden-state heatmap."""
    task = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"
    _enter(page, "#task", task)
    page.click("#graph input[value='3']")
    _summary_has(page, "answer: f (no intervention)")
    page.wait_for_function(_HIDDEN_LAYER_3, timeout=TIMEOUT_MS)
    x0, y0, x1, y1 = page.evaluate(_BOX_DRAG, [0.2, 29.7, 126.8, 31.3])
    page.mouse.move(x0, y0)
    page.mouse.down()
    page.mouse.move((x0 + x1) / 2, (y0 + y1) / 2, steps=5)
    page.mouse.move(x1, y1, steps=5)
    page.mouse.up()
    _summary_has(page, "1 cell box(es) ablated")
    cells = ViewState.from_query(page.url.split("?", 1)[1]).cells
    assert cells == "3:30-31:0-127:zero"
    expected = ablate_cells(model, Task.parse(task), parse_cells(cells)).answer
    assert expected != "f"  # the box covers what the readout head reads: the test can only pass if it is applied
    _summary_has(page, f"answer: f -> {expected or '(empty)'} (changed)")


_PLOTLY_READY = (
    "(() => { const graphs = [...document.querySelectorAll('.plotly-graph-div')];"
    " return graphs.length > 0 && graphs.every(g => g.querySelector('.main-svg') !== null); })()"
)


def _export(page, tmp_path: Path) -> None:
    """Export the view (cells ablated): one offline page that renders from file:// with nothing fetched."""
    with page.expect_download(timeout=TIMEOUT_MS) as download:
        page.click("#export")
    path = tmp_path / "view.html"
    download.value.save_as(path)
    text = path.read_text()
    assert "<script src" not in text and "plotly.js v" in text and "cells=3%3A30-31%3A0-127%3Azero" in text
    offline = page.context.new_page()
    log = PageLog().watch(offline)
    offline.goto(path.resolve().as_uri())
    offline.wait_for_function(_PLOTLY_READY, timeout=TIMEOUT_MS)
    offline.close()
    assert log.leaving((path.resolve().as_uri(), "data:", "blob:")) == [], "the exported page fetches"
    assert log.errors == [], "the exported page logs JavaScript errors"


def _draw(page, model, tiny) -> None:
    """Draw succ tasks on permuted alphabets that the model gets wrong, from the seen-alphabet test split."""
    page.click("#reset")
    page.click("text=draw a task from the model's test sets")
    _choose(page, "draw-transformation", "succ")
    _choose(page, "draw-alphabet", "permuted")
    _choose(page, "draw-outcome", "wrong")
    page.click("#draw")
    page.wait_for_function(
        "(document.querySelector('#draw-message') || {innerText: ''}).innerText.includes('matching tasks drawn')",
        timeout=TIMEOUT_MS,
    )
    pool = filter_tasks(tiny.splits["test"], "succ", "permuted")
    allowed = {str(t.with_answer(None)) for t in pool if outcome_of(t, model.solve(t)) == "wrong"}
    assert page.inner_text("#draw-message").startswith(f"{min(20, len(allowed))} of {len(pool)} matching")
    page.click("#drawn")
    page.wait_for_selector(".dash-dropdown-option input", timeout=TIMEOUT_MS)  # the options render after the click
    values = page.eval_on_selector_all(".dash-dropdown-option input", "inputs => inputs.map(i => i.value)")
    assert values and set(values) <= allowed
    page.click(f".dash-dropdown-option:has(input[value='{values[0]}'])")
    _summary_has(page, f"task: {Task.parse(values[0]).spaced()}")


def _training(page) -> None:
    """The training tab: none for a model without its run; a sweep's run shows its curves (three panels) and
    the sweep's run table with Table 1."""
    page.click("#tab >> text=training")
    page.wait_for_selector("#no-history", timeout=TIMEOUT_MS)
    assert "without its training run" in page.inner_text("#no-history")
    _choose(page, "model", SWEEP_RUN)
    page.wait_for_selector("#history .main-svg", timeout=TIMEOUT_MS)
    curves = page.evaluate("document.querySelector('#history .js-plotly-plot').data.map(t => t.name)")
    assert curves == ["overall", "copy", "succ", "fix_pred_succ"]
    assert "copy-200/alphabet" in page.inner_text("#runs-table") and "96.7" in page.inner_text("#table-1-table")
    assert "tab=training" in page.url


def _patching(page) -> None:
    """The activation-patching tab on the opening task and its succ twin: a heat map per site, the planted head at
    the first example-output letter, the paths from it, then from a head typed in, the patched answers counted; back to
    the graph tab."""
    page.click("#tab >> text=activation patching")
    page.wait_for_selector("#patching-0 .main-svg", timeout=TIMEOUT_MS)
    rows = page.evaluate("document.querySelector('#patching-0 .js-plotly-plot').data[0].y")
    assert "head 2.3" in rows and "tab=patching" in page.url
    assert page.locator("#patching .js-plotly-plot").count() == 4
    paths = page.evaluate("document.querySelector('#patching-3 .js-plotly-plot').data[0].y")
    assert "encoder 3 self-attention: v" in paths, "the last map follows the planted head into later heads' inputs"
    page.fill("#sender", "1.1")
    page.press("#sender", "Enter")
    title = "(document.querySelector('#patching-3 .js-plotly-plot') || {}).layout?.title?.text"
    page.wait_for_function(f"() => {title}?.startsWith('paths from 1.1')", timeout=TIMEOUT_MS)
    assert "sender=1.1" in page.url
    page.click("#answers >> text=count")
    page.wait_for_function(
        "() => document.querySelector('#patching-intro')?.innerText.includes('Hovering')", timeout=TIMEOUT_MS
    )
    template = "document.querySelector('#patching-0 .js-plotly-plot').data[0].hovertemplate"
    assert "answers: source's" in page.evaluate(template) and "answers=count" in page.url
    page.click("#tab >> text=computational graph and interventions")
    _summary_has(page, "model's answer")


def _unknown_model(page, base: str) -> None:
    """A link naming a model the explorer does not offer (here a path) says so, on either tab. Dash's dropdown drops
    the value it does not offer; the link used to follow (``?model=``) and show the first model's view without a
    word."""
    for tab, selector in (("training", "#training"), ("graph", "#error")):
        page.goto(f"{base}/?model=%2Fetc%2Fpasswd&tab={tab}", timeout=TIMEOUT_MS)
        page.wait_for_selector(selector, timeout=TIMEOUT_MS)
        page.wait_for_load_state("networkidle", timeout=TIMEOUT_MS)  # the dropdown empties itself after a render
        assert page.inner_text(selector).startswith("unknown model '/etc/passwd'; this explorer offers: planted")
        assert ViewState.from_query(page.url.split("?", 1)[1]).model == "/etc/passwd"


_TITLE_OVERFLOW = """() => [...document.querySelectorAll('.js-plotly-plot')].flatMap(plot => {
  const box = plot.getBoundingClientRect();
  return [...plot.querySelectorAll('.gtitle')].map(title => [title.textContent, title.getBoundingClientRect()])
    .filter(([, t]) => t.left < box.left - 1 || t.right > box.right + 1).map(([text]) => text);
})"""


def _titles_fit(page) -> None:
    """Every figure's title lies within its figure (plotly clips a longer title at both ends)."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('.gtitle')].some(t => t.textContent.includes('(causal), head average'))",
        timeout=TIMEOUT_MS,
    )
    assert page.evaluate(_TITLE_OVERFLOW) == []


def test_explorer_in_chromium(served, browser, tiny, tmp_path):
    """Every scenario in one test, so that pytest-xdist runs them on one worker with one browser."""
    base, model = served
    page = browser.new_page()
    log = PageLog().watch(page)
    page.goto(base + "/", timeout=TIMEOUT_MS)
    _summary_has(page, "model's answer")
    _titles_fit(page)
    for name, scenario in (
        ("patching tab", lambda: _patching(page)),
        ("patch, ablate, reset", lambda: _patch_ablate_reset(page, base, model)),
        ("box drag", lambda: _drag_box(page, model)),
        ("export", lambda: _export(page, tmp_path)),
        ("draw tasks", lambda: _draw(page, model, tiny)),
        ("training tab", lambda: _training(page)),
        ("unknown model", lambda: _unknown_model(page, base)),
    ):
        scenario()
        _offline(log, base, name)
