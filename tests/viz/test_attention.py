"""The attention viewer: its figures hold the model's own cache, labels, selectors, top-k and offline HTML."""

from __future__ import annotations

import dataclasses
import inspect
import re

import numpy as np
import pytest
import torch

from lsa_interp.analysis.rasp import rasp_comparison
from lsa_interp.data.task import Task
from lsa_interp.data.vocab import display_token
from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.inputs import decoder_input_from_generated
from lsa_interp.viz import attention as viewer
from lsa_interp.viz.attention import BLOCK_TITLES, AttentionView, attention_view
from lsa_interp.viz.attention_figures import ROLE_COLOURS, role_legend_html

torch.set_num_threads(1)

TASK = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd")
STEPS = 5
ENC, DEC, CROSS = (BLOCK_TITLES[block] for block in ("encoder", "decoder", "cross"))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))


# Built anew for each test (a fraction of a second): mutmut's test statistics credit what a fixture calls to the
# first test that set it up, so a module-scoped view would leave every other test out of the mutation runs of
# the viewer's functions (docs/testing.md).
@pytest.fixture
def view(model) -> AttentionView:
    model.train()  # the viewer must decode and cache in eval mode, then restore the mode
    built = attention_view(model, TASK, top_k=4, max_new_tokens=STEPS)
    assert model.training
    return built


@pytest.fixture(scope="module")
def reference(model):
    """The model's own greedy decoding and the cache of its decoder inputs (a PAD it emitted read as a token, as
    in decoding), computed here independently."""
    model.eval()
    generated = model.generate(TASK, max_new_tokens=STEPS)
    tgt = decoder_input_from_generated(generated)
    with torch.no_grad():
        logits, cache = model.run_with_cache(TASK, tgt, mask_tgt_pad=False)
    model.train()
    return generated, tgt, logits, cache


def trace(fig, name):
    matches = [t for t in fig.data if t.name == name]
    assert len(matches) == 1, f"{name!r} among {[t.name for t in fig.data]}"
    return matches[0]


@pytest.mark.parametrize(
    ("title", "stack", "kind"), [(ENC, "encoder", "attn"), (DEC, "decoder", "attn"), (CROSS, "decoder", "cross_attn")]
)
def test_every_head_heatmap_is_the_cached_pattern(view, reference, title, stack, kind):
    cache = reference[3]
    fig = view.figures[title]
    assert len(fig.data) == 2 * (4 + 1)
    future = np.triu(np.ones((reference[1].shape[1],) * 2, dtype=bool), 1) if title == DEC else False
    for layer in range(2):
        pattern = cache.pattern(stack, layer, kind)[0]
        for head in range(4):
            z = trace(fig, f"layer {layer + 1} head {head + 1}").z
            np.testing.assert_allclose(z, np.where(future, np.nan, pattern[head].numpy()), atol=1e-6, rtol=0)
        average = trace(fig, f"layer {layer + 1} head average").z
        np.testing.assert_allclose(average, np.where(future, np.nan, pattern.mean(0).numpy()), atol=1e-6, rtol=0)
    assert {(heatmap.zmin, heatmap.zmax) for heatmap in fig.data} == {(0.0, 1.0)}  # heads compared on one scale


def test_paper_head_2_3_is_layer_index_1_head_index_2(view, reference):
    z = trace(view.figures[ENC], "layer 2 head 3").z
    np.testing.assert_allclose(z, reference[3].pattern("encoder", 1)[0, 2].numpy(), atol=1e-6, rtol=0)
    assert not np.allclose(z, reference[3].pattern("encoder", 1)[0, 1].numpy(), atol=1e-3)


def test_labels_are_the_tokens_with_their_positions(view, reference):
    generated, tgt = reference[0], reference[1]
    src = view.data.src_labels
    assert len(src) == 39 and len(set(src)) == 39
    assert src[:3] == ("a·0", "b·1", "c·2") and src[26] == "|·26" and src[27] == "g·27"
    assert src[30] == ">·30" and src[35:] == ("b·35", "c·36", "d·37", "EOS·38")
    assert view.data.tgt_tokens == tuple(display_token(t) for t in tgt[0].tolist())
    assert view.data.tgt_tokens[0] == ">" and view.data.tgt_labels[0] == ">·0"
    assert view.data.predicted == tuple(display_token(t) for t in generated[0, : tgt.shape[1]].tolist())
    heatmap = view.figures[ENC].data[0]
    assert list(heatmap.x) == list(src) and list(heatmap.y) == list(src)
    assert list(view.figures[ENC].layout.xaxis.tickvals) == list(src)
    query_tick = view.figures[ENC].layout.xaxis.ticktext[35]
    assert ROLE_COLOURS["query"] in query_tick and "b·35" in query_tick


