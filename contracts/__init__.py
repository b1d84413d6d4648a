"""What the worker and the web share, and nothing else: torch-free and HTTP-free, so the grading
core (worker/harness, worker/checks, the sandbox, the fork server, worker/grading.py) imports this
package and nothing of app/, and the web imports it without torch (tests/test_layers.py says so).

- ``languages``: the course's languages (``LANGS``) and ``language``, the one that answers a request.
- ``messages``: the learner-facing texts (``messages.yaml``), ``Sci`` and ``Phrase`` (values a
  check quotes), and how a stored value is written as JSON and read back.
- ``verdict``: the verdict record the worker writes and the verdict a reader gets (DESIGN.md,
  "Verdict object").
- ``limits``: an exercise's ``Limits``, from its exercise.yaml to the sandbox.
- ``exercise``: what grading needs of an exercise (its folder, entry, check and limits), read from
  its exercise.yaml; the course as pages (texts, quiz, Markdown) is the web's, app/lessons/course.py.
"""
