"""docs/hooks.md is generated from the model and up to date; the ordered hook names are pinned."""

from __future__ import annotations

from pathlib import Path

import pytest

from lsa_interp.model import HookedEncoderDecoder, ModelConfig
from lsa_interp.model.hooks_doc import main, render_hooks_doc

DOC = Path(__file__).resolve().parents[2] / "docs" / "hooks.md"

EXPECTED_HOOK_NAMES = [
    "encoder.hook_embed",
    "encoder.hook_pos_embed",
    "encoder.0.hook_resid_pre",
    "encoder.0.attn.hook_q",
    "encoder.0.attn.hook_k",
    "encoder.0.attn.hook_v",
    "encoder.0.attn.hook_attn_scores",
    "encoder.0.attn.hook_pattern",
    "encoder.0.attn.hook_z",
    "encoder.0.hook_attn_out",
    "encoder.0.ln1.hook_in",
    "encoder.0.hook_resid_mid",
    "encoder.0.mlp.hook_pre",
    "encoder.0.mlp.hook_post",
    "encoder.0.hook_mlp_out",
    "encoder.0.ln2.hook_in",
    "encoder.0.hook_resid_post",
    "encoder.1.hook_resid_pre",
    "encoder.1.attn.hook_q",
    "encoder.1.attn.hook_k",
    "encoder.1.attn.hook_v",
    "encoder.1.attn.hook_attn_scores",
    "encoder.1.attn.hook_pattern",
    "encoder.1.attn.hook_z",
    "encoder.1.hook_attn_out",
    "encoder.1.ln1.hook_in",
    "encoder.1.hook_resid_mid",
    "encoder.1.mlp.hook_pre",
    "encoder.1.mlp.hook_post",
    "encoder.1.hook_mlp_out",
    "encoder.1.ln2.hook_in",
    "encoder.1.hook_resid_post",
    "encoder.2.hook_resid_pre",
    "encoder.2.attn.hook_q",
    "encoder.2.attn.hook_k",
    "encoder.2.attn.hook_v",
    "encoder.2.attn.hook_attn_scores",
    "encoder.2.attn.hook_pattern",
    "encoder.2.attn.hook_z",
    "encoder.2.hook_attn_out",
    "encoder.2.ln1.hook_in",
    "encoder.2.hook_resid_mid",
    "encoder.2.mlp.hook_pre",
    "encoder.2.mlp.hook_post",
    "encoder.2.hook_mlp_out",
    "encoder.2.ln2.hook_in",
    "encoder.2.hook_resid_post",
    "encoder.ln_final.hook_out",
    "decoder.hook_embed",
    "decoder.hook_pos_embed",
    "decoder.0.hook_resid_pre",
    "decoder.0.attn.hook_q",
    "decoder.0.attn.hook_k",
    "decoder.0.attn.hook_v",
    "decoder.0.attn.hook_attn_scores",
    "decoder.0.attn.hook_pattern",
    "decoder.0.attn.hook_z",
    "decoder.0.hook_attn_out",
    "decoder.0.ln1.hook_in",
    "decoder.0.hook_resid_mid",
    "decoder.0.cross_attn.hook_q",
    "decoder.0.cross_attn.hook_k",
    "decoder.0.cross_attn.hook_v",
    "decoder.0.cross_attn.hook_attn_scores",
    "decoder.0.cross_attn.hook_pattern",
    "decoder.0.cross_attn.hook_z",
    "decoder.0.hook_cross_attn_out",
    "decoder.0.ln2.hook_in",
    "decoder.0.hook_resid_mid_cross",
    "decoder.0.mlp.hook_pre",
    "decoder.0.mlp.hook_post",
    "decoder.0.hook_mlp_out",
    "decoder.0.ln3.hook_in",
    "decoder.0.hook_resid_post",
    "decoder.1.hook_resid_pre",
    "decoder.1.attn.hook_q",
    "decoder.1.attn.hook_k",
    "decoder.1.attn.hook_v",
    "decoder.1.attn.hook_attn_scores",
    "decoder.1.attn.hook_pattern",
    "decoder.1.attn.hook_z",
    "decoder.1.hook_attn_out",
    "decoder.1.ln1.hook_in",
    "decoder.1.hook_resid_mid",
    "decoder.1.cross_attn.hook_q",
    "decoder.1.cross_attn.hook_k",
    "decoder.1.cross_attn.hook_v",
    "decoder.1.cross_attn.hook_attn_scores",
    "decoder.1.cross_attn.hook_pattern",
    "decoder.1.cross_attn.hook_z",
    "decoder.1.hook_cross_attn_out",
    "decoder.1.ln2.hook_in",
    "decoder.1.hook_resid_mid_cross",
    "decoder.1.mlp.hook_pre",
    "decoder.1.mlp.hook_post",
    "decoder.1.hook_mlp_out",
    "decoder.1.ln3.hook_in",
    "decoder.1.hook_resid_post",
    "decoder.2.hook_resid_pre",
    "decoder.2.attn.hook_q",
    "decoder.2.attn.hook_k",
    "decoder.2.attn.hook_v",
    "decoder.2.attn.hook_attn_scores",
    "decoder.2.attn.hook_pattern",
    "decoder.2.attn.hook_z",
    "decoder.2.hook_attn_out",
    "decoder.2.ln1.hook_in",
    "decoder.2.hook_resid_mid",
    "decoder.2.cross_attn.hook_q",
    "decoder.2.cross_attn.hook_k",
    "decoder.2.cross_attn.hook_v",
    "decoder.2.cross_attn.hook_attn_scores",
    "decoder.2.cross_attn.hook_pattern",
    "decoder.2.cross_attn.hook_z",
    "decoder.2.hook_cross_attn_out",
    "decoder.2.ln2.hook_in",
    "decoder.2.hook_resid_mid_cross",
    "decoder.2.mlp.hook_pre",
    "decoder.2.mlp.hook_post",
    "decoder.2.hook_mlp_out",
    "decoder.2.ln3.hook_in",
    "decoder.2.hook_resid_post",
    "decoder.ln_final.hook_out",
]


def test_hook_names_are_pinned_in_execution_order():
    assert HookedEncoderDecoder().hook_names() == EXPECTED_HOOK_NAMES


def test_hook_result_is_opt_in_and_follows_hook_z():
    names = HookedEncoderDecoder(ModelConfig(use_hook_result=True)).hook_names()
    added = [name for name in names if name not in EXPECTED_HOOK_NAMES]
    assert len(added) == 9 and all(name.endswith(".hook_result") for name in added)
    for name in added:
        assert names[names.index(name) - 1] == name.replace("hook_result", "hook_z")


def test_docs_hooks_md_is_up_to_date():
    text = render_hooks_doc()
    assert DOC.read_text() == text, "regenerate with: python -m lsa_interp.model.hooks_doc --out docs/hooks.md"
    for name in EXPECTED_HOOK_NAMES:
        assert f"| `{name}` | `[" in text


def test_main_writes_the_file(tmp_path, capsys):
    main(["--out", str(tmp_path / "hooks.md")])
    main([])
    assert (tmp_path / "hooks.md").read_text() == capsys.readouterr().out


def test_help_describes_the_command(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "Write ``docs/hooks.md``: every hook point of the model with its shape" in " ".join(
        capsys.readouterr().out.split()
    )
