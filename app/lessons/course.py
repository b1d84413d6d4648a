"""The course as the web shows it: lesson, quiz and exercise files parsed, validated and rendered
once (Markdown and Pygments: app/lessons/markdown.py). What grading needs of an exercise is
contracts/exercise.py's, which the worker reads alone; this module's `Exercise` is that one with
its page added.

Layout (see docs/architecture.md, "Lesson folders"):
    lessons/<NN>-<slug>/lesson.<lang>.md    front matter + one `##` section per card
    lessons/<NN>-<slug>/quiz.yaml           questions, an explanation per option, both languages
    lessons/<NN>-<slug>/exercises/<slug>/   exercise.yaml, starter.py, solution.py, mistakes/
Any problem raises ContentError with a one-line message naming the file.

"Go further" cards: a card heading that ends with `{.further}` (`## Count tokens {.further}`) marks
a card beyond the lesson's core. Those cards come after every core card, in both languages alike;
the page shows them after the quick check (`LessonText.core_cards`, `LessonText.further_cards`).

Taught before tested: every quiz question and every exercise names the core cards that teach what
it asks (`taught_in:`, each a card of its own lesson by the anchor of its English heading, or of an
earlier lesson as `lesson-slug#anchor`). A name that is not a core card of this or an earlier
lesson is an error, so a question can never rest on a "Go further" card.

Claims proven by running: each lesson's claims.yaml lists what the lesson says about PyTorch's
behaviour, the card that says it, and a proof script beside the lesson (`proofs/*.py`, exit 0 when
the claim holds) that runs on the CPU or, for `device: cuda`, under `make gpu-check`.

The course ends with lessons/course.yaml: a recap of every lesson, in order, and where to go next.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from app.lessons.markdown import render_inline, render_markdown
from contracts.exercise import (
    EXERCISE_FILE,
    LESSON_DIR,
    SLUG,
    ContentError,
    GradedFile,
    Slug,
    exercise_folders,
    graded_fields,
    load_yaml,
    parse_yaml,
    read_text,
    validate,
)
from contracts.exercise import Exercise as GradedExercise
from contracts.languages import LANGS

CARD_REF = r"^(?:[a-z0-9]+(?:-[a-z0-9]+)*#)?[a-z0-9]+(?:-[a-z0-9]+)*$"  # anchor, or lesson-slug#anchor
COURSE_FILE = "course.yaml"
CLAIMS_FILE = "claims.yaml"
FENCE = re.compile(r"^(```|~~~)")
FURTHER = re.compile(r"\s*\{\.further\}\s*$")


# ---------------------------------------------------------------- file schemas

NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
CardRefText = Annotated[str, StringConstraints(pattern=CARD_REF)]
TaughtIn = Annotated[list[CardRefText], Field(min_length=1, max_length=6)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Texts(_Strict):
    """One text in every language of the course."""

    en: NonEmpty
    pt_BR: NonEmpty = Field(alias="pt-BR")

    def get(self, lang: str) -> str:
        return self.pt_BR if lang == "pt-BR" else self.en


class LessonMeta(_Strict):
    title: NonEmpty
    subtitle: NonEmpty
    summary: NonEmpty
    minutes: int = Field(ge=1, le=30)
    recap: list[NonEmpty] = Field(min_length=2, max_length=8)


class OptionFile(_Strict):
    id: Slug
    correct: bool
    text: Texts
    explanation: Texts


class QuestionFile(_Strict):
    id: Slug
    taught_in: TaughtIn
    prompt: Texts
    options: list[OptionFile] = Field(min_length=2, max_length=6)

    @field_validator("options")
    @classmethod
    def _one_correct_unique_ids(cls, options: list[OptionFile]) -> list[OptionFile]:
        if sum(o.correct for o in options) != 1:
            raise ValueError("exactly one option must be correct")
        _unique([o.id for o in options], "option id")
        return options


class QuizFile(_Strict):
    questions: list[QuestionFile] = Field(min_length=2)

    @field_validator("questions")
    @classmethod
    def _unique_ids(cls, questions: list[QuestionFile]) -> list[QuestionFile]:
        _unique([q.id for q in questions], "question id")
        return questions


class ExerciseFile(GradedFile):
    """exercise.yaml whole: what grading reads (contracts/exercise.py) and the page's texts."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    title: Texts
    prompt: Texts
    hints: list[Texts] = Field(min_length=3, max_length=3)
    taught_in: TaughtIn


class ClaimFile(_Strict):
    id: Slug
    card: CardRefText  # the card that makes the claim, in this lesson
    claim: NonEmpty  # what the proof shows, in one line (for course authors: English only)
    proof: Annotated[str, StringConstraints(pattern=r"^proofs/[a-z0-9_]+\.py$")]
    device: Literal["cpu", "cuda"] = "cpu"


