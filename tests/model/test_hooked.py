"""HookedEncoderDecoder: equivalence with torch.nn.Transformer, causality, hooks, inputs, caching."""

from __future__ import annotations

import jaxtyping
import pytest
import torch

from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.data.vocab import PAD, VOCAB_SIZE
from lsa_interp.model import ActivationCache, HookedEncoderDecoder, ModelConfig
from lsa_interp.model.inputs import to_token_batch


def _noop(tensor, hook):
    return None


ALL_HOOKS = [(lambda name: True, _noop)]
"""A no-op hook on every hook point: forces the explicit (hooked) attention path."""


def _batch_with_decoder_len(make_tasks, length: int, seed: int):
    """A padded batch of 6 tasks whose longest decoder input has ``length`` positions (``>`` + answer)."""
    if length == 1:
        return to_token_batch(make_tasks(6, seed=seed, answer_len=None))
    tasks = make_tasks(6, seed=seed, answer_len=(max(1, length // 2), length - 1))
    longest = make_tasks(1, seed=seed + 100, answer_len=(length - 1, length - 1))
    return encode_tasks(tasks[:5] + longest)


@pytest.mark.parametrize("length", [1, 2, 5, 20])
@pytest.mark.parametrize("hooked", [False, True], ids=["fused", "hooked"])
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_matches_nn_transformer(paper_pair, make_tasks, length, hooked, mode):
    reference, model = paper_pair
    batch = _batch_with_decoder_len(make_tasks, length, seed=length)
    assert batch.tgt_in.shape[1] == length and (batch.src == PAD).any()
    reference.train(mode == "train")
    model.train(mode == "train")
    try:
        with torch.set_grad_enabled(mode == "train"):
            expected = reference(batch.src, batch.tgt_in)
            actual = model.run_with_hooks(batch, fwd_hooks=ALL_HOOKS if hooked else [])
    finally:
        reference.eval()
        model.eval()
    assert actual.shape == (6, length, VOCAB_SIZE)
    keep = batch.tgt_in != PAD
    torch.testing.assert_close(actual[keep], expected[keep], atol=1e-5, rtol=0)


def test_causal_later_tokens_do_not_change_earlier_logits(paper_pair, make_tasks):
    _, model = paper_pair
    batch = encode_tasks(make_tasks(4, seed=3, answer_len=(6, 6)))
    changed = batch.tgt_in.clone()
    changed[:, 4:] = torch.randint(0, 26, changed[:, 4:].shape)
    with torch.no_grad():
        before, after = model(batch), model(batch, tgt=changed)
    torch.testing.assert_close(after[:, :4], before[:, :4], atol=1e-6, rtol=0)
    assert not torch.allclose(after[:, 4:], before[:, 4:])


def test_model_has_the_paper_parameter_count():
    assert sum(p.numel() for p in HookedEncoderDecoder().parameters()) == 1_400_606 == ModelConfig().n_params


@pytest.mark.parametrize(
    "settings",
    [
        {"d_model": 64, "n_heads": 4, "n_encoder_layers": 2, "n_decoder_layers": 1, "d_mlp": 96},
        {"n_encoder_layers": 1, "n_decoder_layers": 4, "vocab_size": 41, "use_hook_result": True},
        {"d_model": 32, "n_heads": 2, "d_mlp": 7, "max_len": 64},
    ],
)
def test_the_configs_parameter_count_is_the_models(settings):
    cfg = ModelConfig(**settings)
    assert cfg.n_params == sum(p.numel() for p in HookedEncoderDecoder(cfg).parameters())


@pytest.mark.parametrize("stack,kind", [("encoder", "attn"), ("decoder", "cross_attn")])
def test_zeroing_one_heads_pattern_removes_exactly_its_contribution(make_pair, make_tasks, stack, kind):
    _, model = make_pair(ModelConfig(use_hook_result=True, dropout=0.0), seed=5)
    tasks = make_tasks(3, seed=4)
    layer, head = 1, 6
    prefix = f"{stack}.{layer}"

    def zero_head(pattern, hook):
        pattern[:, head] = 0.0
        return pattern

    with torch.no_grad():
        logits, clean = model.run_with_cache(tasks)
        with model.hooks(fwd_hooks=[(f"{prefix}.{kind}.hook_pattern", zero_head)]):
            patched_logits, patched = model.run_with_cache(tasks)
    out_hook = f"{prefix}.hook_{'attn' if kind == 'attn' else 'cross_attn'}_out"
    z_hook, result_hook = f"{prefix}.{kind}.hook_z", f"{prefix}.{kind}.hook_result"
    assert patched[z_hook][:, :, head].abs().max() == 0
    others = [h for h in range(model.cfg.n_heads) if h != head]
    torch.testing.assert_close(patched[z_hook][:, :, others], clean[z_hook][:, :, others])
    torch.testing.assert_close(patched[out_hook], clean[out_hook] - clean[result_hook][:, :, head], atol=1e-5, rtol=0)
    torch.testing.assert_close(patched[f"{prefix}.hook_resid_pre"], clean[f"{prefix}.hook_resid_pre"])
    assert not torch.allclose(patched_logits, logits)


def test_replacing_a_pattern_changes_the_output(paper_pair, make_tasks):
    _, model = paper_pair
    tasks = make_tasks(2, seed=6)
    uniform = lambda pattern, hook: torch.full_like(pattern, 1.0 / pattern.shape[-1])
    with torch.no_grad():
        clean = model(tasks)
        patched = model.run_with_hooks(tasks, fwd_hooks=[("encoder.1.attn.hook_pattern", uniform)])
    assert not torch.allclose(clean, patched)
    assert not model.list_hooks()


def test_hook_result_sums_to_attention_output(make_pair, make_tasks):
    _, model = make_pair(ModelConfig(use_hook_result=True, dropout=0.0), seed=2)
    with torch.no_grad():
        _, cache = model.run_with_cache(make_tasks(2, seed=1))
    for name in ("encoder.0.attn", "decoder.2.attn", "decoder.1.cross_attn"):
        summed = cache[f"{name}.hook_result"].sum(dim=2) + model.mod_dict[name].out_proj.bias
        out = name.replace(".attn", ".hook_attn_out").replace(".cross_attn", ".hook_cross_attn_out")
        torch.testing.assert_close(summed, cache[out], atol=1e-5, rtol=0)


def test_hook_result_is_switched_on_and_off_on_a_built_model(make_pair, make_tasks):
    _, model = make_pair(ModelConfig(dropout=0.0), seed=3)
    tasks, names, weights = make_tasks(2, seed=5), model.hook_names(), dict(model.state_dict())
    with pytest.raises(ValueError, match=r"attn.hook_result is opt-in: model.set_use_hook_result\(True\)$"):
        model.run_with_cache(tasks, names_filter="encoder.1.attn.hook_result")
    with torch.no_grad():
        before = model(tasks)
        assert model.set_use_hook_result(True) is model and model.cfg.use_hook_result
        logits, cache = model.run_with_cache(tasks)
    added = [name for name in model.hook_names() if name.endswith("hook_result")]
    assert len(added) == 9 and [name for name in model.hook_names() if name not in added] == names
    for name in ("encoder.1.attn", "decoder.0.attn", "decoder.2.cross_attn"):
        summed = cache[f"{name}.hook_result"].sum(dim=2) + model.mod_dict[name].out_proj.bias
        out = name.replace(".attn", ".hook_attn_out").replace(".cross_attn", ".hook_cross_attn_out")
        torch.testing.assert_close(summed, cache[out], atol=1e-5, rtol=0)
    torch.testing.assert_close(logits, before, atol=1e-4, rtol=0)
    assert model.set_use_hook_result(False).hook_names() == names and not model.cfg.use_hook_result
    assert all(torch.equal(value, weights[key]) for key, value in model.state_dict().items())
    with torch.no_grad():
        assert torch.equal(model(tasks), before)


def test_to_tokens_and_to_str_tokens_label_the_cached_positions(paper_pair):
    _, model = paper_pair
    text = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd"
    encoder, decoder = model.to_str_tokens(text), model.to_str_tokens(text, side="decoder")
    assert encoder == [*"abcdefghijklmnopqrstuvwxyz", "|", *"ghi>fhi", "|", *"bcd", "EOS"] and decoder == [*">acd"]
    with torch.no_grad():
        _, cache = model.run_with_cache(text, names_filter=["encoder.0.hook_resid_post", "decoder.0.hook_resid_post"])
    assert cache["encoder.0.hook_resid_post"].shape[1] == len(encoder)
    assert cache["decoder.0.hook_resid_post"].shape[1] == len(decoder)
    batch = model.to_tokens([text, "abcdefghijklmnopqrstuvwxyz | ghi > ghj | bcdef > bcdeg"])
    assert batch.src.shape == (2, len(encoder) + 2) and batch.tgt_in.shape == (2, 6)
    assert model.to_str_tokens(text.rsplit(" > ", 1)[0], side="decoder") == [">"]  # no answer: the start token
    with pytest.raises(ValueError, match="side must be 'encoder' or 'decoder', got 'cross'"):
        model.to_str_tokens(text, side="cross")


def test_to_str_tokens_gives_one_list_per_row_of_a_batch(paper_pair):
    """A batch of several tasks is labelled row by row (it used to label only the first row, silently)."""
    _, model = paper_pair
    short = "abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd"
    long = "abcdefghijklmnopqrstuvwxyz | ghijklm > fhijklm | bcdefgh > acdefgh"
    rows = [model.to_str_tokens(short), model.to_str_tokens(long)]
    assert len(rows[0]) == 39 and len(rows[1]) == 51
    batch = model.to_tokens([short, long])
    assert model.to_str_tokens([short, long]) == rows
    assert model.to_str_tokens(batch) == rows and model.to_str_tokens(batch.src) == rows
    assert model.to_str_tokens([long, short], side="decoder") == [[*">acdefgh"], [*">acd"]]
    assert model.to_str_tokens([long]) == [rows[1]]  # a list of one task: a list of one list, as TransformerLens
    one_row = model.to_tokens(long).src
    assert model.to_str_tokens(one_row) == rows[1] and model.to_str_tokens(one_row[0]) == rows[1]


def test_a_mistyped_hook_name_is_a_value_error_and_attaches_nothing(paper_pair, make_tasks):
    _, model = paper_pair
    tasks = make_tasks(2, seed=6)
    hooks = [("encoder.0.hook_resid_pre", _noop), ("encoder.1.attn.hook_patern", _noop)]
    message = r"^unknown hook name\(s\) \['encoder.1.attn.hook_patern'\]; see model.hook_names\(\) or docs/hooks.md$"
    with pytest.raises(ValueError, match=message):
        model.run_with_hooks(tasks, fwd_hooks=hooks)
    with pytest.raises(ValueError, match=message), model.hooks(fwd_hooks=hooks):
        pass
    with pytest.raises(ValueError, match=message):
        model.add_hook("encoder.1.attn.hook_patern", _noop)
    assert not model.list_hooks()


def test_add_hook_attaches_by_name_or_filter_and_passes_transformer_lens_options_on(make_tasks):
    """``add_hook`` checks the name and hands everything on: the hook, ``dir`` and ``is_permanent`` given by
    position or by keyword (a permanent hook outlives ``reset_hooks()``), and a name filter (a callable)."""
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    tasks, seen = make_tasks(2, seed=3), []

    def record(tensor, hook):
        seen.append((hook.name, tuple(tensor.shape)))

    model.add_hook("encoder.0.hook_resid_post", record, "fwd", True)  # dir, is_permanent by position
    model.add_hook("decoder.1.hook_resid_post", record, dir="fwd", is_permanent=True)
    model.add_hook(lambda name: name == "encoder.hook_embed", record)  # a filter, not permanent
    model.reset_hooks()
    with torch.no_grad():
        model(tasks)
    permanent = ["encoder.0.hook_resid_post", "decoder.1.hook_resid_post"]
    assert [name for name, _ in seen] == permanent
    seen.clear()
    model.add_hook(lambda name: name == "encoder.hook_embed", record)
    with torch.no_grad():
        model(tasks)
    assert [name for name, _ in seen] == ["encoder.hook_embed", *permanent]
    assert seen[0][1] == seen[1][1] == (2, to_token_batch(tasks).src.shape[1], 32)
    model.reset_hooks(including_permanent=True)
    assert not model.list_hooks()


def test_switching_hook_result_on_again_keeps_its_hooks(small_cfg, make_tasks):
    """``set_use_hook_result(True)`` on a model that already has ``attn.hook_result`` changes nothing: a
    (permanent) hook attached to it still fires."""
    import dataclasses

    model = HookedEncoderDecoder(dataclasses.replace(small_cfg, use_hook_result=True, dropout=0.0))
    fired = []
    model.add_hook("encoder.0.attn.hook_result", lambda tensor, hook: fired.append(hook.name), is_permanent=True)
    assert model.set_use_hook_result(True) is model and model.cfg.use_hook_result
    with torch.no_grad():
        model(make_tasks(2, seed=4))
    assert fired == ["encoder.0.attn.hook_result"]
    model.reset_hooks(including_permanent=True)


def test_to_tokens_puts_the_batch_on_the_models_device():
    model = HookedEncoderDecoder(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64))
    batch = model.to("meta").to_tokens("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd")
    assert {t.device.type for t in (batch.src, batch.roles, batch.tgt_in, batch.tgt_out)} == {"meta"}


def test_per_head_weights_reproduce_queries_and_outputs(paper_pair, make_tasks):
    _, model = paper_pair
    with torch.no_grad():
        _, cache = model.run_with_cache(make_tasks(2, seed=8))
    attn = model.encoder[1].attn
    resid = cache["encoder.1.hook_resid_pre"]
    q = torch.einsum("bpd,hde->bphe", resid, attn.W_Q) + attn.in_proj_bias[:128].view(8, 16)
    torch.testing.assert_close(q, cache["encoder.1.attn.hook_q"], atol=1e-5, rtol=0)
    out = torch.einsum("bphe,hed->bpd", cache["encoder.1.attn.hook_z"], attn.W_O) + attn.out_proj.bias
    torch.testing.assert_close(out, cache["encoder.1.hook_attn_out"], atol=1e-5, rtol=0)
    assert attn.W_K.shape == attn.W_V.shape == (8, 128, 16)


def test_accepts_task_list_token_batch_and_id_tensors(paper_pair, make_tasks):
    _, model = paper_pair
    tasks = make_tasks(3, seed=9)
    batch = encode_tasks(tasks)
    with torch.no_grad():
        from_tasks, from_batch = model(tasks), model(batch)
        from_ids = model(batch.src, batch.tgt_in)
        single = model(tasks[0])
    torch.testing.assert_close(from_tasks, from_batch)
    torch.testing.assert_close(from_ids, from_batch)
    n_pos = len(tasks[0].answer) + 1
    torch.testing.assert_close(single[0], from_batch[0, :n_pos], atol=1e-5, rtol=0)


def test_tasks_without_answers_run_one_decoder_step(paper_pair, make_tasks):
    _, model = paper_pair
    tasks = make_tasks(3, seed=10)
    with torch.no_grad():
        logits = model([t.with_answer(None) for t in tasks])
        teacher_forced = model(tasks)
    assert logits.shape == (3, 1, VOCAB_SIZE)
    torch.testing.assert_close(logits[:, 0], teacher_forced[:, 0], atol=1e-5, rtol=0)


def test_rejects_unusable_inputs(paper_pair):
    _, model = paper_pair
    with pytest.raises(ValueError, match="a task needs 'alphabet"):  # text is read as a task
        model("abc")
    with pytest.raises(TypeError):
        model(3)
    with pytest.raises(ValueError, match="empty"):
        model([])


@pytest.mark.parametrize("tgt", [[[1]], torch.tensor([1]), torch.tensor([[1.0]])], ids=["list", "1-D", "float"])
def test_forward_refuses_a_decoder_input_of_the_wrong_type(small_model, make_tasks, monkeypatch, tgt):
    """As a user's Python sees it (no runtime type checker): a TypeError naming ``tgt``, raised before any hook."""
    monkeypatch.setattr(jaxtyping.config, "jaxtyping_disable", True)
    fired = []
    with small_model.hooks(fwd_hooks=[(lambda name: True, lambda tensor, hook: fired.append(hook.name))]):
        with pytest.raises(TypeError, match=r"^tgt must be a \[batch, tgt_pos\] int64 tensor, got "):
            small_model(make_tasks(1), tgt)
    assert fired == []


@pytest.mark.parametrize("bad", [VOCAB_SIZE, 99, -5])
def test_forward_and_run_with_cache_refuse_decoder_ids_outside_the_vocabulary(small_model, make_tasks, bad):
    """Was an IndexError from the embedding; the message gives the range found."""
    tgt = torch.tensor([[1, bad], [1, 2]])
    message = rf"^tgt must be token ids 0\.\.{VOCAB_SIZE - 1} \(the vocabulary\), got {min(bad, 1)}\.\.{max(bad, 2)}$"
    with pytest.raises(ValueError, match=message):
        small_model(make_tasks(2), tgt)
    with pytest.raises(ValueError, match=message):
        small_model.run_with_cache(make_tasks(2), tgt)


def test_run_with_cache_returns_detached_copies_in_hook_order(paper_pair, make_tasks):
    _, model = paper_pair
    seen = {}

    def grab(tensor, hook):
        seen[hook.name] = tensor

    tasks = make_tasks(2, seed=11)
    with model.hooks(fwd_hooks=[("encoder.0.hook_resid_post", grab)]):
        logits, cache = model.run_with_cache(tasks)
    assert isinstance(cache, ActivationCache)
    assert list(cache.keys()) == model.hook_names()
    assert all(not t.requires_grad for t in cache.values())
    own = seen["encoder.0.hook_resid_post"]
    assert cache["encoder.0.hook_resid_post"].data_ptr() != own.data_ptr()
    torch.testing.assert_close(cache["encoder.0.hook_resid_post"], own.detach())
    assert logits.shape == (2, cache.inputs.tgt_in.shape[1], VOCAB_SIZE)


def test_run_with_cache_names_filter_and_device(paper_pair, make_tasks):
    _, model = paper_pair
    tasks = make_tasks(2, seed=12)
    _, by_list = model.run_with_cache(tasks, names_filter=["decoder.0.cross_attn.hook_pattern"], device="cpu")
    assert list(by_list.keys()) == ["decoder.0.cross_attn.hook_pattern"]
    _, by_fn = model.run_with_cache(tasks, names_filter=lambda name: name.endswith("hook_pattern"))
    assert len(by_fn) == 9
    _, by_str = model.run_with_cache(tasks, names_filter="encoder.hook_embed")
    assert list(by_str.keys()) == ["encoder.hook_embed"]
    with pytest.raises(ValueError, match="unknown hook name"):
        model.run_with_cache(tasks, names_filter=["encoder.9.hook_resid_pre"])
    assert not model.list_hooks()


def test_cross_attention_pattern_is_rectangular(paper_pair, make_tasks):
    _, model = paper_pair
    tasks = make_tasks(2, seed=13, answer_len=(4, 4))
    _, cache = model.run_with_cache(tasks)
    src_pos, tgt_pos = cache.inputs.src.shape[1], 5
    pattern = cache.pattern("decoder", 0, "cross_attn")
    assert pattern.shape == (2, 8, tgt_pos, src_pos)
    pad = cache.inputs.src == PAD
    assert pattern.masked_select(pad[:, None, None, :]).abs().max() == 0
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 8, tgt_pos))
    self_pattern = cache.pattern("decoder", 0)
    assert torch.triu(self_pattern, diagonal=1).abs().max() == 0


