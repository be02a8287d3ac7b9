"""``lsa-interp explore``: bad models and addresses it cannot listen on end with one line and exit code 2; the
server listens on 127.0.0.1."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from lsa_interp.cli import main
from lsa_interp.commands.explore import app_url


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_unknown_model_is_a_one_line_error(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        main(["explore", "--model", str(tmp_path / "empty"), "--port", str(_free_port())])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("lsa-interp: error: ") and "holds no model" in err and "Traceback" not in err


def test_a_mistyped_name_lists_the_shipped_names_in_one_line(capsys):
    """As every other command's --model does (it said '/cwd/copy200 holds no model')."""
    with pytest.raises(SystemExit) as exit_info:
        main(["explore", "--model", "copy200", "--port", str(_free_port())])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("lsa-interp: error: no checkpoint named or at 'copy200'; available names: ")
    assert "copy-200" in err and len(err.strip().splitlines()) == 1


def test_serves_on_localhost_by_default(monkeypatch, capsys):
    calls, port = {}, _free_port()
    monkeypatch.setattr("lsa_interp.explorer.serve", lambda catalogue, host, port: calls.update(host=host, port=port))
    with pytest.raises(SystemExit) as exit_info:
        main(["explore", "--model", "copy-200", "--port", str(port)])
    assert exit_info.value.code == 0
    assert calls == {"host": "127.0.0.1", "port": port}
    assert f"http://127.0.0.1:{port}/" in capsys.readouterr().out


def _free_ipv6_port() -> int | None:
    """A free port on ::1, or None where this machine has no IPv6 loopback."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
            return probe.getsockname()[1]
    except OSError:
        return None


def test_serves_on_an_ipv6_address(monkeypatch, capsys):
    """An address with a colon is checked as IPv6 (as an IPv4 name it is no address at all)."""
    port = _free_ipv6_port()
    if port is None:
        pytest.skip("no IPv6 loopback on this machine")
    calls = {}
    monkeypatch.setattr("lsa_interp.explorer.serve", lambda catalogue, host, port: calls.update(host=host, port=port))
    with pytest.raises(SystemExit) as exit_info:
        main(["explore", "--model", "copy-200", "--host", "::1", "--port", str(port)])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 0, err
    assert calls == {"host": "::1", "port": port}
    assert f"http://[::1]:{port}/ " in out  # a browser's address: an IPv6 host in brackets


def test_the_printed_address_brackets_an_ipv6_host_only():
    assert app_url("::1", 8050) == "http://[::1]:8050/"
    assert app_url("127.0.0.1", 80) == "http://127.0.0.1:80/"
    assert app_url("localhost", 8050) == "http://localhost:8050/"


def _unknown_name(host, port, *args):
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


@pytest.mark.parametrize(
    ("host", "taken", "reason"),
    [
        ("no-such-host.invalid", False, "--host 'no-such-host.invalid' --port {port}: Name or service not known"),
        ("192.0.2.1", False, "--host '192.0.2.1' --port {port}: " + os.strerror(errno.EADDRNOTAVAIL)),  # not here
        ("127.0.0.1", True, "--host '127.0.0.1' --port {port}: " + os.strerror(errno.EADDRINUSE)),
    ],
)
def test_an_address_it_cannot_listen_on_is_a_one_line_error_before_any_work(host, taken, reason, monkeypatch, capsys):
    def no_work(*args, **kwargs):
        raise AssertionError("the address is checked before the models are loaded and the server starts")

    monkeypatch.setattr("lsa_interp.explorer.explorer_catalogue", no_work)
    monkeypatch.setattr("lsa_interp.explorer.serve", no_work)
    if host.endswith(".invalid"):  # no name server asked
        monkeypatch.setattr(socket, "getaddrinfo", _unknown_name)
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1] if taken else _free_port()
        with pytest.raises(SystemExit) as exit_info:
            main(["explore", "--host", host, "--port", str(port)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("lsa-interp: error: cannot listen on ")
    assert reason.format(port=port) in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("weights", "model.safetensors is corrupted or truncated: SHA-256 "),
        ("config", "config.json is corrupted (not valid JSON: "),
    ],
)
def test_a_broken_model_named_on_the_command_line_is_refused_before_serving(
    breakage, message, tmp_path, monkeypatch, capsys
):
    """It was listed (config.json present) and the server started; the browser met the error later."""
    from lsa_interp.analysis.planted import planted_model
    from lsa_interp.model import save_model

    monkeypatch.setattr("lsa_interp.explorer.serve", lambda *a, **k: pytest.fail("the server started"))
    broken = save_model(planted_model(), tmp_path / "broken")
    if breakage == "weights":
        (broken / "model.safetensors").write_bytes(b"\0" * 64)
    else:
        (broken / "config.json").write_text("{not json")
    with pytest.raises(SystemExit) as exit_info:
        main(["explore", "--model", "copy-20", "--model", str(broken), "--port", str(_free_port())])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith(f"lsa-interp: error: {broken}") and message in err
