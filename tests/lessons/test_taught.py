"""Taught before tested, claims proven by running, and the course's closing recap."""

import shutil
from pathlib import Path

import pytest

from app.lessons.course import ContentError, load_course
from app.lessons.proofs import prove
from contracts.languages import LANGS
from tests.conftest import LESSONS


@pytest.fixture(scope="module")
def course():
    return load_course(LESSONS)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
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
    return str(e.value)


def _walk(course, owner_lesson: str, refs) -> list[str]:
    """Each name → the card it names; the card must be core, in this lesson or an earlier one."""
    order = [lsn.slug for lsn in course.lessons]
    headings = []
    assert refs, f"{owner_lesson}: nothing is declared as taught"
    for ref in refs:
        assert order.index(ref.lesson) <= order.index(owner_lesson), ref
        for lang in LANGS:
            card = course.lesson(ref.lesson).text(lang).cards[ref.index]
            assert not card.further, (ref, lang, card.heading_html)
        headings.append(course.lesson(ref.lesson).text("en").cards[ref.index].heading_html)
    return headings


def test_every_quick_check_question_is_taught_in_a_core_card_before_it(course):
    for lesson in course.lessons:
        for question in lesson.questions:
            _walk(course, lesson.slug, question.taught_in)


def test_every_exercise_is_taught_in_core_cards_of_its_lesson_or_earlier(course):
    for exercise in course.exercises:
        _walk(course, exercise.lesson, exercise.taught_in)


def test_what_the_issue_found_untaught_is_now_in_the_core(course):
    # the short last cycle, the scheduler, the spawn guard, torch.compile, empty_cache, Adam's state
    taught = {
        ("gradient-accumulation", "last-short-cycle"): "The last, incomplete cycle",
        ("gradient-accumulation", "scheduler-with-accumulation"): "The scheduler counts updates",
        ("bottleneck", "spawn-guard"): "Workers import your script",
        ("bottleneck", "compile-first-step"): "A new shape compiles again",
        ("gpu-memory", "empty-cache"): "<code>empty_cache()</code> frees no live tensor",
        ("gpu-memory", "peak-with-adam"): "Measure after Adam's state exists",
    }
    for (slug, question_id), heading in taught.items():
        question = course.lesson(slug).question(question_id)
        assert heading in _walk(course, slug, question.taught_in), question_id
    remainder = course.exercise("gradient-accumulation/remainder")
    assert "The last, incomplete cycle" in _walk(course, "gradient-accumulation", remainder.taught_in)


def test_a_question_resting_on_a_go_further_card_is_refused(copy):
    path = copy / "02-gradient-accumulation" / "quiz.yaml"
    _break(path, 'taught_in: ["the-last-incomplete-cycle"]', 'taught_in: ["no-sync-under-ddp"]')
    message = _error(copy)
    assert message.startswith(f"{path}: questions.2.taught_in: 'no-sync-under-ddp' is a \"Go further\" card")


def test_a_name_that_is_no_card_is_refused_with_the_names_there_are(copy):
    path = copy / "01-mixed-precision" / "exercises" / "amp-loop" / "exercise.yaml"
    _break(path, '"the-call-order"', '"the-call-ordre"')
    message = _error(copy)
    assert message.startswith(f"{path}: taught_in: 'the-call-ordre' names no card of lesson mixed-precision")
    assert "the-call-order" in message


def test_an_exercise_cannot_rest_on_a_later_lesson(copy):
    path = copy / "01-mixed-precision" / "exercises" / "amp-loop" / "exercise.yaml"
    _break(path, '"the-call-order"', '"bottleneck#warm-up-first"')
    assert "'bottleneck' is not a lesson before this one" in _error(copy)


def test_an_undeclared_topic_is_refused(copy):
    path = copy / "03-bottleneck" / "quiz.yaml"
    declared = '    taught_in: ["input-bound-the-same-batch-test", "the-wait-in-next-is-only-an-upper-bound"]'
    _break(path, declared + "\n", "")
    message = _error(copy)
    assert message.startswith(f"{path}: questions.1.taught_in: Field required")


def test_the_course_ends_saying_where_to_go_next(course):
    closing = course.closing
    assert closing is not None
    for lang in LANGS:
        assert closing.next_title[lang]
        assert len(closing.next) >= 3 and all(item[lang] for item in closing.next)


# ---------------------------------------------------------------- claims


def test_every_lesson_makes_claims_each_with_a_proof_beside_it(course):
    for lesson in course.lessons:
        assert lesson.claims, lesson.slug
        for claim in lesson.claims:
            assert claim.proof.parent == lesson.path / "proofs" and claim.proof.is_file()
            assert claim.card.lesson == lesson.slug
    proofs = {p for lsn in course.lessons for p in (lsn.path / "proofs").glob("*.py")}
    assert proofs == {claim.proof for claim in course.claims}, "a proof no claim lists"


def test_a_claim_naming_a_missing_proof_is_refused(copy):
    (copy / "01-mixed-precision" / "proofs" / "grad_scaler.py").unlink()
    message = _error(copy)
    assert message.startswith(f"{copy / '01-mixed-precision' / 'claims.yaml'}: claims.2.proof: ")


def test_a_broken_proof_fails_and_says_where(copy, course):
    lesson = load_course(copy).lesson("mixed-precision")
    assert lesson is not None
    claim = lesson.claims[0]
    _break(claim.proof, "assert half.max == 65504", "assert half.max == 65505")
    good = next(c for c in course.claims if c.id == "backward-adds")
    broken, fine = prove([claim, good])
    assert not broken.ok and "line 7: assert half.max == 65505: AssertionError" in broken.error
    assert fine.ok
