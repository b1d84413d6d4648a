"""`make tutor-eval`: ask the configured tutor (TREINO_TUTOR_URL, _MODEL, _API_KEY; without a URL,
the test model on a llama.cpp server of its own) about a fixed set of learner situations, each a
wrong loop from the course's mistakes/ with the verdict `treino check --json` gave it (cached in
bench/tutor_situations.json; `--refresh` grades them again), in English and in Portuguese, and
score every answer with rubric checks that need no model:

- names: it names the diagnosed mistake or a failed check (a word of the diagnosis's title, of a
  failed check's name, or of the mistake's id, in the learner's language);
- lang: it is written in the learner's language (common-word counts);
- no solution: it reproduces none of the reference solution's unseen lines (app/tutor/guard.py).

Prints a table (and the model, time to first token and tokens/s) to compare models."""

import argparse
import asyncio
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from app.config import ROOT, Settings
from app.lessons.course import Course, load_course
from app.submissions import present
from app.tutor import client, grounding, guard

CACHE = ROOT / "bench" / "tutor_situations.json"
SITUATIONS = [  # (exercise id, mistake id)
    ("gradient-accumulation/accumulate", "loss-not-scaled"),
    ("gradient-accumulation/accumulate", "zero-grad-every-micro-batch"),
    ("gradient-accumulation/accumulate", "step-every-micro-batch"),
    ("mixed-precision/amp-loop", "no-scaler"),
    ("mixed-precision/amp-loop", "clip-before-unscale"),
    ("gradient-accumulation/remainder", "remainder-dropped"),
]
QUESTION = {"en": "Why does my loop fail?", "pt-BR": "Por que o meu loop falha?"}
COMMON = {
    "en": {"the", "is", "and", "you", "to", "of", "your", "it", "that", "this", "with", "are", "not"},
    "pt-BR": {"o", "a", "os", "as", "é", "e", "você", "de", "do", "da", "que", "não", "para", "um",
              "uma", "seu", "sua", "com", "em", "no", "na"},
}  # fmt: skip
WORD = re.compile(r"[\wÀ-ÿ]+", re.UNICODE)


def mistake_file(course: Course, exercise_id: str, mistake: str) -> Path:
    exercise = course.exercise(exercise_id)
    assert exercise is not None, exercise_id
    return Path(exercise.path) / "mistakes" / f"{mistake}.py"


def grade_all(course: Course) -> dict:
    """Every situation's verdict in both languages, as `treino check --json` prints it."""
    out: dict = {}
    for exercise_id, mistake in SITUATIONS:
        path = mistake_file(course, exercise_id, mistake)
        for lang in ("en", "pt-BR"):
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "worker.cli",
                    "check",
                    exercise_id,
                    str(path),
                    "--json",
                    "--lang",
                    lang,
                ],
                capture_output=True,
                text=True,
                cwd=ROOT,
            )
            out[f"{exercise_id}:{mistake}:{lang}"] = json.loads(run.stdout)
            print(
                f"graded {exercise_id} {mistake} ({lang}): {out[f'{exercise_id}:{mistake}:{lang}']['status']}"
            )
    return out


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def in_language(answer: str, lang: str) -> bool:
    found = words(answer)
    other = "en" if lang == "pt-BR" else "pt-BR"
    return sum(w in COMMON[lang] for w in found) > sum(w in COMMON[other] for w in found)


def names_mistake(answer: str, verdict: dict, mistake: str) -> bool:
    said = set(words(answer)) | set(re.findall(r"[\w.]+", answer.lower()))
    wanted = set(re.split(r"[-_]", mistake))
    if d := verdict.get("diagnosis"):
        wanted |= set(words(d.get("title", "")))
    for check in verdict.get("checks", []):
        if check.get("status") == "failed":
            wanted |= set(words(check.get("name", "")))
    wanted = {w for w in wanted if len(w) >= 5}  # not "the", "de", "loss"
    return bool(wanted & said)