def test_fused_path_is_used_only_without_hooks(paper_pair, make_tasks, monkeypatch):
    _, model = paper_pair
    calls = []
    original = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(
        torch.nn.functional, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    tasks = make_tasks(1, seed=14)
    with torch.no_grad():
        model(tasks)
        assert len(calls) == 9
        calls.clear()
        model.run_with_hooks(tasks, fwd_hooks=[("encoder.1.attn.hook_z", _noop)])
        assert len(calls) == 8
        handle = model.encoder[0].attn.hook_pattern.register_forward_hook(lambda *args: None)
        calls.clear()
        model(tasks)
        handle.remove()
    assert len(calls) == 8


def test_nnsight_can_replace_an_attention_pattern(make_pair, small_cfg, make_tasks):
    nnsight = pytest.importorskip("nnsight")
    _, model = make_pair(small_cfg, seed=3)  # a fresh model: nnsight instruments its modules for good
    tasks = make_tasks(2, seed=15)
    with torch.no_grad():
        clean = model(tasks)
        wrapped = nnsight.NNsight(model)
        with wrapped.trace(tasks):
            pattern = wrapped.encoder[1].attn.hook_pattern.output.save()
            wrapped.encoder[1].attn.hook_pattern.output[:] = 0.0
            patched = wrapped.output.save()
        with wrapped.trace(tasks):
            untouched = wrapped.output.save()
    src_pos = encode_tasks(tasks).src.shape[1]
    assert pattern.shape == (2, small_cfg.n_heads, src_pos, src_pos)
    assert not torch.allclose(patched, clean)
    torch.testing.assert_close(untouched, clean, atol=1e-5, rtol=0)


def test_initialisation_is_xavier_in_the_layers_and_normal_in_the_embeddings():
    """As nn.Transformer inside the reference: layer matrices Xavier-uniform, embeddings N(0, 1), norms 1 and 0."""
    torch.manual_seed(0)
    model = HookedEncoderDecoder(ModelConfig(d_model=64, n_heads=4, n_encoder_layers=1, n_decoder_layers=1, d_mlp=128))
    fc_in = model.encoder[0].mlp.fc_in.weight
    bound = (6 / (64 + 128)) ** 0.5
    assert fc_in.abs().max() <= bound and abs(fc_in.std().item() - bound / 3**0.5) < 0.05 * bound
    out_proj = model.decoder[0].cross_attn.out_proj.weight
    assert out_proj.abs().max() <= (6 / 128) ** 0.5
    for embed in (model.encoder.embed.weight, model.decoder.embed.weight):
        assert abs(embed.std().item() - 1.0) < 0.1 and embed.abs().max() > 2.0
    assert torch.equal(model.decoder[0].ln3.weight, torch.ones(64))
    assert torch.equal(model.decoder[0].ln3.bias, torch.zeros(64))


def test_decode_masks_pad_keys_of_the_decoder_input_by_default(small_model, make_tasks):
    """``decode`` masks PAD decoder-input keys unless ``mask_tgt_pad=False`` (seen at the PAD query positions)."""
    batch = encode_tasks(make_tasks(3, seed=16, answer_len=(2, 6)))
    assert (batch.tgt_in == PAD).any()
    with torch.no_grad():
        memory = small_model.encode(batch.src)
        default = small_model.decode(batch.tgt_in, memory, batch.src_pad_mask)
        masked = small_model.decode(batch.tgt_in, memory, batch.src_pad_mask, mask_tgt_pad=True)
        unmasked = small_model.decode(batch.tgt_in, memory, batch.src_pad_mask, mask_tgt_pad=False)
    assert torch.equal(default, masked)
    pad = batch.tgt_in == PAD
    torch.testing.assert_close(unmasked[~pad], masked[~pad], atol=1e-5, rtol=0)
    assert not torch.allclose(unmasked[pad], masked[pad])


def test_run_with_cache_moves_cached_tensors_to_the_given_device(small_model, make_tasks):
    """``device`` places every cached tensor there (``meta`` here, so it runs without a GPU); logits stay put."""
    names = ["encoder.hook_embed", "decoder.1.hook_resid_post"]
    logits, cache = small_model.run_with_cache(make_tasks(2, seed=17), names_filter=names, device="meta")
    assert list(cache.keys()) == names
    assert all(tensor.device.type == "meta" for tensor in cache.values())
    assert logits.device.type == "cpu"


def test_a_bfloat16_model_runs_with_hooks(make_pair, small_cfg, make_tasks):
    """The encoder and decoder masks take the model's dtype: the hooked (explicit) path works in bfloat16."""
    _, model = make_pair(small_cfg, seed=0)
    model = model.to(torch.bfloat16)
    logits, cache = model.run_with_cache(make_tasks(2, seed=18), names_filter=["encoder.1.attn.hook_pattern"])
    assert logits.dtype == cache["encoder.1.attn.hook_pattern"].dtype == torch.bfloat16


def test_encoding_from_a_layer_on_its_residual_gives_the_whole_encoding_and_fires_no_hook_below_it(
    small_model, make_tasks
):
    """``encode(src, L, residual)`` from a cache's stream entering layer L (the last layer's ``hook_resid_post`` for
    the final norm) equals the whole encoding to the bit; the embedding's and lower layers' hooks do not fire. (Both
    run with hooks on every encoder attention pattern, so on the same attention path.)"""
    src = encode_tasks(make_tasks(4, seed=21)).src
    n = small_model.cfg.n_encoder_layers
    with torch.no_grad():
        _, cache = small_model.run_with_cache(src, names_filter=lambda name: name.startswith("encoder."))
        fired: list[str] = []
        every = [(lambda name: name.startswith("encoder."), lambda t, hook: fired.append(hook.name))]
        with small_model.hooks(fwd_hooks=every):
            whole = small_model.encode(src)
            for layer in range(n + 1):
                fired.clear()
                entering = f"encoder.{layer}.hook_resid_pre" if layer < n else f"encoder.{n - 1}.hook_resid_post"
                started = small_model.encode(src, start_at_layer=layer, residual=cache[entering])
                assert torch.equal(started, whole), layer
                below = [name for name in fired if name.split(".")[1] in ("hook_embed", *map(str, range(layer)))]
                assert below == [] and fired[-1] == "encoder.ln_final.hook_out", layer
                assert any(name.startswith(f"encoder.{layer}.") for name in fired) == (layer < n)


def test_encoding_from_a_layer_refuses_a_layer_out_of_range_a_missing_residual_and_one_of_the_wrong_shape(
    small_model, make_tasks
):
    src = encode_tasks(make_tasks(2, seed=22)).src
    n, d_model = small_model.cfg.n_encoder_layers, small_model.cfg.d_model
    residual = torch.zeros(*src.shape, d_model)
    for layer in (-1, n + 1):
        with pytest.raises(ValueError, match=rf"^start_at_layer must be in 0\.\.{n} \(the encoder's layers\), got"):
            small_model.encode(src, start_at_layer=layer, residual=residual)
    with pytest.raises(ValueError, match=r"^start_at_layer > 0 needs the residual stream entering that layer"):
        small_model.encode(src, start_at_layer=1)
    wanted = rf"= \[2, {src.shape[1]}, {d_model}\], got \[2, {src.shape[1]}, {d_model + 1}\]$"
    with pytest.raises(ValueError, match=r"^residual must be \[batch, src_pos, d_model\] " + wanted):
        small_model.encode(src, start_at_layer=1, residual=torch.zeros(*src.shape, d_model + 1))
    assert not torch.allclose(small_model.encode(src, residual=residual), small_model.encode(src))  # read at layer 0
