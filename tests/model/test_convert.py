"""Reference checkpoint conversion: strict key mapping, position-table layouts, clear errors."""

from __future__ import annotations

import zipfile

import pytest
import torch

from lsa_interp.data.tokenizer import encode_tasks
from lsa_interp.model import ModelConfig, convert_reference_state_dict, load_model
from lsa_interp.model.convert import (
    _rename,
    hooked_from_reference,
    infer_reference_config,
    load_reference_checkpoint,
)
from lsa_interp.model.reference import ReferenceTransformer, save_reference_checkpoint

CFG = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=3, d_mlp=48, max_len=64, dropout=0.0)


@pytest.fixture(scope="module")
def reference() -> ReferenceTransformer:
    torch.manual_seed(0)
    return ReferenceTransformer(CFG).eval()


def test_loads_a_reference_checkpoint_file_and_matches_its_logits(reference, make_tasks, tmp_path):
    path = tmp_path / "run.pt"
    save_reference_checkpoint(reference, path, loss_hist=[2.5, 1.25])
    model = load_model(path)
    assert model.cfg == CFG and not model.training
    assert model.metadata["loss_hist"] == [2.5, 1.25] and model.metadata["mlc_config"]["nhead"] == 4
    batch = encode_tasks(make_tasks(4, seed=1))
    with torch.no_grad():
        torch.testing.assert_close(model(batch), reference(batch.src, batch.tgt_in), atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", ["[1, max_len, d]", "[max_len, 1, d]", "[max_len, d]"])
def test_position_table_layouts_are_accepted(reference, layout):
    state = dict(reference.state_dict())
    table = state["positional_encoding.pos_embedding"].reshape(64, 32)
    state["positional_encoding.pos_embedding"] = {
        "[1, max_len, d]": table[None],
        "[max_len, 1, d]": table[:, None],
        "[max_len, d]": table,
    }[layout]
    assert infer_reference_config(state, n_heads=4, dropout=0.0) == CFG
    converted = convert_reference_state_dict(state, CFG)
    assert torch.equal(converted["pos_embedding"], table)
    original = state["transformer.decoder.layers.2.multihead_attn.in_proj_weight"]
    assert torch.equal(converted["decoder.2.cross_attn.in_proj_weight"], original)
    assert converted["decoder.2.cross_attn.in_proj_weight"].data_ptr() != original.data_ptr()


def test_wrong_position_table_shape_is_rejected(reference):
    state = dict(reference.state_dict())
    state["positional_encoding.pos_embedding"] = torch.zeros(2, 64, 32)
    with pytest.raises(ValueError, match=r"expected \[max_len, 32\]"):
        infer_reference_config(state)


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda s: s.update({"transformer.encoder.layers.0.extra.weight": torch.zeros(1)}), "unknown keys"),
        (lambda s: s.update({"transformer.encoder.layers.0.norm3.weight": torch.zeros(32)}), "unknown keys"),
        (lambda s: s.pop("transformer.decoder.layers.1.norm3.bias"), "missing keys"),
        (lambda s: s.update({"out.bias": torch.zeros(31)}), "shape mismatches"),
    ],
)
def test_conversion_is_strict(reference, edit, message):
    state = dict(reference.state_dict())
    edit(state)
    with pytest.raises(ValueError, match=message):
        convert_reference_state_dict(state, CFG)


NOT_A_CHECKPOINT = (
    " is not a checkpoint (not a torch.save file); a model is a shipped checkpoint name, a checkpoint directory "
    "(config.json, model.safetensors), a training run directory or a reference .pt"
)


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("garbage.pt", b"this is not a checkpoint at all"),
        ("metrics.jsonl", b'{"type": "epoch", "val_acc": 0.5}\n'),  # was: 'holds Python objects other than tensors'
        ("notes.txt", b"epoch 1\n"),  # was: 'is not a PyTorch checkpoint (KeyError: 101)'
        ("bytes.bin", bytes(range(256))),
        ("empty.pt", b""),
    ],
)
def test_a_file_torch_save_did_not_write_is_plainly_not_a_checkpoint(name, content, tmp_path):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError) as info:
        load_model(path)
    assert str(info.value) == f"{path}{NOT_A_CHECKPOINT}"


def test_both_formats_torch_save_writes_are_read_as_torch_files(tmp_path):
    """A zip archive, or the legacy format's pickle; a zip of something else is a foreign PyTorch file."""
    for zipped in (True, False):
        path = tmp_path / f"plain-{zipped}.pt"
        torch.save({"weights": torch.zeros(2)}, path, _use_new_zipfile_serialization=zipped)
        with pytest.raises(ValueError, match="expected a dict with 'net_state_dict'"):
            load_model(path)
    archive = tmp_path / "other.zip"
    with zipfile.ZipFile(archive, "w") as other:
        other.writestr("readme.txt", "hello")
    with pytest.raises(ValueError, match=r"other\.zip is not a PyTorch checkpoint \("):
        load_model(archive)


