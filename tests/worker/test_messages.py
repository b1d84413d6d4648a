import re
import string
from pathlib import Path

import pytest

from contracts.languages import LANGS
from contracts.messages import Phrase, Sci, catalogue, number, render
from contracts.verdict import STATUSES
from tests.worker.conftest import GOLDEN

LESSONS = Path(__file__).resolve().parents[2] / "lessons"


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_text_exists_in_both_languages():
    for key, texts in catalogue().items():
        assert set(texts) == set(LANGS), key
        assert all(isinstance(t, str) and t.strip() for t in texts.values()), key


def test_both_languages_quote_the_same_numbers():
    for key, texts in catalogue().items():
        assert placeholders(texts["en"]) == placeholders(texts["pt-BR"]), key


def test_every_diagnosis_id_and_status_has_its_texts():
    ids = {p.stem for p in LESSONS.glob("*/exercises/*/mistakes/*.py")}
    ids |= {p.stem.split("--")[0] for p in GOLDEN.glob("*/*.py")} - {"pass", "fail"}
    keys = catalogue()
    for diagnosis in ids:
        assert f"diagnosis.{diagnosis}.title" in keys, diagnosis
        assert f"diagnosis.{diagnosis}.explanation" in keys, diagnosis
    for status in STATUSES:
        assert f"verdict.status.{status}" in keys


def test_numbers_follow_the_language():
    values = {"ratio": 4.0, "coefficient": 1.0, "share": 0.25, "k": 4}
    assert "4,00×" in render("diagnosis.loss-not-scaled.explanation", "pt-BR", values)
    assert "4.00×" in render("diagnosis.loss-not-scaled.explanation", "en", values)


def test_a_loss_left_undivided_with_a_short_last_cycle_is_told_what_that_cycle_is_divided_by():
    """remainder: dividing every loss by accum_steps, the short cycle too, is its next mistake."""
    short = Phrase("divide.short_cycle", {"k": 4, "left": 3})
    values = {"ratio": 4.0, "coefficient": 1.0, "share": 0.25, "k": short}
    en = render("diagnosis.loss-not-scaled.explanation", "en", values)
    assert "divide each loss by accum_steps (4, and by 3 in the short last cycle)" in en
    pt = render("diagnosis.loss-not-scaled.explanation", "pt-BR", values)
    assert "por accum_steps (4, e por 3 no último ciclo, mais curto)" in pt
    assert number(7232, "pt-BR") == "7.232"
    assert number([4, 4, 1], "en") == "4, 4, 1"


def test_tiny_and_huge_numbers_read_well_in_both_languages():
    assert number(Sci(1.1e-15), "en") == "1.1e-15"
    assert number(Sci(1.1e-15), "pt-BR") == "1,1e-15"
    assert number(Sci(3.0), "pt-BR") == "3,00"  # not 3,0E0
    assert number(Sci(4194304.0), "en") == "4.2e6"
    assert number(Sci(0.0), "en") == "0"  # not 0.00 beside 1.1e-15 (issue 44)
    assert number(float("nan"), "pt-BR") == "NaN"
    assert number(float("inf"), "en") == "∞"


PLURAL_NOUNS = re.compile(
    r"\b1 (times|steps|micro-batches|parameters|arguments|batches|updates|clips|samples|"
    r"vezes|passos|micro-lotes|parâmetros|argumentos|lotes|atualizações|chamadas|amostras|clippings)\b(?!/)"
)  # (not a rate: "1 samples/s" is a unit)


def test_a_count_of_one_takes_the_singular_in_every_message():
    """'ran 1 times' nowhere (issue 29, point 4): every count placeholder filled with 1."""
    for key, entry in catalogue().items():
        for lang in ("en", "pt-BR"):
            names = {name.split(".")[0] for _, name, _, _ in string.Formatter().parse(entry[lang]) if name}
            said = render(key, lang, dict.fromkeys(names, 1))
            assert not PLURAL_NOUNS.search(said), f"{key} ({lang}): {said}"


def test_counted_words_agree_with_their_numbers():
    once = {"steps": 1, "micro_batches": 4, "reference_steps": 1, "k": 4}
    assert render("diagnosis.step-every-micro-batch.explanation", "en", once).startswith(
        "optimizer.step() ran 1 time for"
    )
    twice = once | {"steps": 2}
    assert render("diagnosis.step-every-micro-batch.explanation", "pt-BR", twice).startswith(
        "optimizer.step() rodou 2 vezes"
    )
    assert render("diagnosis.step-every-micro-batch.explanation", "pt-BR", once | {"steps": 0}).startswith(
        "optimizer.step() rodou 0 vez"
    ), "pt-BR: 0 takes the singular, as the page's own plurals do"


def test_bytes_read_in_one_unit_system_in_messages_and_charts():
    """Issue 44: "58,324 bytes" in a message beside "57.0 KB" (KiB) in its chart."""
    from app.submissions.figures import size

    assert render("check.memory.passed", "en", {"peak": 58_324, "reference": 58_324}) == (
        "Peak activations saved for backward: 57.0 KiB; one micro-batch needs 57.0 KiB."
    )
    assert "57,0 KiB" in render("check.memory.passed", "pt-BR", {"peak": 58_324, "reference": 58_324})
    assert size(58_324) == "57.0 KiB"  # the chart's words, from the same function
    assert size(8 << 20) == "8.0 MiB", "a few MiB read in MiB, not as thousands of KiB"
    assert size(1.5 * (1 << 20)) == "1.5 MiB"
    assert render("check.memory.passed", "en", {"peak": 512, "reference": 20 << 20}).endswith(
        "512 B; one micro-batch needs 20.0 MiB."
    )
    for key, entry in catalogue().items():
        for lang in ("en", "pt-BR"):
            assert not re.search(r"\{\w+\} bytes", entry[lang]), f"{key} ({lang}) quotes raw bytes"


def test_a_kind_s_own_catalogue_is_read_and_a_key_lives_in_one_file(tmp_path, monkeypatch):
    import contracts.messages as messages

    shared, own = tmp_path / "messages.yaml", tmp_path / "chunked.yaml"
    shared.write_text('check.run.name: {en: "Run", pt-BR: "Execução"}\n', encoding="utf-8")
    own.write_text('check.chunks.name: {en: "Chunks", pt-BR: "Pedaços"}\n', encoding="utf-8")
    monkeypatch.setattr(messages, "CATALOGUES", (shared, own))
    messages.catalogue.cache_clear()
    try:
        assert render("check.chunks.name", "pt-BR") == "Pedaços"
        own.write_text('check.run.name: {en: "Ran", pt-BR: "Rodou"}\n', encoding="utf-8")
        messages.catalogue.cache_clear()
        with pytest.raises(ValueError, match="check.run.name"):
            messages.catalogue()
    finally:
        monkeypatch.undo()
        messages.catalogue.cache_clear()
