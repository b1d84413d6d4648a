"""One Portuguese word per concept: lessons/glossary.yaml, enforced by `treino lessons check`."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.i18n import po_path
from app.lessons import glossary
from contracts.messages import CATALOGUES
from tests.conftest import LESSONS

WORDS = glossary.load(LESSONS / glossary.GLOSSARY_FILE)


@pytest.fixture
def course(tmp_path: Path) -> Path:
    copy = tmp_path / "lessons"
    shutil.copytree(LESSONS, copy)
    return copy


def test_every_portuguese_text_of_the_course_uses_the_glossary_words():
    assert WORDS.problems(LESSONS, *CATALOGUES, po_path("pt-BR")) == []


def _plant(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


@pytest.mark.parametrize(
    ("where", "old", "new", "variant"),
    [
        (
            "02-gradient-accumulation/lesson.pt-BR.md",
            "Divida o lote e some os gradientes",
            "Divida o batch e some os gradientes",
            "batch",
        ),
        (
            "02-gradient-accumulation/quiz.yaml",
            'pt-BR: "Depois do `backward()` de cada micro-lote"',
            'pt-BR: "Depois do `backward()` de cada mini lote"',
            "mini lote",
        ),
        (
            "02-gradient-accumulation/exercises/accumulate/exercise.yaml",
            'pt-BR: "O PyTorch soma',
            'pt-BR: "No laço, o PyTorch soma',
            "laço",
        ),
        (
            "01-mixed-precision/lesson.pt-BR.md",
            "Envolva só o forward e a perda",
            "Envolva só o forward e a Loss",
            "Loss",
        ),
    ],
)
def test_a_planted_variant_is_named_with_its_file(course, where, old, new, variant):
    _plant(course / where, old, new)
    problems = WORDS.problems(course)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{course / where}: ")
    assert f'"{variant}" is not the course\'s word' in problems[0]


def test_verdict_messages_and_ui_strings_are_checked_too(tmp_path):
    messages = tmp_path / "messages.yaml"
    messages.write_text(
        'check.x: {en: "Your loop", pt-BR: "Seu laço"}\n'
        'check.y: {en: "Clipped", pt-BR: "Os gradientes foram cortados"}\n',
        encoding="utf-8",
    )
    catalog = tmp_path / "messages.po"
    catalog.write_text(
        'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
        'msgid "%(num)d cards read"\nmsgstr "%(num)d cartões lidos"\n',
        encoding="utf-8",
    )
    empty = tmp_path / "no-lessons"
    empty.mkdir()
    problems = WORDS.problems(empty, messages, catalog)
    assert [p.split(": ")[0:2] for p in problems] == [
        [str(messages), "check.x"],
        [str(messages), "check.y"],
        [str(catalog), "msgstr of '%(num)d cards read'"],
    ]


def test_code_placeholders_and_the_english_gloss_are_not_variants(course):
    lesson = course / "02-gradient-accumulation" / "lesson.pt-BR.md"
    _plant(
        lesson,
        "Divida o lote e some os gradientes",
        "Divida o lote (batch) e some os gradientes com `loss.backward()`",
    )
    _plant(
        lesson,
        "accum_steps = 4        # micro-lotes por atualização",
        "accum_steps = 4        # micro-batches: the loss of each",
    )
    assert WORDS.problems(course) == []


def test_lessons_check_fails_on_a_variant_with_one_line_naming_the_file(course, tmp_path):
    quiz = course / "03-bottleneck" / "quiz.yaml"
    _plant(quiz, 'pt-BR: "Você mede', 'pt-BR: "No laço, você mede')
    env = {
        "PATH": "/usr/bin:/bin",
        "TREINO_LESSONS_DIR": str(course),
        "TREINO_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}",
    }
    result = subprocess.run(
        [sys.executable, "-m", "worker.cli", "lessons", "check"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    named = [line for line in result.stderr.splitlines() if str(quiz) in line]
    assert len(named) == 1 and '"laço" is not the course\'s word; write "loop"' in named[0]
    assert "content OK" not in result.stdout  # stopped before the slow proofs
