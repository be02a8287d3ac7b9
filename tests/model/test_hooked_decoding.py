"""HookedEncoderDecoder decoding: cached greedy decoding vs full re-computation, generate, solve."""

from __future__ import annotations

import pytest
import torch

from lsa_interp.data.tokenizer import decode_batch, encode_tasks
from lsa_interp.data.vocab import ARROW, EOS, PAD
from lsa_interp.model.inputs import decoder_input_from_generated
from lsa_interp.model.reference import reference_greedy_decode

EOS_BIAS = 0.3
"""Added to the EOS logit of the small random model so that rows stop after 2 to 32 steps."""


@pytest.fixture(scope="module")
def stopping_pair(make_pair, small_cfg):
    """Small reference and hooked models (same weights) that emit EOS after a varying number of steps."""
    reference, model = make_pair(small_cfg, seed=0)
    with torch.no_grad():
        reference.out.bias[EOS] += EOS_BIAS
        model.unembed.bias[EOS] += EOS_BIAS
    return reference, model


@pytest.fixture(scope="module")
def thousand(make_tasks):
    return encode_tasks(make_tasks(1000, seed=0))


def _lengths(tokens: torch.Tensor) -> torch.Tensor:
    """Generated length of each row, EOS included (the full width when a row has no EOS)."""
    return ((tokens == EOS).long().cumsum(1) == 0).sum(1) + (tokens == EOS).any(1).long()


@pytest.mark.slow
def test_cached_decoding_equals_full_recomputation_on_1000_tasks(stopping_pair, thousand):
    reference, model = stopping_pair
    cached = model.generate(thousand, batch_size=250)
    full = model.generate(thousand, batch_size=1000, use_cache=False)
    lengths = _lengths(cached)
    assert len(set(lengths.tolist())) >= 5 and lengths.min() < 8 and lengths.max() == 32
    assert torch.equal(cached, full)
    expected = reference_greedy_decode(reference, thousand.src, n_steps=32)
    assert torch.equal(cached, expected[:, : cached.shape[1]])
    assert (expected[:, cached.shape[1] :] == PAD).all()


def test_decoding_from_a_given_memory_runs_no_encoder_and_answers_from_that_memory(stopping_pair, make_tasks):
    """``memory`` (e.g. an encoder output made under patches) is what the decoder reads: the encoder does not run, and
    the memory of other prompts of the same length gives their answers."""
    _, model = stopping_pair
    by_length: dict[int, list] = {}
    for task in make_tasks(60, seed=2):
        by_length.setdefault(encode_tasks([task]).src.shape[1], []).append(task)
    a, b = next(tasks for tasks in by_length.values() if len(tasks) >= 2)[:2]
    first, swapped = encode_tasks([a, b]), encode_tasks([b, a])
    calls = []
    with torch.no_grad():
        memory = model.encode(first.src)
        with model.hooks(fwd_hooks=[("encoder.0.hook_resid_pre", lambda t, hook: calls.append(1))]):
            given = model.greedy_decode(first.src, 32, memory=memory)
        other = model.greedy_decode(first.src, 32, memory=model.encode(swapped.src))
    assert calls == [] and torch.equal(given, model.greedy_decode(first.src, 32))
    assert torch.equal(other, model.greedy_decode(swapped.src, 32)) and not torch.equal(other, given)


def test_tokens_after_eos_are_pad_and_decoding_stops_when_all_rows_are_done(stopping_pair, make_tasks):
    _, model = stopping_pair
    tokens = model.generate(make_tasks(50, seed=1), max_new_tokens=32)
    lengths = _lengths(tokens)
    assert tokens.shape[1] == int(lengths.max())
    after = torch.arange(tokens.shape[1])[None, :] >= lengths[:, None]
    assert (tokens[after] == PAD).all()


