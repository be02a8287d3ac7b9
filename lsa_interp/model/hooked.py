"""`HookedEncoderDecoder`: the paper's post-LN encoder-decoder as a TransformerLens `HookedRootModule`.

Computes exactly what ``torch.nn.Transformer`` computes for the paper's model (see SPEC section 3), with
hook points on embeddings, per-head attention internals, sub-block outputs, norm inputs and the
residual stream; ``docs/hooks.md`` lists every hook with its shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from transformer_lens import HookedRootModule

from lsa_interp.data.task import Task
from lsa_interp.data.tokenizer import TokenBatch, decode_batch
from lsa_interp.data.vocab import ARROW, EOS, PAD, display_token
from lsa_interp.model.attention import Attention, KVCache, is_hooked
from lsa_interp.model.cache import ActivationCache
from lsa_interp.model.config import ModelConfig
from lsa_interp.model.inputs import ModelInput, causal_mask, decoder_input_from_generated, key_mask, to_token_batch
from lsa_interp.model.layers import Stack, sinusoidal_table

DEFAULT_MAX_NEW_TOKENS = 32
"""The longest answer of the task family is 24 letters (a 7-letter window extended and tripled) + EOS."""

_COMPACT_FRACTION = 0.25
"""Cached decoding drops finished rows once at least this fraction of the rows still decoded is done."""

NamesFilter = Callable[[str], bool] | Sequence[str] | str | None


class HookedEncoderDecoder(HookedRootModule):
    """Encoder-decoder transformer with hook points; ``model(tasks)`` returns ``[batch, dec_pos, vocab]`` logits.

    Submodules: ``encoder`` and ``decoder`` (`Stack`: ``embed``, layers ``0..n-1``, ``ln_final``), the
    shared sinusoidal table buffer ``pos_embedding`` ``[max_len, d_model]`` and the head ``unembed``.
    ``metadata`` holds training metadata (saved with the checkpoint).
    """

    def __init__(self, cfg: ModelConfig | None = None, metadata: dict | None = None) -> None:
        super().__init__()
        self.cfg = cfg or ModelConfig()
        self.metadata = dict(metadata or {})
        self.encoder = Stack(self.cfg, decoder=False)
        self.decoder = Stack(self.cfg, decoder=True)
        self.unembed = nn.Linear(self.cfg.d_model, self.cfg.vocab_size)
        self.register_buffer("pos_embedding", sinusoidal_table(self.cfg.max_len, self.cfg.d_model))
        self._init_weights()
        self.setup()

    def _init_weights(self) -> None:
        """``nn.Transformer``'s initialisation: Xavier-uniform matrices in the layers (attention biases are 0)."""
        for stack in (self.encoder, self.decoder):
            for name, param in stack.named_parameters():
                if param.dim() > 1 and not name.startswith("embed"):
                    nn.init.xavier_uniform_(param)

    @property
    def device(self) -> torch.device:
        """The device of the model's parameters."""
        return self.unembed.weight.device

    def hook_names(self) -> list[str]:
        """Return every hook point name in execution order."""
        return list(self.hook_dict)

    def to_tokens(self, inputs: ModelInput) -> TokenBatch:
        """The `TokenBatch` the model runs for ``inputs`` (``src`` ``[batch, src_pos]``, ``roles``, ``tgt_in``:
        ``>`` + answer where every task has one, else ``>``), on the model's device, as TransformerLens's
        ``to_tokens``. Raises as `to_token_batch` does."""
        return to_token_batch(inputs).to(self.device)

    def to_str_tokens(self, inputs: ModelInput, side: str = "encoder") -> list[str] | list[list[str]]:
        """Token labels, one string per position (``EOS`` for the end token, padding left out), as
        TransformerLens's ``to_str_tokens``: the labels of a cached activation's ``src_pos`` (``side="encoder"``)
        or ``tgt_pos`` (``side="decoder"``: ``>`` and the answer, teacher-forced).

        A task (or its text, or one row of ids, ``[src_pos]`` or ``[1, src_pos]``) gives one list; a list of
        tasks gives one list per task, and a `TokenBatch` or id tensor of several rows one list per row. Raises
        ValueError for another side, and as `to_token_batch` does for inputs it refuses.
        """
        if side not in ("encoder", "decoder"):
            raise ValueError(f"side must be 'encoder' or 'decoder', got {side!r}")
        if isinstance(inputs, Tensor) and inputs.dim() == 1:
            inputs = inputs[None]
        batch = to_token_batch(inputs)
        ids = batch.src if side == "encoder" else batch.tgt_in
        rows = [[display_token(int(token)) for token in row if int(token) != PAD] for row in ids]
        one_task = isinstance(inputs, (Task, str)) or (not isinstance(inputs, Sequence) and len(rows) == 1)
        return rows[0] if one_task else rows

    def set_use_hook_result(self, use_hook_result: bool) -> HookedEncoderDecoder:
        """Add (True) or remove (False) every attention's per-head ``attn.hook_result`` hook point, as
        TransformerLens's ``set_use_attn_result``; ``cfg.use_hook_result`` follows, the weights, the outputs and
        the other hooks stay as they are. Returns the model (``load_model("copy-200").set_use_hook_result(True)``).
        """
        self.cfg = dataclasses.replace(self.cfg, use_hook_result=use_hook_result)
        for module in self.modules():
            if isinstance(module, Attention):
                module.set_use_hook_result(use_hook_result)
        self.setup()
        return self

    def _check_hook_names(self, names: Sequence[str]) -> None:
        """Raise ValueError naming the hook names the model lacks (and how to get ``hook_result``)."""
        unknown = [name for name in names if name not in self.hook_dict]
        if not unknown:
            return
        opt_in = any(name.endswith("attn.hook_result") for name in unknown) and not self.cfg.use_hook_result
        hint = "; attn.hook_result is opt-in: model.set_use_hook_result(True)" if opt_in else ""
        raise ValueError(f"unknown hook name(s) {unknown}; see model.hook_names() or docs/hooks.md{hint}")

    def add_hook(self, name: str | Callable[[str], bool], hook: Callable, *args, **kwargs) -> None:
        """TransformerLens's ``add_hook``; raises ValueError for a hook name the model lacks (not KeyError)."""
        if isinstance(name, str):
            self._check_hook_names([name])
        super().add_hook(name, hook, *args, **kwargs)

    @contextmanager
    def hooks(
        self,
        fwd_hooks: Sequence[tuple[str | Callable[[str], bool], Callable]] = (),
        bwd_hooks: Sequence[tuple[str | Callable[[str], bool], Callable]] = (),
        reset_hooks_end: bool = True,
        clear_contexts: bool = False,
    ) -> Iterator[HookedEncoderDecoder]:
        """TransformerLens's scoped hook context (``run_with_hooks`` uses it); raises ValueError, before any
        hook is attached, for a hook name the model lacks (not KeyError)."""
        self._check_hook_names([name for name, _ in [*fwd_hooks, *bwd_hooks] if isinstance(name, str)])
        with super().hooks(list(fwd_hooks), list(bwd_hooks), reset_hooks_end, clear_contexts) as model:
            yield model

    def encode(
        self,
        src: Int[Tensor, "batch src_pos"],
        start_at_layer: int = 0,
        residual: Float[Tensor, "batch src_pos d_model"] | None = None,
    ) -> Float[Tensor, "batch src_pos d_model"]:
        """Return the encoder output (after ``encoder.ln_final``); PAD positions are masked as keys.

        As TransformerLens's ``start_at_layer``: given the ``residual`` stream entering encoder layer
        ``start_at_layer`` (a cache's ``encoder.L.hook_resid_pre``; at ``n_encoder_layers``, the final norm's input,
        the last layer's ``hook_resid_post``), only that layer and the ones above it run, so the embedding's and the
        lower layers' hooks do not fire. Raises ValueError for a layer outside ``0..n_encoder_layers``, a later layer
        without ``residual``, or a ``residual`` not shaped ``[*src.shape, d_model]``.
        """
        layers = self.encoder.layers()
        if not 0 <= start_at_layer <= len(layers):
            raise ValueError(f"start_at_layer must be in 0..{len(layers)} (the encoder's layers), got {start_at_layer}")
        mask = key_mask(src == PAD, self.pos_embedding.dtype)
        if residual is None:
            if start_at_layer:
                raise ValueError("start_at_layer > 0 needs the residual stream entering that layer (residual=...)")
            x = self.encoder.embed_tokens(src, self.pos_embedding)
        elif residual.shape != (*src.shape, self.cfg.d_model):
            wanted = [*src.shape, self.cfg.d_model]
            raise ValueError(f"residual must be [batch, src_pos, d_model] = {wanted}, got {[*residual.shape]}")
        else:
            x = residual
        for layer in layers[start_at_layer:]:
            x = layer(x, mask)
        return self.encoder.ln_final(x)

    def decode(
        self,
        tgt: Int[Tensor, "batch tgt_pos"],
        memory: Float[Tensor, "batch src_pos d_model"],
        src_pad: Bool[Tensor, "batch src_pos"],
        mask_tgt_pad: bool = True,
    ) -> Float[Tensor, "batch tgt_pos vocab"]:
        """Return decoder logits for the whole decoder input ``tgt`` (causal; PAD keys masked if asked)."""
        pad = tgt == PAD if mask_tgt_pad else torch.zeros_like(tgt, dtype=torch.bool)
        self_mask = causal_mask(pad, memory.dtype)
        cross_mask = key_mask(src_pad, memory.dtype)
        x = self.decoder.embed_tokens(tgt, self.pos_embedding)
        for layer in self.decoder.layers():
            x = layer(x, memory, self_mask, cross_mask)
        return self.unembed(self.decoder.ln_final(x))

    def decode_step(
        self,
        tokens: Int[Tensor, " batch"],
        position: int,
        cross_mask: Float[Tensor, "batch 1 1 src_pos"],
        caches: list[tuple[KVCache, KVCache]],
    ) -> Float[Tensor, "batch vocab"]:
        """Run one incremental decoder step for ``tokens`` at ``position``; return next-token logits.

        ``caches`` holds (self-attention, cross-attention) key/value caches per decoder layer, as made by
        ``new_decoder_caches``; the self-attention caches grow by one position.
        """
        x = self.decoder.embed_tokens(tokens[:, None], self.pos_embedding, start=position)
        for layer, layer_caches in zip(self.decoder.layers(), caches):
            x = layer(x, None, None, cross_mask, caches=layer_caches)
        return self.unembed(self.decoder.ln_final(x))[:, 0]

    def new_decoder_caches(
        self, memory: Float[Tensor, "batch src_pos d_model"], capacity: int
    ) -> list[tuple[KVCache, KVCache]]:
        """Return empty self-attention caches for ``capacity`` positions and filled cross-attention caches."""
        cfg = self.cfg
        return [
            (
                KVCache.empty(memory.shape[0], cfg.n_heads, capacity, cfg.d_head, like=memory),
                layer.cross_attn.precompute_kv(memory),
            )
            for layer in self.decoder.layers()
        ]

    def forward(
        self, inputs: ModelInput, tgt: Int[Tensor, "batch tgt_pos"] | None = None, *, mask_tgt_pad: bool = True
    ) -> Float[Tensor, "batch tgt_pos vocab"]:
        """Return logits ``[batch, dec_pos, vocab]``.

        ``inputs``: a Task, list of Tasks, TokenBatch or encoder-id tensor. Tasks that all carry answers are
        teacher-forced (decoder input ``>`` + answer); otherwise the decoder input is ``>`` (one step).
        ``tgt`` overrides the decoder input; ``mask_tgt_pad=False`` reads a PAD in it as a token, as greedy
        decoding feeds back a PAD the model emitted. Raises TypeError/ValueError for unusable inputs.
        """
        batch = to_token_batch(inputs, tgt).to(self.device)
        return self.decode(batch.tgt_in, self.encode(batch.src), batch.src_pad_mask, mask_tgt_pad)

    def run_with_cache(
        self,
        inputs: ModelInput,
        tgt: Int[Tensor, "batch tgt_pos"] | None = None,
        *,
        names_filter: NamesFilter = None,
        device: torch.device | str | None = None,
        mask_tgt_pad: bool = True,
    ) -> tuple[Float[Tensor, "batch tgt_pos vocab"], ActivationCache]:
        """Run the model and return ``(logits, cache)`` of the hooks selected by ``names_filter``.

        ``names_filter``: None (all hooks), a name, a list of names or a predicate. Cached tensors are
        detached copies, on ``device`` if given. ``mask_tgt_pad`` as in `forward`. Raises ValueError for an
        unknown hook name.
        """
        selected = self._select_hooks(names_filter)
        activations: dict[str, Tensor] = {}
        target = torch.device(device) if device is not None else None

        def save(tensor: Tensor, hook) -> None:
            activations[hook.name] = tensor.detach().to(device=target or tensor.device, copy=True)

        batch = to_token_batch(inputs, tgt)
        with self.hooks(fwd_hooks=[(name, save) for name in selected]):
            logits = self(batch, mask_tgt_pad=mask_tgt_pad)
        ordered = {name: activations[name] for name in selected if name in activations}
        return logits, ActivationCache(ordered, self.cfg, batch)

    def _select_hooks(self, names_filter: NamesFilter) -> list[str]:
        if names_filter is None:
            return self.hook_names()
        if callable(names_filter):
            return [name for name in self.hook_dict if names_filter(name)]
        wanted = [names_filter] if isinstance(names_filter, str) else list(names_filter)
        self._check_hook_names(wanted)
        return [name for name in self.hook_dict if name in set(wanted)]

    def generate(
        self,
        inputs: ModelInput,
        *,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        batch_size: int = 256,
        use_cache: bool = True,
        return_cache: bool = False,
        names_filter: NamesFilter = None,
    ) -> Int[Tensor, "batch n"] | tuple[Int[Tensor, "batch n"], ActivationCache]:
        """Greedy-decode from ``>``; return the tokens ``[batch, n]`` (EOS included, PAD after it).

        Decodes incrementally (key/value cache) unless ``use_cache=False``, stopping when every row has
        emitted EOS or after ``max_new_tokens``. Answers in tasks are ignored. Without hooks attached, rows
        are decoded ``batch_size`` at a time, grouped by input length, finished rows dropped early. With
        hooks attached, all rows are decoded in one batch in input order (so batch-aligned hooks line up):
        encoder hooks fire once, decoder hooks once per step with one position (with ``use_cache=False``: every
        position so far). With ``return_cache=True`` also returns the `ActivationCache` of the decoded sequence
        (the decoder inputs that produced it, teacher-forced in one pass under the attached hooks; see
        ``decoder_input_from_generated``). Raises ValueError for a ``batch_size`` below 1, a ``max_new_tokens``
        outside 1..``cfg.max_len``, and with
        ``return_cache=True`` when the attached hooks make that pass answer otherwise than the decoding (a hook
        that indexes positions acts on the pass's last one, not on each step's new one).
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._check_max_new_tokens(max_new_tokens)
        with torch.no_grad():
            batch = to_token_batch(inputs, teacher_force=False).to(self.device)
            hooked = is_hooked(list(self.hook_points()))
            if hooked:
                tokens = self.greedy_decode(batch.src, max_new_tokens, use_cache, drop_finished=False)
            else:
                tokens = self._decode_by_length(batch.src, max_new_tokens, batch_size, use_cache)
            if not return_cache:
                return tokens
            # a PAD the model emitted was fed back unmasked; after a row's EOS the causal mask keeps PAD out of reach
            tgt = decoder_input_from_generated(tokens)
            logits, cache = self.run_with_cache(batch, tgt, names_filter=names_filter, mask_tgt_pad=False)
            if hooked:
                _check_cache_answers(logits, tokens)
            return tokens, cache

    def greedy_decode(
        self,
        src: Int[Tensor, "batch src_pos"],
        max_new_tokens: int,
        use_cache: bool = True,
        drop_finished: bool = True,
        memory: Float[Tensor, "batch src_pos d_model"] | None = None,
    ) -> Int[Tensor, "batch n"]:
        """Greedy-decode from ``>``; return ``[batch, n]`` tokens, EOS included and PAD after each row's EOS.

        Stops once every row has emitted EOS (``n`` <= ``max_new_tokens``). Rows are independent: a finished
        row is kept (its outputs masked) until enough rows have finished, then dropped from the caches (unless
        ``drop_finished=False``, which keeps the batch fixed for batch-aligned hooks). With ``use_cache=False``
        the whole decoder is re-run on all tokens so far at every step and no row is dropped. ``memory``: the
        encoder output of ``src`` already at hand (`encode`, e.g. under patching hooks), decoded from without
        running the encoder again.
        Raises ValueError when ``max_new_tokens`` is not positive or exceeds the position table.
        """
        self._check_max_new_tokens(max_new_tokens)
        with torch.no_grad():
            src_pad = src == PAD
            memory = self.encode(src) if memory is None else memory
            batch, device = src.shape[0], src.device
            outputs = torch.full((batch, max_new_tokens), PAD, dtype=torch.long, device=device)
            rows = torch.arange(batch, device=device)
            fed = torch.full((batch, max_new_tokens), ARROW, dtype=torch.long, device=device)
            done = torch.zeros(batch, dtype=torch.bool, device=device)
            if use_cache:
                cross_mask = key_mask(src_pad, memory.dtype)
                caches = self.new_decoder_caches(memory, max_new_tokens)
            for step in range(max_new_tokens):
                if use_cache:
                    logits = self.decode_step(fed[:, step], step, cross_mask, caches)
                else:
                    logits = self.decode(fed[:, : step + 1], memory, src_pad, mask_tgt_pad=False)[:, -1]
                token = logits.argmax(-1)
                outputs[rows, step] = token.masked_fill(done, PAD)
                done |= token == EOS
                if bool(done.all()):
                    return outputs[:, : step + 1]
                if step + 1 < max_new_tokens:
                    fed[:, step + 1] = token
                if use_cache and drop_finished and done.float().mean() >= _COMPACT_FRACTION:
                    keep = ~done
                    rows, fed, done, cross_mask = rows[keep], fed[keep], done[keep], cross_mask[keep]
                    caches = [(self_cache.select(keep), cross_cache.select(keep)) for self_cache, cross_cache in caches]
            return outputs

    def _check_max_new_tokens(self, max_new_tokens: int) -> None:
        if not 0 < max_new_tokens <= self.cfg.max_len:
            raise ValueError(f"max_new_tokens must be in 1..{self.cfg.max_len}, got {max_new_tokens}")

    def _decode_by_length(
        self, src: Int[Tensor, "batch src_pos"], max_new_tokens: int, batch_size: int, use_cache: bool
    ) -> Int[Tensor, "batch n"]:
        """Decode chunks of rows of similar length (less padding), trimmed of PAD columns; keep input order."""
        positions = torch.arange(1, src.shape[1] + 1, device=src.device)
        lengths = torch.where(src != PAD, positions, 0).max(dim=1).values
        order = torch.argsort(lengths, stable=True)
        tokens = torch.full((src.shape[0], max_new_tokens), PAD, dtype=torch.long, device=src.device)
        width = 1
        for start in range(0, src.shape[0], batch_size):
            rows = order[start : start + batch_size]
            chunk = self.greedy_decode(src[rows, : max(1, int(lengths[rows].max()))], max_new_tokens, use_cache)
            tokens[rows, : chunk.shape[1]] = chunk
            width = max(width, chunk.shape[1])
        return tokens[:, :width]

    def solve(
        self,
        tasks: Task | str | Sequence[Task | str],
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        batch_size: int = 256,
    ) -> str | list[str]:
        """Return the greedy answer of one task (a str) or of each task of a list (a list of str); a task may be
        given as its text (``"abc...z | ghi > ghj | bcd"``, `Task.parse`). Raises as `generate` does."""
        single = isinstance(tasks, (Task, str))
        tokens = self.generate(tasks, max_new_tokens=max_new_tokens, batch_size=batch_size)
        answers = decode_batch(tokens)
        return answers[0] if single else answers


def _check_cache_answers(logits: Float[Tensor, "batch tgt_pos vocab"], tokens: Int[Tensor, "batch n"]) -> None:
    """Raise ValueError when the teacher-forced pass behind ``generate``'s cache does not answer ``tokens`` (its
    greedy token at each decoded position up to the row's EOS)."""
    decoded = tokens[:, : logits.shape[1]]
    differ = (logits.argmax(-1) != decoded) & (decoded != PAD)
    if bool(differ.any()):
        rows = differ.any(1).nonzero().flatten().tolist()
        raise ValueError(
            f"the cache would not be of the decoded tokens: under the attached hooks the teacher-forced pass answers "
            f"rows {rows[:5]}{'...' if len(rows) > 5 else ''} otherwise (a hook that indexes positions acts on the "
            "pass's last one, not each step's new one); make the hooks position-independent or cache with "
            "run_with_cache on decoder_input_from_generated(tokens)"
        )