def test_not_a_checkpoint_gives_clear_errors(tmp_path):
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    with pytest.raises(ValueError, match="expected a dict with 'net_state_dict'"):
        load_model(plain)
    foreign = tmp_path / "foreign.pt"
    torch.save({"net_state_dict": {"layer.weight": torch.zeros(2)}}, foreign)
    with pytest.raises(ValueError, match="not a reference state dict"):
        load_model(foreign)
    with pytest.raises(FileNotFoundError):
        load_reference_checkpoint(tmp_path / "absent.pt")


def test_pickled_objects_need_an_explicit_opt_in(reference, tmp_path):
    path = tmp_path / "pickled.pt"
    save_reference_checkpoint(reference, path, train_config=ModelConfig())
    with pytest.raises(ValueError, match="weights_only=False"):
        load_model(path)
    assert load_reference_checkpoint(path, weights_only=False).cfg.n_decoder_layers == 3


def test_hooked_from_reference_keeps_weights_device_mode_and_the_random_stream(reference, make_tasks):
    """The hooked copy answers as the reference does, keeps its train/eval mode, and draws no random numbers."""
    batch = encode_tasks(make_tasks(4, seed=2))
    torch.manual_seed(7)
    expected_next = torch.rand(3)
    torch.manual_seed(7)
    hooked = hooked_from_reference(reference.train())
    assert torch.equal(torch.rand(3), expected_next)
    assert hooked.training and hooked.device == reference.out.weight.device
    hooked.eval()
    with torch.no_grad():
        torch.testing.assert_close(hooked(batch), reference.eval()(batch.src, batch.tgt_in), atol=1e-5, rtol=0)
    assert not hooked_from_reference(reference).training


def test_checkpoint_without_configs_defaults_to_8_heads_and_dropout_0_1(tmp_path):
    """Heads and dropout are not in the weights: without mlc/train configs they default to 8 and 0.1."""
    torch.manual_seed(0)
    reference = ReferenceTransformer(ModelConfig(d_model=16, n_heads=8, n_encoder_layers=1, n_decoder_layers=1))
    path = tmp_path / "bare.pt"
    torch.save({"net_state_dict": reference.state_dict()}, path)
    model = load_reference_checkpoint(path)
    assert model.cfg.n_heads == 8 and model.cfg.dropout == 0.1
    assert load_reference_checkpoint(path, n_heads=2).cfg.n_heads == 2


def test_heads_and_dropout_are_read_from_the_train_config_too(reference, tmp_path):
    """``nhead`` and ``dropout`` are taken from ``mlc_config`` first, else from ``train_config``."""
    path = tmp_path / "train_config.pt"
    save_reference_checkpoint(reference, path, mlc_config={"emb_size": 32}, train_config={"nhead": 2, "dropout": 0.25})
    cfg = load_reference_checkpoint(path).cfg
    assert cfg.n_heads == 2 and cfg.dropout == 0.25
    save_reference_checkpoint(reference, path, mlc_config={"nhead": 4, "dropout": 0.0}, train_config={"nhead": 2})
    cfg = load_reference_checkpoint(path).cfg
    assert cfg.n_heads == 4 and cfg.dropout == 0.0


@pytest.mark.parametrize(
    ("section", "key", "value", "wanted"),
    [
        ("train_config", "dropout", None, "a number in [0, 1)"),
        ("train_config", "dropout", 1.0, "a number in [0, 1)"),
        ("train_config", "dropout", -0.1, "a number in [0, 1)"),
        ("train_config", "dropout", float("nan"), "a number in [0, 1)"),
        ("train_config", "dropout", "0.1", "a number in [0, 1)"),
        ("mlc_config", "dropout", True, "a number in [0, 1)"),
        ("train_config", "nhead", None, "a positive integer"),
        ("train_config", "nhead", 0, "a positive integer"),
        ("train_config", "nhead", 4.0, "a positive integer"),
        ("train_config", "nhead", "4", "a positive integer"),
        ("mlc_config", "nhead", True, "a positive integer"),
    ],
)
def test_unusable_heads_or_dropout_in_the_configs_name_the_key_and_the_file(
    reference, tmp_path, section, key, value, wanted
):
    """Was a TypeError from float(None), a silent int('4') or int(4.0), or a config error naming no file."""
    path = tmp_path / "bad.pt"
    configs = {"mlc_config": {"emb_size": 32}, "train_config": {}}  # no nhead/dropout but the one under test
    configs[section][key] = value
    save_reference_checkpoint(reference, path, **configs)
    with pytest.raises(ValueError) as info:
        load_model(path)
    assert str(info.value) == f"{path}: {section}[{key!r}] must be {wanted}, got {value!r}"


def test_heads_that_do_not_divide_the_width_name_the_file(reference, tmp_path):
    path = tmp_path / "three.pt"
    save_reference_checkpoint(reference, path, mlc_config={"nhead": 3})
    with pytest.raises(ValueError) as info:
        load_model(path)
    assert str(info.value) == f"{path}: d_model=32 is not divisible by n_heads=3"