def test_generate_with_hooks_keeps_rows_aligned(stopping_pair, make_tasks):
    _, model = stopping_pair
    tasks = make_tasks(20, seed=2)
    batch_sizes = []

    def record(tensor, hook):
        batch_sizes.append(tensor.shape[0])

    plain = model.generate(tasks)
    with model.hooks(fwd_hooks=[("encoder.0.hook_resid_pre", record), ("decoder.0.attn.hook_pattern", record)]):
        hooked = model.generate(tasks, batch_size=4)
    assert torch.equal(plain, hooked)
    assert set(batch_sizes) == {20} and len(batch_sizes) == 1 + plain.shape[1]


def test_generate_return_cache_gives_the_decoded_sequence(stopping_pair, make_tasks):
    _, model = stopping_pair
    tokens, cache = model.generate(make_tasks(8, seed=3), return_cache=True)
    tgt_in = cache.inputs.tgt_in
    assert torch.equal(tgt_in, decoder_input_from_generated(tokens))
    logits = model.unembed(cache["decoder.ln_final.hook_out"])
    width = min(tgt_in.shape[1], tokens.shape[1])
    predicted = logits.argmax(-1)[:, :width]
    keep = tokens[:, :width] != PAD
    assert torch.equal(predicted[keep], tokens[:, :width][keep])
    assert cache.pattern("decoder", 1, "cross_attn").shape[2] == tgt_in.shape[1]


def test_generate_return_cache_under_hooks_is_of_the_decoded_tokens_or_refused(stopping_pair, make_tasks):
    """The cache is one teacher-forced pass under the attached hooks: a position-independent hook gives the cache of
    the decoded tokens; one that changes each step's newest position (``t[:, -1]``) acts on the pass's last
    position only, so that pass would answer otherwise, and generate refuses to return it."""
    _, model = stopping_pair
    tasks = make_tasks(8, seed=3)

    def halve(tensor, hook):
        return tensor * 0.5

    def newest(tensor, hook):
        tensor = tensor.clone()
        tensor[:, -1] = 0
        return tensor

    with model.hooks(fwd_hooks=[("decoder.1.hook_mlp_out", halve)]):
        tokens, cache = model.generate(tasks, return_cache=True)
    width = min(cache.inputs.tgt_in.shape[1], tokens.shape[1])
    keep = tokens[:, :width] != PAD
    predicted = model.unembed(cache["decoder.ln_final.hook_out"]).argmax(-1)[:, :width]
    assert torch.equal(predicted[keep], tokens[:, :width][keep])
    with model.hooks(fwd_hooks=[("decoder.0.hook_resid_pre", newest)]):
        assert not torch.equal(model.generate(tasks), model.generate(tasks, use_cache=False))
        with pytest.raises(ValueError, match="the cache would not be of the decoded tokens"):
            model.generate(tasks, return_cache=True)