class ClaimsFile(_Strict):
    claims: list[ClaimFile] = Field(min_length=1)

    @field_validator("claims")
    @classmethod
    def _unique_ids(cls, claims: list[ClaimFile]) -> list[ClaimFile]:
        _unique([c.id for c in claims], "claim id")
        _unique([c.proof for c in claims], "proof")
        return claims


class CourseFile(_Strict):
    """lessons/course.yaml: the end of the course."""

    next_title: Texts
    next: list[Texts] = Field(min_length=1, max_length=8)


def _unique(ids: list[str], what: str) -> None:
    seen: set[str] = set()
    for i in ids:
        if i in seen:
            raise ValueError(f"duplicate {what} {i!r}")
        seen.add(i)


# ---------------------------------------------------------------- the loaded course


@dataclass(frozen=True)
class Card:
    anchor: str
    heading_html: str
    body_html: str
    code_blocks: int
    further: bool = False  # a "Go further" card, shown after the quick check


@dataclass(frozen=True)
class LessonText:
    """A lesson in one language, rendered."""

    title: str
    subtitle: str
    summary: str
    summary_html: str
    minutes: int
    recap_html: tuple[str, ...]
    cards: tuple[Card, ...]

    @property
    def core_cards(self) -> tuple[Card, ...]:
        return tuple(card for card in self.cards if not card.further)

    @property
    def further_cards(self) -> tuple[Card, ...]:
        return tuple(card for card in self.cards if card.further)


@dataclass(frozen=True)
class CardRef:
    """A core card: the lesson it is in and its place among that lesson's cards."""

    lesson: str
    index: int
    anchor: str  # the English heading's anchor, as quiz.yaml and exercise.yaml name it


@dataclass(frozen=True)
class Claim:
    id: str
    card: CardRef
    text: str
    proof: Path
    device: str  # "cpu": `treino lessons check` runs it; "cuda": `make gpu-check` does


@dataclass(frozen=True)
class Closing:
    """The end of the course: where to go next (HTML), after each lesson's own recap."""

    next_title: dict[str, str]
    next: tuple[dict[str, str], ...]


@dataclass(frozen=True)
class Option:
    id: str
    correct: bool
    text_html: dict[str, str]
    explanation_html: dict[str, str]


@dataclass(frozen=True)
class Question:
    id: str
    prompt_html: dict[str, str]
    options: tuple[Option, ...]
    taught_in: tuple[CardRef, ...] = ()

    def option(self, option_id: str) -> Option | None:
        return next((o for o in self.options if o.id == option_id), None)

    @property
    def correct_option(self) -> Option:
        return next(o for o in self.options if o.correct)


@dataclass(frozen=True)
class Exercise(GradedExercise):
    """An exercise as grading reads it (contracts/exercise.py), with what its page shows."""

    title: dict[str, str]
    prompt: dict[str, str]
    hints: list[dict[str, str]]
    starter: str
    prompt_html: dict[str, str] = field(compare=False, repr=False, default_factory=dict)
    taught_in: tuple[CardRef, ...] = ()


@dataclass(frozen=True)
class Lesson:
    number: int
    slug: str
    path: Path
    texts: dict[str, LessonText]
    questions: tuple[Question, ...]
    exercises: tuple[Exercise, ...]
    claims: tuple[Claim, ...] = ()

    def text(self, lang: str) -> LessonText:
        return self.texts[lang]

    def question(self, question_id: str) -> Question | None:
        return next((q for q in self.questions if q.id == question_id), None)


@dataclass(frozen=True)
class Course:
    lessons: tuple[Lesson, ...]
    closing: Closing | None = None

    @property
    def claims(self) -> list[Claim]:
        return [claim for lsn in self.lessons for claim in lsn.claims]

    def lesson(self, slug: str) -> Lesson | None:
        return next((lsn for lsn in self.lessons if lsn.slug == slug), None)

    @property
    def exercises(self) -> list[Exercise]:
        return [ex for lsn in self.lessons for ex in lsn.exercises]

    def exercise(self, exercise_id: str) -> Exercise | None:
        return next((ex for ex in self.exercises if ex.id == exercise_id), None)

    def neighbours(self, lesson: Lesson) -> tuple[Lesson | None, Lesson | None]:
        i = self.lessons.index(lesson)
        prev = self.lessons[i - 1] if i > 0 else None
        nxt = self.lessons[i + 1] if i + 1 < len(self.lessons) else None
        return prev, nxt


# ---------------------------------------------------------------- loading


