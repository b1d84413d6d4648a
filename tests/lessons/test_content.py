"""The course files: the real course is complete, and a broken file is named in one line."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from app.lessons.course import ContentError, load_course
from contracts.languages import LANGS
from tests.conftest import LESSONS

EXPECTED = [
    "mixed-precision",
    "gradient-accumulation",
    "bottleneck",
    "gpu-memory",
    "model-memory",
    "long-sequences",
]


@pytest.fixture(scope="module")
def real_course():
    return load_course(LESSONS)


def test_the_course_has_its_six_lessons_in_order(real_course):
    assert [lesson.slug for lesson in real_course.lessons] == EXPECTED
    assert [lesson.number for lesson in real_course.lessons] == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("lang", LANGS)
def test_every_lesson_is_short_cards_with_a_recap_and_two_questions(real_course, lang):
    for lesson in real_course.lessons:
        text = lesson.text(lang)
        assert 5 <= text.minutes <= 10, (lesson.slug, text.minutes)  # LESSONS.md: 5–10 minutes
        assert len(text.cards) >= 6, lesson.slug
        assert len(text.recap_html) >= 3, lesson.slug
        assert len(lesson.questions) >= 2, lesson.slug
        for question in lesson.questions:
            assert question.prompt_html[lang]
            assert sum(o.correct for o in question.options) == 1
            assert all(o.explanation_html[lang] for o in question.options)


def _reading_minutes(path: Path, lang: str) -> float:
    """About 200 words a minute over the summary, the core cards and the recap, plus each quick
    check: its prompt, its options and the right answer's explanation, and a quarter minute to think."""
    front, body = (path / f"lesson.{lang}.md").read_text()[4:].split("\n---\n", 1)
    meta = yaml.safe_load(front)
    cards = re.split(r"^## ", body, flags=re.M)[1:]
    words = sum(len(card.split()) for card in cards if "{.further}" not in card.splitlines()[0])
    words += len(meta["summary"].split()) + sum(len(line.split()) for line in meta["recap"])
    questions = yaml.safe_load((path / "quiz.yaml").read_text())["questions"]
    for q in questions:
        right = next(o for o in q["options"] if o["correct"])
        words += len(q["prompt"][lang].split()) + len(right["explanation"][lang].split())
        words += sum(len(o["text"][lang].split()) for o in q["options"])
    return words / 200 + len(questions) / 4


@pytest.mark.parametrize("lang", LANGS)
def test_a_lesson_s_minutes_are_the_time_it_takes_to_read(real_course, lang):
    # the folded "Go further" cards are read by choice and not counted
    for lesson in real_course.lessons:
        estimate = _reading_minutes(lesson.path, lang)
        assert abs(lesson.text(lang).minutes - estimate) <= 1.5, (lesson.slug, round(estimate, 1))
        assert estimate <= 10, (lesson.slug, round(estimate, 2))  # read aloud, not only declared


def _lesson_source(lang: str) -> str:
    return (LESSONS / "02-gradient-accumulation" / f"lesson.{lang}.md").read_text()


@pytest.mark.parametrize("lang", LANGS)
def test_the_core_lesson_carries_the_pattern_and_its_parts(lang):
    source = _lesson_source(lang)
    for snippet in [
        "for step, batch in enumerate(loader):",  # the zeroing card's loop; the exercise's is the learner's
        "loss = loss_fn(model(x), y) / accum_steps",  # in the scale card's prose (test_transfer)
        "loss.backward()",
        "if (step + 1) % accum_steps == 0:",
        "optimizer.step()",
        "optimizer.zero_grad()",
        "if step % accum_steps == 0:",
        "no_sync()",
        "clip_grad_norm_",
        "unscale_",
        "BatchNorm",
    ]:
        assert snippet in source, f"core lesson ({lang}) lacks {snippet!r}"


def test_the_core_quiz_asks_when_to_step(real_course):
    question = real_course.lesson("gradient-accumulation").questions[0]
    assert "optimizer.step()" in question.prompt_html["en"]
    assert (
        "(step + 1) % 4 == 0"
        in question.correct_option.text_html["en"] + question.correct_option.explanation_html["en"]
    )
    assert len(question.options) >= 3


def test_code_is_highlighted(real_course):
    card = next(c for c in real_course.lesson("gradient-accumulation").text("en").cards if c.code_blocks)
    assert '<pre class="highlight"' in card.body_html
    assert '<span class="k">for</span>' in card.body_html or '<span class="kn">' in card.body_html