def test_the_cache_of_a_generation_that_emitted_pad_is_the_run_that_decoded_it():
    """Greedy decoding feeds a PAD the model emits back like any token (unmasked); the returned cache must be of
    that run, so its logits give back every generated token up to EOS, the emitted PADs and what followed them."""
    from lsa_interp.data import Task
    from lsa_interp.model import HookedEncoderDecoder, ModelConfig

    torch.manual_seed(5)
    model = HookedEncoderDecoder(ModelConfig()).eval()  # untrained: it emits PAD mid-answer
    tokens, cache = model.generate(Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd"), return_cache=True)
    row = tokens[0].tolist()
    end = row.index(EOS) + 1 if EOS in row else len(row)
    assert PAD in row[: end - 1], row  # the case under test
    predicted = model.unembed(cache["decoder.ln_final.hook_out"]).argmax(-1)[0]
    assert predicted[: min(end, len(predicted))].tolist() == row[: min(end, len(predicted))]


def test_decoder_input_from_generated():
    generated = torch.tensor([[1, 2, EOS, PAD], [3, EOS, PAD, PAD], [4, 5, 6, 7]])
    expected = torch.tensor([[ARROW, 1, 2, PAD], [ARROW, 3, PAD, PAD], [ARROW, 4, 5, 6]])
    assert torch.equal(decoder_input_from_generated(generated), expected)


def test_generating_for_no_rows_gives_no_rows_and_an_empty_cache(stopping_pair):
    """An empty batch decodes nothing: ``[0, 1]`` tokens, and with ``return_cache`` a cache of the ``>`` step
    (``decoder_input_from_generated`` raised a RuntimeError on it)."""
    _, model = stopping_pair
    src = torch.zeros((0, 5), dtype=torch.long)
    assert model.generate(src).shape == (0, 1)
    tokens, cache = model.generate(src, return_cache=True, names_filter="decoder.ln_final.hook_out")
    assert tokens.shape == (0, 1) and cache["decoder.ln_final.hook_out"].shape == (0, 1, model.cfg.d_model)


def test_a_generated_arrow_makes_an_answer_wrong_in_solve_and_in_evaluation(small_model, monkeypatch):
    """A model that emits ``>`` before the right letters has not answered ``acd``: neither ``solve`` nor the
    evaluation's ``predict`` may drop the generated ``>`` as if it were the decoder's start symbol."""
    from lsa_interp.data import Task
    from lsa_interp.evaluation.run import predict

    task = Task.parse("abcdefghijklmnopqrstuvwxyz | ghi > fhi | bcd > acd")
    emitted = torch.tensor([[ARROW, 0, 2, 3, EOS]])
    monkeypatch.setattr(small_model, "generate", lambda tasks, **kwargs: emitted)
    assert small_model.solve(task) == ">acd"
    assert predict(small_model, [task]) == [">acd"]


def test_solve_returns_strings(stopping_pair, make_tasks):
    _, model = stopping_pair
    tasks = make_tasks(5, seed=4)
    answers = model.solve(tasks)
    assert isinstance(answers, list) and len(answers) == 5
    assert answers == decode_batch(model.generate(tasks))
    assert model.solve(tasks[2]) == answers[2]
    assert model.solve(str(tasks[2])) == answers[2]  # a task's text, its answer ignored as a Task's is
    assert model.solve([str(t.with_answer(None)) for t in tasks[:2]]) == answers[:2]


def test_generate_rejects_bad_lengths(stopping_pair, make_tasks):
    _, model = stopping_pair
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(make_tasks(1), max_new_tokens=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        model.generate(make_tasks(1), max_new_tokens=model.cfg.max_len + 1)
    message = rf"^max_new_tokens must be in 1\.\.{model.cfg.max_len}, got -1$"  # was a RuntimeError from torch.full
    for use_cache in (True, False):
        with pytest.raises(ValueError, match=message):
            model.generate(make_tasks(2), max_new_tokens=-1, use_cache=use_cache)
    with pytest.raises(ValueError, match=message):
        model.solve(make_tasks(1)[0], max_new_tokens=-1)
    for bad in (0, -1):  # -1 used to return all-PAD answers without decoding anything
        with pytest.raises(ValueError, match=f"batch_size must be positive, got {bad}"):
            model.solve(make_tasks(2), batch_size=bad)


@pytest.fixture(scope="module")
def forty(make_tasks):
    return encode_tasks(make_tasks(40, seed=5))


def test_cached_chunked_decoding_equals_full_recomputation_and_the_reference(stopping_pair, forty):
    """Cached decoding in chunks of 7 rows gives the tokens of re-running the whole decoder, row by row."""
    reference, model = stopping_pair
    cached = model.generate(forty, batch_size=7)
    full = model.generate(forty, batch_size=40, use_cache=False)
    lengths = _lengths(cached)
    assert len(set(lengths.tolist())) >= 5 and lengths.max() == cached.shape[1]
    assert torch.equal(cached, full)
    expected = reference_greedy_decode(reference, forty.src, n_steps=cached.shape[1])
    assert torch.equal(cached, expected)


def test_chunks_keep_the_input_order(stopping_pair, make_tasks):
    """Decoding by chunks of rows grouped by length puts every row's answer back at its input position."""
    _, model = stopping_pair
    tasks = make_tasks(7, seed=6)
    together = model.generate(tasks, batch_size=2)
    for i, task in enumerate(tasks):
        alone = model.generate([task])
        assert torch.equal(together[i, : alone.shape[1]], alone[0])
        assert (together[i, alone.shape[1] :] == PAD).all()


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("max_new_tokens", [1, 3])
def test_decoding_stops_after_max_new_tokens(stopping_pair, forty, use_cache, max_new_tokens):
    """Rows that have not emitted EOS are cut after ``max_new_tokens`` tokens (the reference's first tokens)."""
    reference, model = stopping_pair
    tokens = model.generate(forty, max_new_tokens=max_new_tokens, use_cache=use_cache)
    assert tokens.shape == (40, max_new_tokens) and (tokens != PAD).all()
    assert torch.equal(tokens, reference_greedy_decode(reference, forty.src, n_steps=max_new_tokens))


@pytest.fixture(scope="module")
def never_stopping(make_pair, small_cfg):
    """The small hooked model with the EOS logit pushed down: no row ever ends."""
    _, model = make_pair(small_cfg, seed=0)
    with torch.no_grad():
        model.unembed.bias[EOS] -= 100.0
    return model


def test_default_length_is_32_tokens_and_the_position_table_is_the_limit(never_stopping, make_tasks):
    """Without EOS, generate returns DEFAULT_MAX_NEW_TOKENS (32) tokens, and up to max_len when asked."""
    tasks = make_tasks(2, seed=7)
    assert _shape_without_eos(never_stopping.generate(tasks)) == (2, 32)
    limit = never_stopping.cfg.max_len
    assert _shape_without_eos(never_stopping.generate(tasks, max_new_tokens=limit)) == (2, limit)


def _shape_without_eos(tokens: torch.Tensor) -> tuple[int, ...]:
    assert not (tokens == EOS).any()
    return tuple(tokens.shape)


@pytest.mark.parametrize("use_cache", [True, False])
def test_rows_all_ending_at_the_first_step_give_one_column(make_pair, small_cfg, make_tasks, use_cache):
    """When every row emits EOS first, decoding stops after one step: a single EOS column."""
    _, model = make_pair(small_cfg, seed=0)
    with torch.no_grad():
        model.unembed.bias[EOS] += 100.0
    tokens = model.generate(make_tasks(3, seed=8), use_cache=use_cache)
    assert torch.equal(tokens, torch.full((3, 1), EOS))


def test_finished_rows_leave_the_batch_once_a_quarter_is_done(stopping_pair, make_tasks, monkeypatch):
    """Cached decoding drops finished rows as soon as at least a quarter of the rows still decoded are done."""
    _, model = stopping_pair
    batch = encode_tasks(make_tasks(30, seed=9))
    lengths = _lengths(model.generate(batch)).tolist()
    picked: dict[int, int] = {}
    for row, length in enumerate(lengths):
        picked.setdefault(length, row)
    (a, b, c, d), rows = sorted(picked)[:4], [picked[n] for n in sorted(picked)[:4]]
    sizes = []
    step = model.decode_step
    monkeypatch.setattr(model, "decode_step", lambda tokens, *args: sizes.append(len(tokens)) or step(tokens, *args))
    tokens = model.greedy_decode(batch.src[rows], max_new_tokens=32)
    assert _lengths(tokens).tolist() == [a, b, c, d]
    assert sizes == [4] * a + [3] * (b - a) + [2] * (c - b) + [1] * (d - c)
    sizes.clear()
    kept = model.greedy_decode(batch.src[rows], max_new_tokens=32, drop_finished=False)
    assert torch.equal(kept, tokens) and sizes == [4] * d


def test_pad_tokens_the_model_emits_stay_visible_to_later_steps(make_pair, small_cfg, forty):
    """A PAD the model emits is fed back like any token (not masked as a key), with or without the cache."""
    reference, model = make_pair(small_cfg, seed=0)
    with torch.no_grad():
        for bias in (reference.out.bias, model.unembed.bias):
            bias[PAD] += 1.0
            bias[EOS] += 0.3
    src = forty.src[:20]
    expected = reference_greedy_decode(reference, src, n_steps=12)
    assert (expected == PAD).float().mean() > 0.1
    assert torch.equal(model.greedy_decode(src, 12, use_cache=False), expected)
    assert torch.equal(model.greedy_decode(src, 12), expected)


def test_cross_attention_key_and_value_hooks_fire_once_and_can_edit_decoding(stopping_pair, make_tasks):
    """With hooks, cached decoding computes cross-attention keys/values once, through hook_k/hook_v."""
    _, model = stopping_pair
    tasks = make_tasks(3, seed=10)
    src_pos = encode_tasks(tasks).src.shape[1]
    shapes = []
    record = lambda tensor, hook: shapes.append((hook.name, tuple(tensor.shape)))
    names = ["decoder.1.cross_attn.hook_k", "decoder.1.cross_attn.hook_v"]
    plain = model.generate(tasks)
    with model.hooks(fwd_hooks=[(name, record) for name in names]):
        assert torch.equal(model.generate(tasks), plain)
    assert shapes == [(name, (3, src_pos, 4, 8)) for name in names]
    zero = lambda tensor, hook: torch.zeros_like(tensor)
    with model.hooks(fwd_hooks=[("decoder.0.cross_attn.hook_v", zero), ("decoder.1.cross_attn.hook_v", zero)]):
        edited = model.generate(tasks)
    assert not torch.equal(edited, plain)


def test_rows_are_decoded_with_the_cache_in_chunks_of_batch_size(stopping_pair, make_tasks, monkeypatch):
    """generate and solve decode 256 rows at a time by default (or ``batch_size``), cached, to max_new_tokens."""
    _, model = stopping_pair
    tasks = make_tasks(300, seed=11, answer_len=None)
    calls = []
    decode = model.greedy_decode

    def spy(src, max_new_tokens, use_cache=True, drop_finished=True):
        calls.append((src.shape[0], max_new_tokens, use_cache, drop_finished))
        return decode(src, max_new_tokens, use_cache, drop_finished)

    monkeypatch.setattr(model, "greedy_decode", spy)
    assert model.generate(tasks, max_new_tokens=1).shape == (300, 1)
    assert calls == [(256, 1, True, True), (44, 1, True, True)]
    calls.clear()
    assert len(model.solve(tasks, max_new_tokens=2)) == 300
    assert calls == [(256, 2, True, True), (44, 2, True, True)]
    calls.clear()
    model.solve(tasks[:5], max_new_tokens=1, batch_size=2)
    assert calls == [(2, 1, True, True), (2, 1, True, True), (1, 1, True, True)]
    calls.clear()
    model.generate(tasks[:3], max_new_tokens=1, use_cache=False)
    assert calls == [(3, 1, False, True)]


def test_hooked_generate_without_cache_reruns_the_whole_decoder(stopping_pair, make_tasks):
    """With hooks and ``use_cache=False``, step i re-runs the decoder on i+1 positions (cached: one position)."""
    _, model = stopping_pair
    tasks = make_tasks(3, seed=12)
    widths = []
    record = lambda tensor, hook: widths.append(tensor.shape[1])
    with model.hooks(fwd_hooks=[("decoder.0.hook_resid_pre", record)]):
        full = model.generate(tasks, use_cache=False)
        assert widths == list(range(1, full.shape[1] + 1))
        widths.clear()
        assert torch.equal(model.generate(tasks), full)
    assert widths == [1] * full.shape[1]


def test_generate_return_cache_keeps_only_the_filtered_hooks(stopping_pair, make_tasks):
    """``names_filter`` selects the hooks of the cache that generate returns."""
    _, model = stopping_pair
    names = ["encoder.0.hook_resid_post", "decoder.1.cross_attn.hook_pattern"]
    _, cache = model.generate(make_tasks(2, seed=13), return_cache=True, names_filter=names)
    assert list(cache.keys()) == names


def test_cached_decoding_runs_in_bfloat16(make_pair, small_cfg, make_tasks):
    """The decoding masks take the model's dtype, so a bfloat16 model decodes (cached = full recomputation)."""
    _, model = make_pair(small_cfg, seed=0)
    model = model.to(torch.bfloat16)
    tasks = make_tasks(4, seed=14)
    cached = model.generate(tasks, max_new_tokens=4)
    assert cached.shape == (4, 4)
    assert torch.equal(cached, model.generate(tasks, max_new_tokens=4, use_cache=False))
