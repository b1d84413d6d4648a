"""The learner-facing texts: ``messages.yaml`` and one file per newer check kind in
``messages.d/`` (key → {en, pt-BR}; a key lives in one file only), numbers by Babel."""

import math
import string
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from babel import Locale
from babel.numbers import format_decimal

from contracts.languages import language

CATALOGUE = Path(__file__).with_name("messages.yaml")
# Every file of texts: the shared catalogue first, then a check kind's own (messages.d/<kind>.yaml).
CATALOGUES = (CATALOGUE, *sorted(Path(__file__).with_name("messages.d").glob("*.yaml")))


class Sci(float):
    """A number that may be tiny or huge (errors, ratios): 1.8e-15, 3.00, 4.2e+06."""


class Phrase:
    """A catalogue text quoted inside another, rendered in the same language: one wording
    per fact when a diagnosis has more than one kind of evidence."""

    def __init__(self, key: str, values: dict[str, Any] | None = None) -> None:
        self.key, self.values = key, values or {}


@cache
def catalogue() -> dict[str, dict[str, str]]:
    entries: dict[str, dict[str, str]] = {}
    for path in CATALOGUES:
        with path.open(encoding="utf-8") as f:
            part: dict[str, dict[str, str]] = yaml.safe_load(f) or {}
        if twice := sorted(entries.keys() & part.keys()):
            raise ValueError(f"{path}: keys already in another catalogue: {', '.join(twice)}")
        entries.update(part)
    return entries


def _locale(lang: str) -> str:
    return language(lang).replace("-", "_")


def _scientific(value: float, locale: str) -> str:
    """Two decimals where they say enough, else a short mantissa: 1.1e-15 / 1,1e-15."""
    if value == 0:
        return "0"
    if 1e-2 <= abs(value) < 1e4:
        return format_decimal(value, format="#,##0.00", locale=locale)
    mantissa, exponent = f"{value:.1e}".split("e")
    return f"{format_decimal(float(mantissa), format='0.0', locale=locale)}e{int(exponent)}"


def number(value: Any, lang: str) -> str:
    locale = _locale(lang)
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, Phrase):
        return render(value.key, lang, value.values)
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("∞" if value > 0 else "-∞")
    if isinstance(value, Sci):
        return _scientific(value, locale)
    if isinstance(value, int):
        return format_decimal(value, format="#,##0", locale=locale)
    if isinstance(value, float):
        return format_decimal(value, format="#,##0.00", locale=locale)
    if isinstance(value, list | tuple):
        return ", ".join(number(item, lang) for item in value)
    return str(value)


def size(value: Any, lang: str) -> str:
    """Bytes as every page writes them, one unit system (1024): exact bytes below ten thousand,
    then KiB below one MiB, then MiB: 58,324 bytes read "57.0 KiB" in a message and in a chart
    alike, and 8 MiB reads "8.0 MiB", not "8,192.0 KiB"."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return number(value, lang)
    locale = _locale(lang)
    if abs(value) < 10_000:
        return f"{format_decimal(value, format='#,##0', locale=locale)} B"
    if abs(value) < 1024 * 1024:
        return f"{format_decimal(value / 1024, format='#,##0.0', locale=locale)} KiB"
    return f"{format_decimal(value / 1024 / 1024, format='#,##0.0', locale=locale)} MiB"


def text(key: str, lang: str) -> str:
    entry = catalogue()[key]
    return entry[language(lang)]


def _counted(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _Filler(string.Formatter):
    """Fills a catalogue text: ``{n}`` is the number localised, ``{n:bytes}`` a size, ``{n:.2}``
    the number with that many decimals (``{n:.0}``: none), ``{n:time|times}`` the word that
    agrees with it by the language's plural rule (pt-BR: 0 and 1 take the singular)."""

    def __init__(self, lang: str) -> None:
        self.lang = lang

    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec == "bytes":
            return size(value, self.lang)
        if format_spec[:1] == "." and format_spec[1:].isdigit() and _counted(value):
            digits = "0" * int(format_spec[1:])
            return format_decimal(value, format=f"#,##0.{digits}", locale=_locale(self.lang))
        if "|" not in format_spec:
            return number(value, self.lang)
        one, other = format_spec.split("|", 1)
        return (
            one
            if _counted(value) and Locale.parse(_locale(self.lang)).plural_form(abs(value)) == "one"
            else other
        )


def render(key: str, lang: str, values: dict[str, Any] | None = None) -> str:
    """The text of ``key`` in ``lang`` with ``{placeholders}`` filled in, numbers localised and
    counted words agreeing with their numbers."""
    return _Filler(lang).vformat(text(key, lang), (), values or {})


# ---------------------------------------------------------------- values as stored JSON
# A stored verdict keeps message keys and the values to quote, and is rendered when read, in
# the reader's language. JSON has no Sci, Phrase or NaN: each becomes a one-key object.


def encode(value: Any) -> Any:
    """``value`` (a message value) as strict JSON that ``decode`` turns back into it."""
    if isinstance(value, Phrase):
        return {"phrase": value.key, "values": encode(value.values)}
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return {"float": repr(value)}  # 'nan', 'inf', '-inf'
    if isinstance(value, Sci):
        return {"sci": float(value)}
    if isinstance(value, int | float):
        return value
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [encode(v) for v in value]
    return str(value)


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"sci"} and isinstance(value["sci"], int | float):
        return Sci(value["sci"])
    if set(value) == {"float"} and value["float"] in ("nan", "inf", "-inf"):
        return float(value["float"])
    if set(value) == {"phrase", "values"} and isinstance(value["values"], dict):
        return Phrase(str(value["phrase"]), decode(value["values"]))
    return {k: decode(v) for k, v in value.items()}
