"""Smoke test of benchmarks/bench_redaction.py (issues 27 and 40): a small corpus, the figures
it reports, one round of turns stored over HTTP, what counts as caught, the split of the
wordings, and that the held-out part's misses are never printed."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import bench_redaction, redaction_dev, redaction_heldout
from benchmarks import redaction_corpus as corpus
from server.redaction import redact
from tests.fakes import fake_factory

SMALL = ["--secrets", "10", "--ordinary", "10", "--long-runs", "5", "--long-chars", "1000"]
SMALL += ["--field-chars", "2000", "--field-runs", "1"]


def test_bench_redaction_smoke(tmp_path: Path) -> None:
    argv = [*SMALL, "--store-rounds", "1", "--out", str(tmp_path)]
    result = bench_redaction.main(argv, progress=lambda _: None, encoder_factory=fake_factory)
    saved = json.loads((tmp_path / "redaction.json").read_text(encoding="utf-8"))
    assert saved["quality"] == result["quality"]
    assert "| secrets caught |" in (tmp_path / "redaction.md").read_text(encoding="utf-8")
    quality = result["quality"]
    assert list(quality["secrets"]) == list(corpus.SECRET_CLASSES)
    assert list(quality["ordinary"]) == list(corpus.ORDINARY_CLASSES)
    for rows in (quality["secrets"], quality["ordinary"]):
        assert all(row[p]["n"] == 10 for row in rows.values() for p in corpus.PARTS)
    # Round 1's classes on the wordings its rules were written against stay caught and left alone.
    old = [r["dev"] for k, r in quality["secrets"].items() if k in corpus.ROUND_1_CLASSES]
    assert sum(r["caught"] for r in old) >= 0.9 * sum(r["n"] for r in old)
    assert quality["ordinary"]["ordinary"]["dev"]["altered"] <= 1
    cost = result["cost"]
    assert quality["cost_us"]["p50"] > 0 and cost["long_turn"]["realistic"]["n"] == 5
    assert set(cost["field"]["shapes"]) == set(bench_redaction.field_shapes(100, 0))
    assert result["store"]["on_ms"] > 0 and result["store"]["off_ms"] > 0


def test_nothing_is_caught_when_nothing_is_redacted() -> None:
    result = bench_redaction.main(
        [*SMALL, "--store-rounds", "0"], progress=lambda _: None, redact_fn=lambda t, _: t
    )
    totals = result["quality"]["totals"]
    assert all(totals[p]["caught"] == 0 and totals[p]["altered"] == 0 for p in corpus.PARTS)


def test_misses_are_printed_for_the_dev_part_only() -> None:
    printed: list[str] = []
    bench_redaction.main(
        [*SMALL, "--store-rounds", "0", "--misses", "dev"],
        progress=printed.append,
        redact_fn=lambda text, _: text.replace("a", "b"),  # misses every secret, alters most
    )
    output = "\n".join(printed)
    turns = corpus.build(27, 10, 10)
    dev = [repr(t.text) for t in turns if t.part == "dev"]
    test = [repr(t.text) for t in turns if t.part == "test"]
    assert sum(text in output for text in dev) > len(dev) / 2
    assert not [text for text in test if text in output and not any(text in d for d in dev)]


def test_a_secret_counts_as_caught_only_when_every_form_of_it_is_gone() -> None:
    card = corpus.Turn("tarjeta 4111 1111 1111 1111", "card", "dev", "4111 1111 1111 1111",
                       "4111111111111111")  # fmt: skip
    assert corpus.caught(card, redact(card.text))
    assert corpus.caught(card, "tarjeta [tarjeta ••••1111]")
    assert not corpus.caught(card, card.text)
    assert not corpus.caught(card, "tarjeta 4111111111111111")
    assert not corpus.caught(card, "tarjeta 4111\u200b1111 1111-1111")
    assert not corpus.caught(card, "tarjeta \uff14\uff11\uff11\uff11 1111 1111 1111")
    assert not corpus.caught(card, "tarjeta \u0664\u0661\u0661\u0661 1111 1111 1111")
    phrase = corpus.Turn('clave "gato preto 42"', "password_phrase", "dev", "gato preto 42",
                         "gatopreto42", ("gato", "preto"))  # fmt: skip
    assert corpus.caught(phrase, 'clave "[contraseña]"')
    assert not corpus.caught(phrase, 'clave "[contraseña] preto 42"')


def test_every_class_has_two_parts_written_apart() -> None:
    for dev, test in (
        (redaction_dev.SECRETS, redaction_heldout.SECRETS),
        (redaction_dev.ORDINARY, redaction_heldout.ORDINARY),
    ):
        assert set(dev) == set(test)
        assert all(len(dev[k]) >= 10 and len(test[k]) >= 10 for k in dev)
    seen = {w for part in (redaction_dev.SECRETS, redaction_dev.ORDINARY) for v in part.values()
            for w in v}  # fmt: skip
    held_out = [w for part in (redaction_heldout.SECRETS, redaction_heldout.ORDINARY)
                for v in part.values() for w in v]  # fmt: skip
    assert not seen.intersection(held_out)
    for part in (redaction_dev.SECRETS, redaction_heldout.SECRETS):
        assert all(w.count("{s}") == 1 for v in part.values() for w in v)
    assert set(corpus.SECRET_VALUES) == set(redaction_dev.SECRETS)
