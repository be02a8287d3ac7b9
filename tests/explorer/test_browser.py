"""The explorer in a real headless Chromium (Playwright): pick a task, patch the matching heads from a succ task
into a pred task and see the answer the patching API gives, ablate a head, reset; no request leaves the
machine and no JavaScript error is logged.
"""

from __future__ import annotations

import threading
from urllib.parse import unquote_plus

import pytest
import torch
from werkzeug.serving import make_server

from lsa_interp.analysis.matching import matching_heads
from lsa_interp.analysis.patching import patch_pairs
from lsa_interp.analysis.planted import READOUT_HEAD, planted_model
from lsa_interp.analysis.prompts import minimal_pairs
from lsa_interp.explorer import ModelCatalogue, ablate_heads, create_app
from tests.viz.chromium import PageLog, launch

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.slow
torch.set_num_threads(1)
TIMEOUT_MS = 120_000


@pytest.fixture(scope="module")
def served():
    model = planted_model()
    catalogue = ModelCatalogue(models={"planted": model})
    catalogue.memo("planted", "matching", lambda m: tuple(matching_heads(m)))  # detected once, before the clock
    app = create_app(catalogue)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", model
    server.shutdown()
    thread.join(timeout=10)


def _enter(page, selector: str, text: str) -> None:
    page.fill(selector, text)
    page.press(selector, "Enter")


def _summary_has(page, text: str) -> None:
    page.wait_for_function(
        "text => (document.querySelector('#summary') || {innerText: ''}).innerText.includes(text)",
        arg=text,
        timeout=TIMEOUT_MS,
    )


def test_patch_ablate_reset_offline(served):
    base, model = served
    pair = minimal_pairs("succ", "pred", 1, lengths=(3,))[0]
    target, source = pair.target.with_answer(None), pair.source.with_answer(None)
    expected = patch_pairs(model, [pair], "auto")
    assert expected.clean[0] != expected.patched[0]  # the test can only pass if patching changes the answer
    ablated = ablate_heads(model, target, [READOUT_HEAD]).answer
    assert ablated != expected.clean[0]

    with sync_api.sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page()
            log = PageLog().watch(page)
            page.goto(base + "/", timeout=TIMEOUT_MS)
            _summary_has(page, "model's answer")
            _enter(page, "#task", str(target))
            _summary_has(page, f"answer: {expected.clean[0]} (no intervention)")
            _enter(page, "#source", str(source))
            page.click("#matching")
            _summary_has(page, f"answer: {expected.clean[0]} -> {expected.patched[0]} (changed)")
            assert page.inner_text("#verdict") == "the answer changed"
            link = page.url
            assert "patch=auto" in link and str(target) in unquote_plus(link)

            again = browser.new_page()  # a copied link reproduces the view
            PageLog.watch(log, again)
            again.goto(link, timeout=TIMEOUT_MS)
            _summary_has(again, f"answer: {expected.clean[0]} -> {expected.patched[0]} (changed)")
            again.close()

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
        finally:
            browser.close()
    assert log.requests and log.leaving((base + "/",)) == []
    assert log.errors == []
