"""``lsa-interp explore``: bad models end with one line and exit code 2; the server listens on 127.0.0.1."""

from __future__ import annotations

import pytest

from lsa_interp.cli import main


def test_unknown_model_is_a_one_line_error(capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_info:
        main(["explore", "--model", str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("lsa-interp: error: ") and "holds no model" in err and "Traceback" not in err


def test_serves_on_localhost_by_default(monkeypatch, capsys):
    calls = {}
    monkeypatch.setattr("lsa_interp.explorer.serve", lambda catalogue, host, port: calls.update(host=host, port=port))
    with pytest.raises(SystemExit) as exit_info:
        main(["explore", "--model", "copy-200", "--port", "8123"])
    assert exit_info.value.code == 0
    assert calls == {"host": "127.0.0.1", "port": 8123}
    assert "http://127.0.0.1:8123/" in capsys.readouterr().out
