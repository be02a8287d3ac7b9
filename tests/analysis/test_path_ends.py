"""The ends of a patched path: senders and receivers parsed with their inputs and positions, what each receiver can
read of its senders, and the paths and chains refused before anything runs."""

from __future__ import annotations

import pytest

from lsa_interp.analysis import path_ends as ends
from lsa_interp.model.config import ModelConfig

CFG = ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64)


def _sender(text):
    (sender,) = ends.parse_senders(text, CFG)
    return sender


def _receiver(text):
    return ends.parse_receiver(text, CFG)


@pytest.mark.parametrize(
    ("senders", "head", "reached"),
    [
        (["1.1"], "2.3", "qkv"),
        (["2.1"], "2.3", ""),
        (["2.1"], "1.3", ""),
        (["1.1"], "cross:1.2", "kv"),
        (["1.1"], "dec:2.2", ""),
        (["dec:1.1"], "cross:1.2", "q"),
        (["dec:1.1"], "dec:1.2", ""),
        (["cross:1.1"], "dec:2.2", "qkv"),
        (["cross:1.1", "1.2"], "cross:2.2", "qkv"),
        (["cross:2.1"], "cross:2.2", ""),
        (["1.1@5"], "2.3", "qkv"),
    ],
)
def test_what_each_receiver_can_read_of_its_senders(senders, head, reached):
    assert ends.reachable(CFG, [_sender(s) for s in senders], _receiver(head).head) == reached


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("2.3", "2.3/qkv"),
        ("2.3/v", "2.3/v"),
        ("cross:2.1/vk", "cross:2.1/kv"),
        (" dec:1.4/q ", "dec:1.4/q"),
        ("2.3/kv@33, 31,31", "2.3/kv@31,33"),
        ("2.3@5", "2.3/qkv@5"),
    ],
)
def test_receivers_are_parsed_with_their_inputs_in_q_k_v_order(text, label):
    assert _receiver(text).label == label
    assert _receiver("memory") == ends.MEMORY


@pytest.mark.parametrize(
    ("text", "label", "positions"),
    [("1.3", "1.3", None), (" 1.3@33, 31,31 ", "1.3@31,33", (31, 33)), ("dec:2.1@0", "dec:2.1@0", (0,))],
)
def test_senders_are_parsed_with_their_positions(text, label, positions):
    sender = _sender(text)
    assert (sender.label, sender.positions) == (label, positions)
    assert ends.labels([sender, _receiver("2.3/v"), ends.MEMORY]) == [label, "2.3/v", "memory"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2.3/x", "bad receiver '2.3/x': after '/' give some of q, k, v"),
        ("2.3/qq", "bad receiver '2.3/qq'"),
        ("2.3/", "bad receiver '2.3/'"),
        ("3.1/v", "no head '3.1' in this model"),
        ("mem", "bad head 'mem'"),
        ("2.3/v@", "bad receiver '2.3/v@': after '@' give 0-based positions"),
        ("2.3/v@a", "after '@' give 0-based positions, e.g. '3.7/kv@31,33'"),
        ("2.3/v@３", "after '@' give 0-based positions"),
    ],
)
def test_bad_receivers_are_refused_naming_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        _receiver(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.3@", "bad sender '1.3@': after '@' give 0-based positions, e.g. '1.3@31,33'"),
        ("1.3@-1", "bad sender '1.3@-1': after '@'"),
        ("1.3/v", "bad head '1.3/v'"),
        ("3.1@2", "no head '3.1' in this model"),
        ("memory", "bad head 'memory'"),
    ],
)
def test_bad_senders_are_refused_naming_what_is_allowed(text, message):
    with pytest.raises(ValueError, match=message):
        _sender(text)


@pytest.mark.parametrize(
    ("senders", "receivers", "message"),
    [
        (["1.1@5", "1.1@6"], ["2.1"], "senders repeat a head: 1.1@5, 1.1@6; give each head once"),
        (
            ["1.1@5"],
            ["2.1/v@6,7"],
            r"receiver 2.1/v@6,7: its v reads none of the positions its senders write \(1.1@5\)",
        ),
        (["1.1@5", "1.2@7"], ["cross:2.1/kv@7"], None),
        (["1.1@5", "1.2"], ["2.1@6"], None),
        (["1.1@5", "dec:1.1"], ["cross:2.1@7"], r"receiver cross:2.1/qkv@7: its k reads none .* \(1.1@5\)"),
        (["1.1@5", "dec:1.1@7"], ["cross:2.1/q@7"], None),
        (["dec:1.1@0"], ["dec:2.2/q@1"], r"its q reads none of the positions its senders write \(dec:1.1@0\)"),
        (["1.1@5"], ["memory"], None),
        (["1.1"], ["memory", "dec:1.2/q"], r"receiver dec:1.2/q: no sender reaches its q"),  # checked after the memory
    ],
)
def test_a_receiver_must_read_a_position_its_senders_write(senders, receivers, message):
    """Between heads a path stays at its position: a receiver at positions its reaching senders do not write is
    refused, one that shares a position with one of them (or any sender at all positions) is not."""
    check = lambda: ends.check_paths(CFG, [_sender(s) for s in senders], [_receiver(r) for r in receivers])
    if message is None:
        check()
    else:
        with pytest.raises(ValueError, match=message):
            check()


