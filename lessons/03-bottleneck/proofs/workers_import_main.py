"""Spawn and forkserver workers import the main script again (as __mp_main__), so code outside
`if __name__ == "__main__":` runs in each of them; fork, Linux's default before Python 3.14, does not.
On Linux the default start method is fork before Python 3.14 and forkserver from it; spawn on macOS."""

import multiprocessing
import subprocess
import sys
import tempfile
from pathlib import Path

if sys.platform == "linux":
    expected = "forkserver" if sys.version_info >= (3, 14) else "fork"
    assert multiprocessing.get_start_method() == expected
elif sys.platform == "darwin":
    assert multiprocessing.get_start_method() == "spawn"

SCRIPT = """
import multiprocessing, sys
print("top level ran as", __name__, flush=True)

def work(_):
    return 0

if __name__ == "__main__":
    with multiprocessing.get_context(sys.argv[1]).Pool(1) as pool:
        pool.map(work, [0])
"""
with tempfile.TemporaryDirectory() as tmp:
    script = Path(tmp) / "train.py"
    script.write_text(SCRIPT)
    for method, reimported in (("spawn", True), ("forkserver", True), ("fork", False)):
        out = subprocess.run(
            [sys.executable, str(script), method], capture_output=True, text=True, timeout=60, check=True
        ).stdout
        assert ("top level ran as __mp_main__" in out) == reimported, (method, out)
        assert out.count("top level ran as __main__") == 1
