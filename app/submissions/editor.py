"""The code editor's own words (CodeMirror's `phrases`), in the learner's language."""

from app.i18n import gettext as _


def phrases() -> dict[str, str]:
    """CodeMirror's English phrase → the page's language; the page hands them to the editor."""
    return {
        "Control character": _("Control character"),
        "Selection deleted": _("Selection deleted"),
        "Folded lines": _("Folded lines"),
        "Unfolded lines": _("Unfolded lines"),
        "to": _("to"),
        "folded code": _("folded code"),
        "unfold": _("unfold"),
        "Fold line": _("Fold line"),
        "Unfold line": _("Unfold line"),
        "Go to line": _("Go to line"),
        "go": _("go"),
        "Find": _("Find"),
        "Replace": _("Replace"),
        "next": _("next"),
        "previous": _("previous"),
        "all": _("all"),
        "match case": _("match case"),
        "by word": _("by word"),
        "regexp": _("regexp"),
        "replace": _("replace"),
        "replace all": _("replace all"),
        "close": _("close"),
        "current match": _("current match"),
        "replaced $ matches": _("replaced $ matches"),
        "replaced match on line $": _("replaced match on line $"),
        "on line": _("on line"),
        "Completions": _("Completions"),
        "Diagnostics": _("Diagnostics"),
        "No diagnostics": _("No diagnostics"),
    }