def test_a_layers_heads_are_named_with_a_star():
    assert ends.parse_senders("1.*@31", CFG) == [ends.Sender(h, (31,)) for h in _all("1.1", "1.2", "1.3", "1.4")]
    receivers = ends.parse_receivers("cross:2.*/vk@3", CFG)
    assert [r.label for r in receivers] == [f"cross:2.{h}/kv@3" for h in range(1, 5)]
    assert ends.parse_receivers(" memory ", CFG) == [ends.MEMORY] and ends.parse_senders("2.2", CFG) == [_sender("2.2")]
    assert ends.short_labels(_all("1.4", "1.2", "2.1", "1.3", "1.1"), CFG.n_heads) == ["1.*", "2.1"]
    with pytest.raises(ValueError, match=r"bad receiver '2.\*/v': name one head here, not a layer's heads"):
        _receiver("2.*/v")
    two_heads = ModelConfig(d_model=32, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, d_mlp=64)
    with pytest.raises(ValueError, match="name one head here"):
        ends.parse_receiver("2.*/v", two_heads)  # a layer of two heads is two heads too
    with pytest.raises(ValueError, match=r"bad heads '3.\*': no head '3.1' in this model"):
        ends.parse_senders("3.*", CFG)


def _all(*texts):
    return [_sender(text).head for text in texts]


@pytest.mark.parametrize(
    ("texts", "short"),
    [
        (["1.1", "1.2", "1.3", "1.4"], ["1.*/qkv"]),
        (["1.1", "1.2", "1.3"], ["1.1/qkv", "1.2/qkv", "1.3/qkv"]),
        (["2.1/kv@3", "2.2/kv@3", "memory", "2.3/kv@3", "2.4/kv@3"], ["2.*/kv@3", "memory"]),
        (["2.1/kv", "2.2/kv", "2.3/kv", "2.4/v"], ["2.1/kv", "2.2/kv", "2.3/kv", "2.4/v"]),
        (["cross:1.1", "cross:1.2", "cross:1.3", "cross:1.4", "dec:1.1"], ["cross:1.*/qkv", "dec:1.1/qkv"]),
    ],
)
def test_short_labels_write_a_layers_receivers_given_alike_once(texts, short):
    assert ends.short_labels([_receiver(t) for t in texts], CFG.n_heads) == short


@pytest.mark.parametrize(
    ("texts", "short"),
    [
        (["1.1@3", "1.2@3", "1.3@3", "1.4@3"], ["1.*@3"]),
        (["1.1@3", "1.2@3", "1.3@3", "1.4@2"], ["1.1@3", "1.2@3", "1.3@3", "1.4@2"]),
        (["cross:1.1", "cross:1.2", "2.4", "cross:1.3", "cross:1.4"], ["cross:1.*", "2.4"]),
    ],
)
def test_short_labels_write_a_layers_senders_given_alike_once(texts, short):
    assert ends.short_labels([_sender(t) for t in texts], CFG.n_heads) == short


@pytest.mark.parametrize(
    ("senders", "through", "receivers", "message"),
    [
        (["1.1"], [[]], ["2.1"], "a hop of a chain needs at least one receiver"),
        (["1.1"], [["memory"]], ["cross:1.1/kv"], "the memory ends a path: give it as a receiver, not as a hop"),
        (["2.1"], [["1.3"]], ["memory"], "receiver 1.3/qkv: no sender reaches its q/k/v"),
        (["1.1"], [["2.*"]], ["2.1"], r"receiver 2.1/qkv: no sender reaches its q/k/v .* \(it reads nothing of 2.\*\)"),
        (["1.1"], [["2.1/q", "2.1/kv"]], ["memory"], None),
        (["1.1"], [["cross:1.*/kv"]], ["dec:2.1/v"], None),
    ],
)
def test_chains_that_cannot_run_are_refused(senders, through, receivers, message):
    """Each step of a chain is checked as a path: the senders into the first hop, a hop's heads (once each, at all
    positions) into the next, the last into the receivers."""
    hops = [[r for text in hop for r in ends.parse_receivers(text, CFG)] for hop in through]
    check = lambda: ends.check_chain(CFG, [_sender(s) for s in senders], hops, [_receiver(r) for r in receivers])
    if message is None:
        check()
    else:
        with pytest.raises(ValueError, match=message):
            check()