# ---------------------------------------------------------------- broken files


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A writable copy of the real course to break."""
    target = tmp_path / "lessons"
    shutil.copytree(LESSONS, target)
    return target


def _break(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def _error(root: Path) -> str:
    with pytest.raises(ContentError) as e:
        load_course(root)
    message = str(e.value)
    assert "\n" not in message
    return message


def test_missing_translation_of_a_lesson_is_named(copy):
    (copy / "03-bottleneck" / "lesson.pt-BR.md").unlink()
    assert _error(copy) == f"{copy / '03-bottleneck' / 'lesson.pt-BR.md'}: missing"


def test_a_card_missing_in_one_language_is_named(copy):
    path = copy / "01-mixed-precision" / "lesson.pt-BR.md"
    text = path.read_text()
    cut = text.rindex("\n## ")
    path.write_text(text[:cut] + "\n")
    message = _error(copy)
    assert message.startswith(f"{path}: ") and "cards, but the en lesson has" in message


def test_front_matter_problems_are_named(copy):
    path = copy / "02-gradient-accumulation" / "lesson.en.md"
    _break(path, "minutes:", "minuts:")
    message = _error(copy)
    assert message.startswith(f"{path}: ") and "minutes" in message


def test_invalid_yaml_is_named_with_its_line(copy):
    path = copy / "04-gpu-memory" / "quiz.yaml"
    path.write_text("questions:\n  - id: [unclosed\n")
    assert _error(copy).startswith(f"{path}: line ")


def test_quiz_text_missing_portuguese_is_named(copy):
    path = copy / "01-mixed-precision" / "quiz.yaml"
    text = path.read_text()
    start = text.index("pt-BR:")
    end = text.index("\n", start)
    path.write_text(text[:start] + "pt_BR:" + text[start + 6 : end] + text[end:])
    message = _error(copy)
    assert message.startswith(f"{path}: questions.0.prompt")


def test_two_correct_options_are_refused(copy):
    path = copy / "03-bottleneck" / "quiz.yaml"
    path.write_text(path.read_text().replace("correct: false", "correct: true", 1))
    assert "exactly one option must be correct" in _error(copy)


def test_text_before_the_first_card_is_refused(copy):
    path = copy / "02-gradient-accumulation" / "lesson.en.md"
    _break(path, "\n## ", "\nstray words\n\n## ")
    assert "text before the first '## ' card" in _error(copy)


def test_a_badly_named_folder_is_refused(copy):
    (copy / "5-extra").mkdir()
    assert "lesson folders are named NN-slug" in _error(copy)


def _treino(*args: str, lessons: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {
        "PATH": "/usr/bin:/bin",
        "TREINO_LESSONS_DIR": str(lessons),
        "TREINO_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
    }
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,  # the CPU claims' proofs alone took 108 s here at load 13
    )


def test_lessons_check_validates_the_content(copy, tmp_path):
    # the exercises' own proofs (minutes of grading) run in `make test` and the golden tests
    for lesson in copy.iterdir():
        shutil.rmtree(lesson / "exercises", ignore_errors=True)
    result = _treino("lessons", "check", lessons=copy, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr
    questions = sum(len(lesson.questions) for lesson in load_course(copy).lessons)
    assert questions >= 6 * 3  # a quick check of at least three questions per lesson
    assert result.stdout.startswith(
        f"treino: 6 lessons, {questions} quick-check questions, 0 exercises: content OK"
    )


def test_a_broken_lesson_stops_lessons_check_and_serve_with_one_line(copy, tmp_path):
    path = copy / "02-gradient-accumulation" / "lesson.pt-BR.md"
    path.write_text("no front matter here\n")
    for command in (["lessons", "check"], ["serve", "--port", "1"]):
        result = _treino(*command, lessons=copy, tmp_path=tmp_path)
        assert result.returncode == 1
        assert result.stderr == f"treino: {path}: must start with a '---' front matter block\n"


@pytest.mark.parametrize("lang", LANGS)
def test_go_further_cards_come_after_the_core(real_course, lang):
    text = real_course.lesson("gradient-accumulation").text(lang)
    assert text.minutes <= 10
    further = text.further_cards
    assert len(further) == 4 and text.cards[-len(further) :] == further
    assert "further" not in "".join(card.heading_html + card.anchor for card in text.cards)
    assert len(text.core_cards) == len(text.cards) - len(further)


def test_a_core_card_after_a_go_further_card_is_refused(copy):
    lesson = copy / "02-gradient-accumulation" / "lesson.en.md"
    _break(lesson, "## `no_sync()` under DDP {.further}", "## `no_sync()` under DDP")
    assert "comes after a {.further} card" in _error(copy)


def test_go_further_marks_must_agree_between_languages(copy):
    lesson = copy / "02-gradient-accumulation" / "lesson.pt-BR.md"
    heading = "## Micro-lotes de tamanhos diferentes"
    _break(lesson, f"{heading} {{.further}}", heading)
    assert "card 17 is not a {.further} card, the en one is one" in _error(copy)