def test_cross_attention_is_decoder_steps_by_encoder_tokens(view, reference):
    n_steps = reference[1].shape[1]
    cross = view.figures[CROSS].data[0]
    assert np.asarray(cross.z).shape == (n_steps, 39)
    assert list(cross.y) == list(view.data.tgt_labels) and list(cross.x) == list(view.data.src_labels)
    decoder = view.figures[DEC].data[0]
    assert np.asarray(decoder.z).shape == (n_steps, n_steps)
    assert view.data.cross_attn.shape == (2, 4, n_steps, 39)


def test_the_decoder_s_masked_future_is_blank_not_zero(view, reference):
    """Cells above the decoder's diagonal (later steps, which a step cannot attend) are NaN in every drawn trace,
    without hover; the data keep the model's numbers (0 there), and no encoder or cross cell is masked."""
    n_steps = reference[1].shape[1]
    assert n_steps > 1, "the test needs at least two decoder steps"
    future = np.triu(np.ones((n_steps, n_steps), dtype=bool), 1)
    assert torch.equal(view.data.masked("decoder"), torch.from_numpy(future))
    for heatmap in view.figures[DEC].data:
        z = np.asarray(heatmap.z, dtype=float)
        assert np.isnan(z[future]).all() and not np.isnan(z[~future]).any(), heatmap.name
        assert heatmap.hoverongaps is False
    assert (view.data.decoder_attn[:, :, torch.from_numpy(future)] == 0).all()
    assert not view.data.decoder_attn.isnan().any()
    for title, block in ((ENC, "encoder"), (CROSS, "cross")):
        assert not view.data.masked(block).any()
        assert not any(np.isnan(np.asarray(t.z, dtype=float)).any() for t in view.figures[title].data)


def test_an_encoder_pad_key_is_masked_in_self_and_cross_attention(view):
    padded = dataclasses.replace(view.data, src_tokens=(*view.data.src_tokens[:-1], display_token(28)))
    for block in ("encoder", "cross"):
        masked = padded.masked(block)
        assert masked[:, -1].all() and not masked[:, :-1].any()
    with pytest.raises(ValueError, match="unknown attention block"):
        padded.masked("memory")


def test_a_pad_the_model_emitted_is_read_as_decoding_read_it(model, monkeypatch):
    """Greedy decoding feeds an emitted PAD back unmasked; so does the viewer's pass (its column is not blank)."""
    generated = torch.tensor([[0, 28, 1, 27]])  # a, PAD, b, EOS
    monkeypatch.setattr(HookedEncoderDecoder, "generate", lambda self, *args, **kwargs: generated)
    data = attention_view(model, TASK).data
    assert data.tgt_tokens == (">", "a", "PAD", "b")
    assert (data.decoder_attn[:, :, 2:, 2] > 0).all() and not data.masked("decoder")[2:, 2].any()


def test_the_viewer_and_an_analysis_figure_label_a_position_alike(model, view):
    """The RASP analysis' example figure names the encoder positions as the viewer's axes do (``>·30``)."""
    figure = rasp_comparison(model, [TASK], example=TASK).figures["selectors and their best heads"]
    assert tuple(figure.layout.xaxis.ticktext) == view.data.src_labels == tuple(view.figures[ENC].data[0].x)
    assert view.data.src_labels[30] == ">·30" and view.data.src_labels[38] == "EOS·38"


def test_hover_reads_source_to_destination_weight(view):
    for title in (ENC, DEC, CROSS):
        assert all(t.hovertemplate.startswith("%{x} -> %{y}: %{z") for t in view.figures[title].data)


