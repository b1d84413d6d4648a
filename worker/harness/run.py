"""Entry point of the sandboxed child: ``python -I run.py JOB_DIR``.

Runs with only the standard library and torch available. It always writes
``JOB_DIR/out/trace.json``; whatever goes wrong in the learner's code becomes data.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # harness modules import each other by name; -I leaves the script dir out

import runtime  # noqa: E402

if __name__ == "__main__":
    sys.exit(runtime.main(sys.argv[1:]))
