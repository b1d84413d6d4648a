"""Hints point the way and never hand over the solution (the rule: README.md, "Writing lessons").

A key line is a line of an exercise's solution that neither its starter nor its prompt already
shows. No hint, in either language, quotes one. The last hint quotes at most two calls or
assignments and no piece of a key line: it names the idea, the place in the learner's code and the
number in the verdict that shows the mistake, never what to type.
"""

import io
import re
import tokenize
from pathlib import Path

import pytest
import yaml

from tests.conftest import LESSONS

EXERCISES = sorted(LESSONS.glob("*/exercises/*/exercise.yaml"))
LANGS = ("en", "pt-BR")
SHORTEST = 12  # characters: shorter lines and pieces (`else:`, `p.grad`) are words, not a solution
MAX_CALLS = 2  # calls or assignments quoted in the last hint: a list of them is a recipe


def _squeeze(text: str) -> str:
    return " ".join(text.replace("`", "").split())


def _code_lines(source: str) -> set[str]:
    """The file's lines without comments, docstrings, imports and blank lines, whitespace squeezed."""
    comments = {
        tok.start[0]: tok.start[1]
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    lines = set()
    for number, line in enumerate(source.splitlines(), start=1):
        line = _squeeze(line[: comments.get(number)])
        if line and not re.match(r'("""|\'\'\'|import |from \S+ import )', line):
            lines.add(line)
    return lines


def _exercise(path: Path) -> tuple[str, dict, set[str]]:
    """Its id, its exercise.yaml and its key lines."""
    spec = yaml.safe_load(path.read_text())
    given = _code_lines((path.parent / "starter.py").read_text())
    prompts = [_squeeze(spec["prompt"][lang]) for lang in LANGS]
    keys = {
        line
        for line in _code_lines((path.parent / "solution.py").read_text()) - given
        if len(line) >= SHORTEST and not any(line in prompt for prompt in prompts)
    }
    return f"{path.parent.parent.parent.name}/{path.parent.name}", spec, keys


def _quoted(spec: dict, keys: set[str]) -> list[str]:
    return [
        f"hint {number} ({lang}): {line}"
        for number, hint in enumerate(spec["hints"], start=1)
        for lang in LANGS
        for line in sorted(keys)
        if line in _squeeze(hint[lang])
    ]


def _recipe(spec: dict, keys: set[str]) -> list[str]:
    """What the last hint quotes beyond the rule: more than MAX_CALLS calls, or a piece of a key line."""
    found = []
    for lang in LANGS:
        spans = [_squeeze(s) for s in re.findall(r"`([^`]+)`", spec["hints"][-1][lang])]
        calls = [s for s in spans if re.search(r"[(=]", s)]
        if len(calls) > MAX_CALLS:
            found.append(f"{lang}: {len(calls)} calls {calls}")
        code = [s for s in spans if len(s) >= SHORTEST and re.search(r"[(\[=%+*/ ]", s)]  # not a name
        found += [f"{lang}: {s}" for s in code if any(s in line for line in keys)]
    return found


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.parent.name)
def test_no_hint_quotes_a_line_of_the_solution(path):
    name, spec, keys = _exercise(path)
    assert not _quoted(spec, keys), f"{name} hands over lines of its solution"


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.parent.name)
def test_the_last_hint_points_the_way_without_the_code(path):
    name, spec, keys = _exercise(path)
    assert not _recipe(spec, keys), f"{name}'s last hint is a recipe"


# scaler-clipping's last hint until issue 28 asked for one that points the way
RECIPE = (
    "At `(step + 1) % accum_steps == 0`: `scaler.unscale_(optimizer)`, `clip_grad_norm_(...)`, "
    "`scaler.step(optimizer)`, `scaler.update()`, `optimizer.zero_grad()`."
)


def test_a_last_hint_that_spells_out_the_order_of_calls_is_caught():
    path = LESSONS / "02-gradient-accumulation" / "exercises" / "scaler-clipping" / "exercise.yaml"
    _, spec, keys = _exercise(path)
    # the prompt gives the clip's line, so it is no secret; unscale_'s is the one to work out
    assert "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)" not in keys
    assert "scaler.unscale_(optimizer)" in keys
    spec["hints"][-1] = dict.fromkeys(LANGS, RECIPE)
    assert _quoted(spec, keys) == [f"hint 3 ({lang}): scaler.unscale_(optimizer)" for lang in LANGS]
    assert len(_recipe(spec, keys)) == 4  # per language: a list of six calls, and unscale_'s line