def load_course(root: Path) -> Course:
    if not root.is_dir():
        raise ContentError(f"{root}: lessons folder not found")
    lessons: list[Lesson] = []
    for path in sorted(p for p in root.iterdir() if p.is_dir()):
        match = LESSON_DIR.match(path.name)
        if not match:
            raise ContentError(f"{path}: lesson folders are named NN-slug (e.g. 02-gradient-accumulation)")
        lessons.append(_load_lesson(path, int(match[1]), match[2], lessons))
    if not lessons:
        raise ContentError(f"{root}: no lessons found")
    numbers = [lsn.number for lsn in lessons]
    if numbers != list(range(1, len(lessons) + 1)):
        raise ContentError(f"{root}: lessons must be numbered 01, 02, … without gaps (found {numbers})")
    return Course(tuple(lessons), _load_closing(root / COURSE_FILE))


def _load_closing(path: Path) -> Closing:
    spec = load_yaml(path, CourseFile)
    return Closing(
        next_title=_inline_texts(spec.next_title),
        next=tuple(_inline_texts(t) for t in spec.next),
    )


def _resolve(path: Path, where: str, ref: str, own: tuple[str, LessonText], earlier: list[Lesson]) -> CardRef:
    """A `taught_in` or claim name → the core card it names, in this lesson or an earlier one."""
    slug, text = own
    lesson_slug, _, anchor = ref.rpartition("#")
    if lesson_slug and lesson_slug != slug:
        found = next((lsn for lsn in earlier if lsn.slug == lesson_slug), None)
        if found is None:
            raise ContentError(f"{path}: {where}: {ref!r}: {lesson_slug!r} is not a lesson before this one")
        text = found.text(LANGS[0])
    cards = [card.anchor for card in text.cards]
    if anchor not in cards:
        raise ContentError(
            f"{path}: {where}: {ref!r} names no card of lesson {lesson_slug or slug} "
            f"(a card is named by its {LANGS[0]} heading's anchor: {', '.join(cards)})"
        )
    index = cards.index(anchor)
    if text.cards[index].further:
        raise ContentError(
            f'{path}: {where}: {ref!r} is a "Go further" card; what a quick check or an exercise asks '
            "is taught in a core card"
        )
    return CardRef(lesson_slug or slug, index, anchor)


def _load_lesson(path: Path, number: int, slug: str, earlier: list[Lesson]) -> Lesson:
    texts = {lang: _load_lesson_text(path / f"lesson.{lang}.md") for lang in LANGS}
    first, *others = LANGS
    for lang in others:
        _check_parallel(path / f"lesson.{lang}.md", texts[first], texts[lang])
    own = (slug, texts[first])
    quiz_path = path / "quiz.yaml"
    quiz = load_yaml(quiz_path, QuizFile)
    questions = tuple(
        Question(
            id=q.id,
            prompt_html=_inline_texts(q.prompt),
            options=tuple(
                Option(o.id, o.correct, _inline_texts(o.text), _inline_texts(o.explanation))
                for o in q.options
            ),
            taught_in=tuple(
                _resolve(quiz_path, f"questions.{i}.taught_in", ref, own, earlier) for ref in q.taught_in
            ),
        )
        for i, q in enumerate(quiz.questions)
    )
    exercises = tuple(_load_exercise(p, own, earlier) for p in exercise_folders(path))
    return Lesson(number, slug, path, texts, questions, exercises, _load_claims(path, own))


def _load_claims(path: Path, own: tuple[str, LessonText]) -> tuple[Claim, ...]:
    claims_path = path / CLAIMS_FILE
    spec = load_yaml(claims_path, ClaimsFile)
    claims = []
    for i, c in enumerate(spec.claims):
        proof = path / c.proof
        if not proof.is_file():
            raise ContentError(f"{claims_path}: claims.{i}.proof: {proof} is missing")
        where = f"claims.{i}.card"
        lesson_slug, _, anchor = c.card.rpartition("#")
        cards = [card.anchor for card in own[1].cards]
        if lesson_slug and lesson_slug != own[0] or anchor not in cards:
            raise ContentError(f"{claims_path}: {where}: {c.card!r} names no card of this lesson")
        index = cards.index(anchor)
        claims.append(Claim(c.id, CardRef(own[0], index, anchor), c.claim, proof, c.device))
    return tuple(claims)


