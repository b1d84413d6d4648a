"""The solution filter: an answer never carries the reference solution's code to the page.

The secret is the reference solution's own lines, normalised (comments and whitespace gone),
less every line the learner already has in front of them (the starter, the prompt and hints,
their own code) and lines too short to mean anything (``return model``). The answer is judged
as it streams: text goes out only up to where it could be the start of a secret line, a finished
line that contains one is never sent (a ``[…]`` instead), and once the answer has reproduced more
than `threshold` of the secret lines it is withheld: the stream stops and a hint replaces it.
"""

import re
from collections.abc import Iterable

MIN_LINE = 12  # normalised characters: shorter solution lines are not worth hiding
HELD = " […]"
_SPACE = re.compile(r"\s+")


def normalise(line: str) -> str:
    """A line of code without its comment and without any whitespace."""
    code = line.split("#", 1)[0] if "#" in line and not _in_string(line) else line
    return _SPACE.sub("", code)


def _in_string(line: str) -> bool:
    """Whether a # may be inside a string (then the line is kept whole: safer to hide more)."""
    head = line.split("#", 1)[0]
    return head.count('"') % 2 == 1 or head.count("'") % 2 == 1


def secret_lines(solution: str, known: Iterable[str]) -> list[str]:
    """The solution's lines the learner has not seen, normalised, each once."""
    seen = _SPACE.sub("", "\n".join(known))
    out: list[str] = []
    for line in solution.splitlines():
        n = normalise(line)
        if len(n) >= MIN_LINE and n not in seen and n not in out:
            out.append(n)
    return out


def overlap(answer: str, secrets: list[str]) -> float:
    """The share of `secrets` that `answer` reproduces (0 with no secret)."""
    if not secrets:
        return 0.0
    flat = [_SPACE.sub("", line) for line in answer.splitlines()]
    return sum(any(s in f for f in flat) for s in secrets) / len(secrets)


class Guard:
    """Feed it the answer as it arrives; send what it returns. ``withheld`` turns true once the
    answer reproduced too much of the solution: send nothing more. With `groups` (the secret
    lines of several solutions, as on a lesson card: each of the lesson's exercises not yet
    passed), every secret line is held back, and the answer is withheld once it reproduced more
    than `threshold` of any one solution."""

    def __init__(self, secrets: list[str], threshold: float, groups: list[list[str]] | None = None) -> None:
        self.secrets = secrets
        self.groups = [set(g) for g in (groups if groups is not None else [secrets]) if g]
        self.threshold = threshold
        self.hits: set[str] = set()
        self.withheld = False
        self.shown = ""  # what went to the page
        self._line = ""  # the current line, as received
        self._sent = 0  # how much of it was sent

    def feed(self, text: str) -> str:
        if self.withheld:
            return ""
        out = []
        self._line += text
        while "\n" in self._line and not self.withheld:
            line, self._line = self._line.split("\n", 1)
            out.append(self._finish_line(line) + "\n")
            self._sent = 0
        if not self.withheld:
            safe = self._safe_end(self._line)
            if safe > self._sent:
                out.append(self._line[self._sent : safe])
                self._sent = safe
        sent = "".join(out)
        self.shown += sent
        return sent

    def close(self) -> str:
        """The rest of the last line, judged now that no more will come."""
        if self.withheld or not self._line:
            return ""
        rest = self._finish_line(self._line)
        self._line, self._sent = "", 0
        self.shown += rest
        return rest if not self.withheld else ""

    def _finish_line(self, line: str) -> str:
        flat = _SPACE.sub("", line)
        found = {s for s in self.secrets if s in flat}
        if not found:
            return line[self._sent :]
        self.hits |= found
        if any(len(self.hits & group) / len(group) > self.threshold for group in self.groups):
            self.withheld = True
            return ""
        return HELD

    def _safe_end(self, line: str) -> int:
        """How much of the unfinished `line` may go out: all of it, but for a tail that may be
        the start of a secret line (held until the line says otherwise), and nothing more of a
        line that already holds a whole one."""
        if not self.secrets:
            return len(line)
        places = [i for i, c in enumerate(line) if not c.isspace()]
        flat = "".join(line[i] for i in places)
        if any(s in flat for s in self.secrets):
            return self._sent
        longest = max(len(s) for s in self.secrets)
        for start in range(max(0, len(flat) - longest), len(flat)):
            tail = flat[start:]
            if any(s.startswith(tail) for s in self.secrets):
                return places[start]
        return len(line)