def test_role_bands_and_separator_lines(view):
    shapes = view.figures[ENC].layout.shapes
    bands = {(s.xref, s.yref, s.x0, s.x1, s.y0, s.y1): s.fillcolor for s in shapes if s.type == "rect"}
    assert bands[("x", "paper", 34.5, 37.5, 1.005, 1.03)] == ROLE_COLOURS["query"]
    assert bands[("paper", "y", 1.005, 1.03, 25.5, 26.5)] == ROLE_COLOURS["separator"]
    assert bands[("x", "paper", -0.5, 25.5, 1.005, 1.03)] == ROLE_COLOURS["alphabet"]
    lines = {s.x0 for s in shapes if s.type == "line" and s.xref == "x"}
    assert lines == {25.5, 26.5, 29.5, 30.5, 33.5, 34.5, 37.5}
    cross_shapes = view.figures[CROSS].layout.shapes
    assert cross_shapes and all(s.xref == "x" for s in cross_shapes if s.type == "rect")


def click(fig, label):
    """Apply the button ``label`` of the visible menus, as plotly.js does: restyle ``visible``, then relayout."""
    menus = fig.layout.updatemenus
    hits = [(i, b) for i, m in enumerate(menus) if m.visible is not False for b in m.buttons if b.label == label]
    assert len(hits) == 1, f"{label!r}: {len(hits)} visible buttons"
    index, button = hits[0]
    menus[index].active = [b.label for b in menus[index].buttons].index(label)
    restyle, relayout = button.args
    for t, visible in zip(fig.data, restyle["visible"]):
        t.visible = visible
    for key, value in relayout.items():
        found = re.fullmatch(r"updatemenus\[(\d+)\]\.(visible|active)", key)
        if found:
            setattr(menus[int(found[1])], found[2], value)
        else:
            assert key == "title.text", f"plotly.js would not apply {key!r}"
            fig.layout.title.text = value


def shown(fig):
    visible = [t.name for t in fig.data if t.visible]
    menus = [m for m in fig.layout.updatemenus if m.visible is not False]
    active = sorted((m.type, m.buttons[m.active].label) for m in menus)
    return visible, fig.layout.title.text, active


def test_layer_and_head_selectors_combine(view):
    fig = view.figures[ENC]
    fig = type(fig)(fig)
    assert shown(fig) == (
        ["layer 1 head average"],
        f"{ENC}: layer 1, head average",
        [("buttons", "layer 1"), ("dropdown", "head average")],
    )
    click(fig, "layer 2")
    assert shown(fig)[0] == ["layer 2 head average"]
    click(fig, "head 3")
    assert shown(fig) == (
        ["layer 2 head 3"],
        f"{ENC}: layer 2, head 3",
        [("buttons", "layer 2"), ("dropdown", "head 3")],
    )
    click(fig, "layer 1")
    assert shown(fig) == (
        ["layer 1 head 3"],
        f"{ENC}: layer 1, head 3",
        [("buttons", "layer 1"), ("dropdown", "head 3")],
    )
    click(fig, "head average")
    assert shown(fig)[0] == ["layer 1 head average"]


def test_hidden_states_are_each_encoder_layers_output(view, reference):
    fig = view.figures["encoder hidden states"]
    assert [t.name for t in fig.data] == ["layer 1", "layer 2"] and [t.visible for t in fig.data] == [True, False]
    for layer, t in enumerate(fig.data):
        np.testing.assert_allclose(t.z, reference[3].resid("encoder", layer, "post")[0].numpy(), atol=1e-6, rtol=0)
        assert list(t.y) == list(view.data.src_labels) and len(t.x) == 32
    assert [b.label for b in fig.layout.updatemenus[0].buttons] == ["layer 1", "layer 2"]


def test_top_k_probabilities_are_the_softmax_of_the_logits(view, reference):
    generated, logits = reference[0], reference[2]
    torch.testing.assert_close(view.data.probs, torch.softmax(logits[0], dim=-1), atol=1e-6, rtol=0)
    probs, ids = torch.softmax(logits[0], dim=-1).topk(4, dim=-1)
    torch.testing.assert_close(view.data.top_probs, probs, atol=1e-6, rtol=0)
    assert torch.equal(view.data.top_ids, ids)
    assert view.data.top_ids[:, 0].tolist() == generated[0, : ids.shape[0]].tolist()  # greedy = most probable
    table = view.figures["next-token probabilities"].data[0]
    assert list(table.header.values) == ["step", "input", "output", "#1", "#2", "#3", "#4"]
    first = table.cells.values[3][0]
    assert first == f"{display_token(int(ids[0, 0]))} {float(probs[0, 0]):.3f}"


