"""The Portuguese vocabulary rule: one word per concept, from lessons/glossary.yaml.

`treino lessons check` runs `problems()` over every text a learner reads in pt-BR — the lessons,
quick checks and exercises under lessons/, the verdict messages and the UI catalog — and reports
each refused variant as one line naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from babel.messages.pofile import read_po
from pydantic import BaseModel, ConfigDict, Field

from app.lessons.course import NonEmpty
from contracts.exercise import ContentError, parse_yaml, read_text, validate

LANG = "pt-BR"
GLOSSARY_FILE = "glossary.yaml"

# code and placeholders are exempt: fenced blocks, `inline code`, {name}, %(name)s
_FENCED = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.MULTILINE | re.DOTALL)
# code, a placeholder's name ({n}, and {n: of {n:lote|lotes}, whose words are the text's own)
# and printf-style names
_EXEMPT = re.compile(r"`[^`\n]*`|\{[A-Za-z_][A-Za-z0-9_]*[}:]|%\([A-Za-z_][A-Za-z0-9_]*\)[sd]")


class _Term(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=True)
    pt_BR: NonEmpty = Field(alias="pt-BR")
    en: NonEmpty
    refuse: list[NonEmpty] = Field(min_length=1)


class _GlossaryFile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    terms: list[_Term] = Field(min_length=1)


@dataclass(frozen=True)
class Rule:
    word: str
    english: str
    pattern: re.Pattern[str]


@dataclass(frozen=True)
class Glossary:
    rules: tuple[Rule, ...]
    glosses: re.Pattern[str]  # "(batch)", "(micro-batches)": the English term given in parentheses

    def problems(self, lessons_dir: Path, *extra: Path) -> list[str]:
        """One line per refused variant in the pt-BR texts under lessons_dir and the extra files
        (YAML files: their `pt-BR` values; .po catalogs: their msgstr)."""
        found: list[str] = []
        files = sorted(lessons_dir.glob(f"*/lesson.{LANG}.md")) + sorted(
            p for p in lessons_dir.rglob("*.yaml") if p.name != GLOSSARY_FILE
        )
        for path in [*files, *extra]:
            for where, text in _texts(path):
                text = self.glosses.sub(" ", _strip(text))
                for rule in self.rules:
                    for match in rule.pattern.finditer(text):
                        found.append(
                            f'{path}: {where}: "{match[0]}" is not the course\'s word; write '
                            f'"{rule.word}" ({rule.english}), see lessons/{GLOSSARY_FILE}'
                        )
        return found


def load(path: Path) -> Glossary:
    spec = validate(path, _GlossaryFile, parse_yaml(path, read_text(path)))
    rules = []
    for term in spec.terms:
        for variant in term.refuse:
            # a whole word: letters, digits, _ and - on either side make it part of another word
            body = re.escape(variant).replace(r"\ ", r"\s+")
            rules.append(Rule(term.pt_BR, term.en, re.compile(rf"(?<![\w-]){body}(?![\w-])", re.IGNORECASE)))
    english = "|".join(re.escape(term.en) for term in spec.terms)
    return Glossary(tuple(rules), re.compile(rf"\((?:{english})(?:e?s)?\)", re.IGNORECASE))


def _strip(text: str) -> str:
    text = _FENCED.sub(lambda m: "\n" * m[0].count("\n"), text)
    return _EXEMPT.sub(" ", text)


def _texts(path: Path) -> Iterator[tuple[str, str]]:
    if path.suffix == ".md":
        text = _strip(read_text(path))
        for lineno, line in enumerate(text.splitlines(), start=1):
            yield f"line {lineno}", line
    elif path.suffix == ".po":
        try:
            with path.open("rb") as f:
                catalog = read_po(f, locale="pt_BR")
        except FileNotFoundError:
            raise ContentError(f"{path}: missing") from None
        for message in catalog:
            if message.id:
                string = message.string  # a tuple for a message with plurals
                strings = [string] if isinstance(string, str) else list(string or ())
                msgid = message.id[0] if isinstance(message.id, tuple) else message.id
                for translation in strings:
                    yield f"msgstr of {msgid[:50]!r}", translation or ""
    else:
        yield from _yaml_texts(parse_yaml(path, read_text(path)), ())


def _yaml_texts(node: Any, keys: Iterable[str]) -> Iterator[tuple[str, str]]:
    keys = tuple(keys)
    if isinstance(node, dict):
        for key, value in node.items():
            if key == LANG and isinstance(value, str):
                yield ".".join(keys) or "top level", value
            else:
                yield from _yaml_texts(value, (*keys, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _yaml_texts(value, (*keys, str(i)))