async def ask(settings: Settings, messages: list[dict[str, str]]) -> tuple[str, float | None, float, int]:
    usage = client.Usage()
    start = time.monotonic()
    first = None
    pieces = []
    try:
        async for text in client.chat(settings, messages, usage):
            if first is None:
                first = time.monotonic() - start
            pieces.append(text)
    except client.Unavailable as e:
        return f"[unavailable: {e}]", first, time.monotonic() - start, usage.completion_tokens
    return "".join(pieces), first, time.monotonic() - start, usage.completion_tokens


def evaluate(settings: Settings, course: Course, verdicts: dict) -> int:
    terms = grounding.glossary(settings.lessons_dir)
    rows: list[dict[str, Any]] = []
    for exercise_id, mistake in SITUATIONS:
        exercise = course.exercise(exercise_id)
        assert exercise is not None
        code = mistake_file(course, exercise_id, mistake).read_text()
        known = [
            exercise.starter,
            code,
            *exercise.prompt.values(),
            *(t for h in exercise.hints for t in h.values()),
        ]
        secrets = guard.secret_lines(present.solution(exercise), known)
        for lang in ("en", "pt-BR"):
            verdict = verdicts[f"{exercise_id}:{mistake}:{lang}"]
            situation = grounding.Situation(
                lang=lang, exercise=exercise, code=code, question=QUESTION[lang], verdict=verdict
            )
            answer, first, took, tokens = asyncio.run(ask(settings, grounding.messages(situation, terms)))
            rows.append(
                {
                    "situation": f"{exercise.slug}/{mistake}",
                    "lang": lang,
                    "names": names_mistake(answer, verdict, mistake),
                    "language": in_language(answer, lang),
                    "no_solution": guard.overlap(answer, secrets) == 0,
                    "first": first,
                    "tokens": tokens,
                    "rate": tokens / max(0.001, took - (first or 0)),
                    "answer": answer,
                }
            )
            print(f"  {rows[-1]['situation']} ({lang}): {answer[:100]!r}", file=sys.stderr)
    yes = {True: "yes", False: "no"}
    print(f"\nmodel: {settings.tutor_model} at {client.base_url(settings)}\n")
    print(
        "| situation | lang | names the mistake | learner's language | avoids the solution "
        "| first token | tokens | tokens/s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        shown = f"{r['first'] * 1000:.0f} ms" if r["first"] is not None else "-"
        print(
            f"| {r['situation']} | {r['lang']} | {yes[r['names']]} | {yes[r['language']]} | "
            f"{yes[r['no_solution']]} | {shown} | {r['tokens']} | {r['rate']:.1f} |"
        )
    n = len(rows)
    score = {k: sum(r[k] for r in rows) for k in ("names", "language", "no_solution")}
    print(
        f"| **all {n}** | | {score['names']}/{n} | {score['language']}/{n} | {score['no_solution']}/{n} |||"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make tutor-eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--refresh", action="store_true", help="grade the mistakes again (treino check)")
    parser.add_argument("--max-tokens", type=int, default=160)
    args = parser.parse_args(argv)
    settings = Settings()
    course = load_course(settings.lessons_dir)
    if args.refresh or not CACHE.exists():
        CACHE.write_text(json.dumps(grade_all(course), ensure_ascii=False, indent=1) + "\n")
    verdicts = json.loads(CACHE.read_text())
    settings = settings.model_copy(update={"tutor_max_tokens": args.max_tokens})
    if settings.tutor_url:
        return evaluate(settings, course, verdicts)
    from bench.tutor_server import MODEL_ALIAS, llama_server

    print("TREINO_TUTOR_URL is unset: the test model on a llama.cpp server of its own", file=sys.stderr)
    with tempfile.TemporaryDirectory() as tmp, llama_server(Path(tmp) / "llama.log") as server:
        local = settings.model_copy(update={"tutor_url": server.url, "tutor_model": MODEL_ALIAS})
        return evaluate(local, course, verdicts)


if __name__ == "__main__":
    sys.exit(main())
