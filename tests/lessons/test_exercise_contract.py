"""What the worker reads of the exercises (contracts/exercise.py) is what the web's course reads
of them (app/lessons/course.py): the same exercises, the same check, entry and limits."""

import dataclasses

import pytest

from app.config import ROOT
from app.lessons.course import load_course
from contracts.exercise import ContentError, Exercise, load_exercises

LESSONS = ROOT / "lessons"


def test_the_worker_and_the_web_read_the_same_exercises():
    graded = load_exercises(LESSONS).exercises
    pages = load_course(LESSONS).exercises
    assert [ex.id for ex in graded] == [ex.id for ex in pages] and len(graded) >= 10
    for ex, page in zip(graded, pages, strict=True):
        assert isinstance(page, Exercise)
        assert ex == Exercise(**{f.name: getattr(page, f.name) for f in dataclasses.fields(Exercise)})


def test_an_exercise_whose_check_is_broken_is_refused_naming_its_file(tmp_path):
    folder = tmp_path / "01-first" / "exercises" / "only"
    folder.mkdir(parents=True)
    (folder / "exercise.yaml").write_text("entry: train\ncheck: {kind: Not_A_Slug}\n", encoding="utf-8")
    with pytest.raises(ContentError, match=r"only/exercise.yaml: check.kind"):
        load_exercises(tmp_path)
