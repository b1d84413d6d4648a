"""Quick checks that a habit can't pass, and the facts each exercise needs taught before it."""

from collections import Counter
from pathlib import Path

import pytest
import yaml

from app.lessons.course import load_course
from contracts.languages import LANGS
from tests.conftest import LESSONS

MOST_IN_ONE_PLACE = 0.4  # issue 44: 17 of 21 right answers were the first option


def _questions() -> list[dict]:
    return [
        q
        for path in sorted(LESSONS.glob("*/quiz.yaml"))
        for q in yaml.safe_load(path.read_text())["questions"]
    ]


def test_the_right_answer_s_place_varies_across_the_course():
    places = Counter(next(i for i, o in enumerate(q["options"]) if o["correct"]) for q in _questions())
    total = sum(places.values())
    assert total >= 15
    place, most = places.most_common(1)[0]
    assert most / total <= MOST_IN_ONE_PLACE, f"option {place + 1} is right in {most} of {total} questions"
    assert len(places) >= 3  # always picking one place fails most questions


@pytest.mark.parametrize("path", sorted(LESSONS.glob("*/quiz.yaml")), ids=lambda p: p.parent.name)
def test_no_lesson_puts_its_right_answers_first_by_habit(path):
    # issue 44: in lessons 1 and 3 every right answer was the first option; then lesson 3 still had 3 of 4
    questions = yaml.safe_load(path.read_text())["questions"]
    first = sum(q["options"][0]["correct"] for q in questions)
    assert first <= len(questions) // 2, f"{first} of {len(questions)} right answers are the first option"


# what each exercise needs and the words that teach it, in a core card it names (issue 44)
NEEDED = {
    "gpu-memory/fit-the-budget": {
        "en": "one checkpoint over the whole model brings the whole peak back",
        "pt-BR": "um checkpoint só em volta do modelo inteiro traz o pico inteiro de volta",
    },
    "gpu-memory/measure-it": {
        "en": "enabled=amp_dtype != torch.float32",
        "pt-BR": "enabled=amp_dtype != torch.float32",
    },
    "bottleneck/find-the-bottleneck": {
        "en": ["prof.key_averages()", "row.key", "row.cpu_time_total"],
        "pt-BR": ["prof.key_averages()", "row.key", "row.cpu_time_total"],
    },
    "gradient-accumulation/token-loss": {
        "en": "take the whole cycle from the loader first",
        "pt-BR": "pegue o ciclo inteiro do loader antes",
    },
    "bottleneck/read-the-gpu-trace": {
        "en": ["schedule(wait=", "prof.step()", "ProfilerStep#N"],
        "pt-BR": ["schedule(wait=", "prof.step()", "ProfilerStep#N"],
    },
}


@pytest.mark.parametrize("exercise_id", sorted(NEEDED))
@pytest.mark.parametrize("lang", LANGS)
def test_the_fact_an_exercise_needs_is_in_a_core_card_it_rests_on(exercise_id, lang):
    course = load_course(LESSONS)
    exercise = course.exercise(exercise_id)
    cards = [course.lesson(ref.lesson).text(lang).cards[ref.index] for ref in exercise.taught_in]
    wanted = NEEDED[exercise_id][lang]
    sources = [
        Path(course.lesson(ref.lesson).path, f"lesson.{lang}.md").read_text() for ref in exercise.taught_in
    ]
    assert all(not card.further for card in cards)
    for needed in [wanted] if isinstance(wanted, str) else wanted:
        assert any(
            needed in _section(source, card.heading_html) for source, card in zip(sources, cards, strict=True)
        ), f"{exercise_id}: no card it rests on says {needed!r}"


def _section(source: str, heading_html: str) -> str:
    """The Markdown of the card whose rendered heading is ``heading_html``."""
    import re

    plain = re.sub(r"<[^>]+>", "", heading_html)
    for section in source.split("\n## ")[1:]:
        title = section.splitlines()[0].replace("`", "").replace(" {.further}", "")
        if title == plain:
            return section
    raise AssertionError(f"no card {plain!r}")