def test_the_bounds_of_heads_and_dropout_are_taken(reference, tmp_path):
    """One head and dropout 0 (an int: JSON-like configs write 0) are allowed; so is an explicit n_heads over them."""
    path = tmp_path / "bounds.pt"
    save_reference_checkpoint(reference, path, mlc_config={"nhead": 1}, train_config={"dropout": 0})
    cfg = load_reference_checkpoint(path).cfg
    assert (cfg.n_heads, cfg.dropout) == (1, 0.0) and isinstance(cfg.dropout, float)
    assert load_reference_checkpoint(path, n_heads=4).cfg.n_heads == 4


def test_loaded_checkpoint_metadata_names_its_source_and_path(reference, tmp_path):
    """The loaded model's metadata records the source format and file path next to the checkpoint's entries."""
    path = tmp_path / "run.pt"
    save_reference_checkpoint(reference, path, val_acc_hist=[0.5])
    metadata = load_reference_checkpoint(path).metadata
    assert metadata["source"] == "reference checkpoint" and metadata["path"] == str(path)
    assert metadata["val_acc_hist"] == [0.5] and "net_state_dict" not in metadata


def test_hooked_from_reference_keeps_the_given_metadata(reference):
    """The hooked copy carries the metadata it was given."""
    assert hooked_from_reference(reference, metadata={"step": 3}).metadata == {"step": 3}


def test_encoder_layers_have_no_cross_attention_or_third_norm():
    """Reference names of encoder cross-attention or a third encoder norm have no hooked name."""
    assert _rename("transformer.encoder.layers.0.multihead_attn.in_proj_weight") is None
    assert _rename("transformer.encoder.layers.1.norm3.bias") is None
    assert (
        _rename("transformer.decoder.layers.1.multihead_attn.in_proj_weight") == "decoder.1.cross_attn.in_proj_weight"
    )
    assert _rename("transformer.decoder.layers.0.norm3.bias") == "decoder.0.ln3.bias"
    assert _rename("transformer.encoder.layers.2.self_attn.out_proj.weight") == "encoder.2.attn.out_proj.weight"


def test_an_unknown_key_does_not_stop_the_conversion_of_the_others(reference):
    """Every key is converted even after an unknown one: the error lists only the unknown key."""
    state = {"transformer.encoder.layers.0.extra.weight": torch.zeros(1), **reference.state_dict()}
    with pytest.raises(ValueError, match="unknown keys") as error:
        convert_reference_state_dict(state, CFG)
    assert "missing keys" not in str(error.value) and "shape mismatches" not in str(error.value)


def test_a_position_table_of_the_wrong_width_is_rejected(reference):
    """A 2-D table whose width is not d_model is rejected when the config is inferred."""
    state = dict(reference.state_dict())
    state["positional_encoding.pos_embedding"] = torch.zeros(64, 16)
    with pytest.raises(ValueError, match=r"expected \[max_len, 32\]"):
        infer_reference_config(state)


def test_a_reference_without_decoder_layers_is_rejected(reference):
    """Layer counts come from the keys: no decoder layer keys means zero decoder layers, which is invalid."""
    state = {key: value for key, value in reference.state_dict().items() if ".decoder.layers." not in key}
    with pytest.raises(ValueError, match="at least one"):
        infer_reference_config(state, n_heads=4)


def test_inferred_config_defaults_to_8_heads_and_dropout_0_1_and_reads_the_vocabulary_size():
    """Without heads/dropout, infer_reference_config assumes 8 and 0.1; the vocabulary size comes from the weights."""
    torch.manual_seed(0)
    small = ReferenceTransformer(
        ModelConfig(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, vocab_size=40)
    )
    cfg = infer_reference_config(small.state_dict())
    assert (cfg.n_heads, cfg.dropout, cfg.vocab_size, cfg.d_model) == (8, 0.1, 40, 16)


def test_a_layer_the_config_does_not_have_is_an_unknown_key(reference):
    """A reference key naming a layer beyond the config is reported by name as unknown."""
    state = dict(reference.state_dict())
    state["transformer.decoder.layers.7.norm1.weight"] = torch.ones(32)
    with pytest.raises(ValueError, match=r"unknown keys \['transformer.decoder.layers.7.norm1.weight'\]"):
        convert_reference_state_dict(state, CFG)


def test_converted_weights_take_the_model_dtype(reference):
    """A half-precision reference state dict converts to the hooked model's float32 tensors."""
    state = {key: value.half() for key, value in reference.state_dict().items()}
    converted = convert_reference_state_dict(state, CFG)
    assert {value.dtype for value in converted.values()} == {torch.float32}


def test_a_two_dimensional_table_is_used_as_is_even_with_one_row(reference):
    """A [max_len, d_model] table is not squeezed: a one-row table gives max_len 1."""
    state = dict(reference.state_dict())
    state["positional_encoding.pos_embedding"] = torch.zeros(1, 32)
    assert infer_reference_config(state, n_heads=4).max_len == 1
