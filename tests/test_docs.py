"""Docs that can drift are checked: every setting is documented, every make target too."""

import re

from app.config import ROOT, Settings

README = (ROOT / "README.md").read_text()


def test_every_setting_is_documented_in_the_readme():
    documented = set(re.findall(r"`([A-Z_]+)", README.split("## Configuration", 1)[1].split("\n## ")[0]))
    missing = {name.upper() for name in Settings.model_fields} - documented
    assert not missing, f"settings missing from README's Configuration: {sorted(missing)}"


def test_every_public_make_target_is_in_the_readme():
    makefile = (ROOT / "Makefile").read_text()
    phony = re.search(r"^\.PHONY: ((?:.*\\\n)*.*)$", makefile, re.M)[1]  # (a line may go on after \)
    targets = set(phony.replace("\\\n", " ").split()) - {"system-deps"}
    missing = {t for t in targets if f"make {t}" not in README}
    assert not missing, f"make targets missing from the README: {sorted(missing)}"
