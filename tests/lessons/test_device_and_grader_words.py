"""Two words of the pt-BR glossary the brief for issue 44 names: the device is "dispositivo" and the
grader "avaliador" in every Portuguese text a learner reads (lessons, quick checks, exercises,
verdict messages, the interface). lessons/glossary.yaml does not list them yet; this test holds
them with the same machinery `treino lessons check` uses for the glossary's words."""

from pathlib import Path

import yaml

from app.i18n import po_path
from app.lessons import glossary
from contracts.messages import CATALOGUES
from tests.conftest import LESSONS

TERMS = [
    {"pt-BR": "dispositivo", "en": "device", "refuse": ["device", "devices"]},
    # "corretor" also reads as "the one who fixes": the glossary's reason for "avaliar"
    {"pt-BR": "avaliador", "en": "grader", "refuse": ["corretor", "corretores", "grader", "graders"]},
]


def _words(tmp_path: Path) -> glossary.Glossary:
    terms = yaml.safe_load((LESSONS / glossary.GLOSSARY_FILE).read_text(encoding="utf-8"))["terms"]
    known = {t["pt-BR"] for t in terms}
    path = tmp_path / glossary.GLOSSARY_FILE
    path.write_text(yaml.safe_dump({"terms": terms + [t for t in TERMS if t["pt-BR"] not in known]}))
    return glossary.load(path)


def test_portuguese_says_dispositivo_and_avaliador(tmp_path):
    assert _words(tmp_path).problems(LESSONS, *CATALOGUES, po_path("pt-BR")) == []


def test_a_planted_device_or_corretor_is_named(tmp_path):
    lesson = tmp_path / "lessons" / "03-bottleneck"
    lesson.mkdir(parents=True)
    (lesson / "quiz.yaml").write_text(
        'a: {en: "the device", pt-BR: "o device roda atrás"}\nb: {en: "grader", pt-BR: "o corretor viu"}\n'
        'c: {en: "code", pt-BR: "`device=\\"cuda\\"` no código"}\n',
        encoding="utf-8",
    )
    problems = _words(tmp_path).problems(tmp_path / "lessons")
    assert len(problems) == 2, problems
    assert '"device" is not the course\'s word' in problems[0] and "dispositivo" in problems[0]
    assert '"corretor" is not the course\'s word' in problems[1] and "avaliador" in problems[1]