def test_html_is_offline_and_complete(view, tmp_path):
    page = view.html()
    assert not re.search(r"<script[^>]*\bsrc=", page, re.IGNORECASE)
    assert not re.search(r"<link[^>]*\bhref=", page, re.IGNORECASE)
    assert "Plotly" in page and len(page) > 3_000_000  # plotly.js inlined
    for heading in (ENC, DEC, CROSS, "encoder hidden states", "next-token probabilities"):
        assert f"<h2>{heading}</h2>" in page
    assert "a b c d e f g h i j k l m n o p q r s t u v w x y z | g h i &gt; f h i | b c d" in page
    path = view.write(tmp_path / "sub" / "view.html")
    assert path.read_text(encoding="utf-8").count("<h2>") == 5
    assert view._repr_html_().count("<h2>") == 5


def test_circuitsvis_pages_use_the_offline_source(view, tmp_path):
    path = view.write_circuitsvis(tmp_path / "enc.html", "encoder", 1)
    page = path.read_text(encoding="utf-8")
    assert "CircuitsVis.render" in page and "CircuitsVis.AttentionHeads" in page
    assert "unpkg.com" not in page and not re.search(r"<script[^>]*\bsrc=", page)
    assert '"2.3"' in page and '"EOS"' in page  # paper head labels and the tokens
    paths = view.write_all_circuitsvis(tmp_path / "all")
    assert sorted(p.name for p in paths) == [
        "decoder_layer_1.html",
        "decoder_layer_2.html",
        "encoder_layer_1.html",
        "encoder_layer_2.html",
    ]
    assert '"dec:2.1"' in (tmp_path / "all" / "decoder_layer_2.html").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="square"):
        view.circuitsvis("cross", 0)
    with pytest.raises(ValueError, match="out of range"):
        view.circuitsvis("encoder", 2)


def test_attention_view_of_a_task_string_and_bad_input(model):
    shown_view = attention_view(model, "abc defghijklmnopqrstuvwxyz | ghi > fhi | bcd", max_new_tokens=3)
    assert isinstance(shown_view, AttentionView)
    model.eval()
    assert shown_view.data.answer == model.solve(TASK, max_new_tokens=3)
    with pytest.raises(ValueError, match="top_k"):
        attention_view(model, TASK, top_k=0)
    with pytest.raises(ValueError):
        attention_view(model, "abc | d")
    unchecked = inspect.unwrap(attention_view)  # the test run's type checker would refuse the list first
    with pytest.raises(TypeError, match=r"^attention_view shows one task \(a Task or its text\), got list$"):
        unchecked(model, [TASK, TASK])


def test_each_click_names_the_layer_and_head_in_the_title(view):
    fig = view.figures[ENC]
    fig = type(fig)(fig)
    click(fig, "head 2")
    assert shown(fig) == (
        ["layer 1 head 2"],
        f"{ENC}: layer 1, head 2",
        [("buttons", "layer 1"), ("dropdown", "head 2")],
    ), "the first layer's head menu is the one shown at first"
    click(fig, "layer 2")
    assert shown(fig) == (
        ["layer 2 head 2"],
        f"{ENC}: layer 2, head 2",
        [("buttons", "layer 2"), ("dropdown", "head 2")],
    ), "the second layer's head menu shows the head chosen"
    click(fig, "head average")
    click(fig, "layer 1")
    assert shown(fig)[1] == f"{ENC}: layer 1, head average"


def test_circuitsvis_gets_each_square_block_s_tokens_heads_and_mask(view, monkeypatch):
    calls = []
    monkeypatch.setattr("circuitsvis.attention.attention_heads", lambda **kwargs: calls.append(kwargs) or kwargs)
    view.circuitsvis("encoder", 1)
    view.circuitsvis("decoder", 1)
    encoder, decoder = calls
    assert encoder["tokens"] == list(view.data.src_tokens) and decoder["tokens"] == list(view.data.tgt_tokens)
    assert encoder["attention_head_names"] == ["2.1", "2.2", "2.3", "2.4"]
    assert decoder["attention_head_names"] == ["dec:2.1", "dec:2.2", "dec:2.3", "dec:2.4"]
    assert encoder["mask_upper_tri"] is False and decoder["mask_upper_tri"] is True
    np.testing.assert_array_equal(encoder["attention"], view.data.encoder_attn[1].numpy())
    np.testing.assert_array_equal(decoder["attention"], view.data.decoder_attn[1].numpy())