def _load_lesson_text(path: Path) -> LessonText:
    source = read_text(path)
    if not source.startswith("---\n"):
        raise ContentError(f"{path}: must start with a '---' front matter block")
    end = source.find("\n---\n", 4)
    if end < 0:
        raise ContentError(f"{path}: front matter is not closed by a '---' line")
    meta = validate(path, LessonMeta, parse_yaml(path, source[4:end]))
    body = source[end + 5 :]
    sections = _split_cards(path, body)
    cards: list[Card] = []
    anchors: set[str] = set()
    for heading, text in sections:
        further = bool(FURTHER.search(heading))
        heading = FURTHER.sub("", heading)
        if cards and cards[-1].further and not further:
            raise ContentError(
                f'{path}: card {heading!r} comes after a {{.further}} card; "Go further" cards go last'
            )
        anchor = _anchor(heading, anchors)
        cards.append(
            Card(anchor, render_inline(heading), render_markdown(text), _count_fences(text), further)
        )
    return LessonText(
        meta.title,
        meta.subtitle,
        meta.summary,
        render_inline(meta.summary),
        meta.minutes,
        tuple(render_inline(r) for r in meta.recap),
        tuple(cards),
    )


def _split_cards(path: Path, body: str) -> list[tuple[str, str]]:
    """Split the body at `## ` lines outside code fences; anything before the first is an error."""
    cards: list[tuple[str, list[str]]] = []
    in_fence = False
    for lineno, line in enumerate(body.splitlines(), start=1):
        if FENCE.match(line):
            in_fence = not in_fence
        if not in_fence and line.startswith("#"):
            if not line.startswith("## ") or line.startswith("###"):
                raise ContentError(f"{path}: body line {lineno}: only '## ' card headings are allowed")
            cards.append((line[3:].strip(), []))
        elif cards:
            cards[-1][1].append(line)
        elif line.strip():
            raise ContentError(f"{path}: body line {lineno}: text before the first '## ' card")
    if in_fence:
        raise ContentError(f"{path}: a code fence is not closed")
    if not cards:
        raise ContentError(f"{path}: no '## ' cards")
    for heading, lines in cards:
        if not heading or not "".join(lines).strip():
            raise ContentError(f"{path}: card {heading!r} is empty")
    return [(heading, "\n".join(lines).strip() + "\n") for heading, lines in cards]


def _count_fences(text: str) -> int:
    return sum(1 for line in text.splitlines() if FENCE.match(line)) // 2


def _anchor(heading: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") or "card"
    anchor, n = base, 2
    while anchor in taken:
        anchor, n = f"{base}-{n}", n + 1
    taken.add(anchor)
    return anchor


def _check_parallel(path: Path, reference: LessonText, other: LessonText) -> None:
    if len(other.cards) != len(reference.cards):
        raise ContentError(
            f"{path}: {len(other.cards)} cards, but the {LANGS[0]} lesson has {len(reference.cards)}"
        )
    for i, (a, b) in enumerate(zip(reference.cards, other.cards, strict=True), start=1):
        if a.code_blocks != b.code_blocks:
            raise ContentError(
                f"{path}: card {i} has {b.code_blocks} code blocks, the {LANGS[0]} one {a.code_blocks}"
            )
        if a.further != b.further:
            raise ContentError(
                f"{path}: card {i} is {'' if b.further else 'not '}a {{.further}} card, "
                f"the {LANGS[0]} one is {'' if a.further else 'not '}one"
            )
    if len(other.recap_html) != len(reference.recap_html):
        raise ContentError(
            f"{path}: recap has {len(other.recap_html)} lines, the {LANGS[0]} one {len(reference.recap_html)}"
        )


def _load_exercise(path: Path, own: tuple[str, LessonText], earlier: list[Lesson]) -> Exercise:
    lesson_slug = own[0]
    if not re.match(SLUG, path.name):
        raise ContentError(f"{path}: exercise folders are named with a lowercase slug")
    spec_path = path / EXERCISE_FILE
    spec = load_yaml(spec_path, ExerciseFile)
    taught_in = tuple(_resolve(spec_path, "taught_in", ref, own, earlier) for ref in spec.taught_in)
    for required in ("starter.py", "solution.py"):
        if not (path / required).is_file():
            raise ContentError(f"{path / required}: missing")
    return Exercise(
        **graded_fields(spec, path, lesson_slug),
        title=_plain_texts(spec.title),
        prompt=_plain_texts(spec.prompt),
        hints=[_plain_texts(h) for h in spec.hints],
        starter=read_text(path / "starter.py"),
        prompt_html={lang: render_markdown(spec.prompt.get(lang)) for lang in LANGS},
        taught_in=taught_in,
    )


def _plain_texts(texts: Texts) -> dict[str, str]:
    return {lang: texts.get(lang) for lang in LANGS}


def _inline_texts(texts: Texts) -> dict[str, str]:
    return {lang: render_inline(texts.get(lang)) for lang in LANGS}