def test_pages_go_into_new_folders_as_utf_8_documents(model, tmp_path, ascii_locale):
    """UTF-8 whatever the locale's encoding (here ASCII, which cannot hold the title's dash and umlaut)."""
    view = AttentionView(attention_view(model, TASK, max_new_tokens=STEPS).data, title="attention — ü")
    page = view.write(tmp_path / "new" / "nested" / "view.html").read_bytes().decode("utf-8")
    assert "<title>attention — ü</title>" in page and "<br>model's greedy answer: <code>" in page
    written = view.write_circuitsvis(tmp_path / "other" / "deep" / "dec.html", "decoder", 1)
    text = written.read_bytes().decode("utf-8")
    title = f"decoder layer 2 (1-based): {TASK.spaced()}"
    assert text.startswith(f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title.replace('>', '&gt;')}")


def test_attention_view_passes_on_its_options(model, monkeypatch):
    calls = []
    collect = viewer.collect_attention
    monkeypatch.setattr(viewer, "collect_attention", lambda *args: calls.append(args[2:]) or collect(*args))
    view = attention_view(model, TASK, title="mine")
    assert calls == [(5, viewer.DEFAULT_MAX_NEW_TOKENS)] and view.title == "mine"
    assert attention_view(model, TASK, top_k=3, max_new_tokens=2).data.top_probs.shape == (2, 3)


def _intro_lines(view: AttentionView) -> list[str]:
    """The lines of the page's introduction, before the role legend."""
    intro = view._intro()
    assert intro.startswith("<p>") and intro.endswith(role_legend_html(view.data.src_roles))
    paragraph = intro.removesuffix(role_legend_html(view.data.src_roles))
    assert paragraph.endswith("</p>") and paragraph.count("<p>") == 1
    return paragraph.removeprefix("<p>").removesuffix("</p>").split("<br>")


def test_the_introduction_names_the_task_the_answer_and_its_verdict(view):
    numbering = (
        "Layers and heads are numbered from 1, as in the paper (head 2.7 = encoder layer 2, head 7). "
        "Hover a cell for source -> destination: weight. Blank cells are masked: "
        "a decoder step cannot attend to the steps after it."
    )
    task = "a b c d e f g h i j k l m n o p q r s t u v w x y z | g h i &gt; f h i | b c d"
    right = AttentionView(dataclasses.replace(view.data, task=TASK.with_answer("acd"), answer="acd"))
    assert _intro_lines(right) == [
        f"task: <code>{task} &gt; a c d</code>",
        "model's greedy answer: <code>acd</code>",
        "expected answer: <code>acd</code> (correct)",
        numbering,
    ]
    wrong = AttentionView(dataclasses.replace(view.data, task=TASK.with_answer("acd"), answer=""))
    assert _intro_lines(wrong)[1:3] == [
        "model's greedy answer: <code>(empty)</code>",
        "expected answer: <code>acd</code> (wrong)",
    ]
    unknown = AttentionView(dataclasses.replace(view.data, task=TASK, answer="a<d"))
    assert _intro_lines(unknown) == [
        f"task: <code>{task}</code>",
        "model's greedy answer: <code>a&lt;d</code>",
        numbering,
    ]


def test_circuitsvis_shows_the_first_encoder_layer_by_default(view, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr("circuitsvis.attention.attention_heads", lambda **kwargs: calls.append(kwargs) or kwargs)
    view.circuitsvis()
    assert calls[0]["attention_head_names"] == ["1.1", "1.2", "1.3", "1.4"]
    np.testing.assert_array_equal(calls[0]["attention"], view.data.encoder_attn[0].numpy())
    monkeypatch.undo()
    page = view.write_circuitsvis(tmp_path / "default.html").read_text(encoding="utf-8")
    assert f"<title>encoder layer 1 (1-based): {TASK.spaced().replace('>', '&gt;')}</title>" in page
