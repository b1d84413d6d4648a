"""What every check kind shares inside the sandbox: output capture, loading the
learner's file, calling it, turning failures into data and writing the trace.

Standard library only (torch is imported here once, and timed).
"""

import collections
import importlib
import inspect
import json
import linecache
import os
import sys
import time
import traceback
import types

import quiet
import trace_schema

TRACE_VERSION = trace_schema.VERSION
SUBMISSION = "submission.py"
MAX_MESSAGE = 2000
MAX_FRAMES = 20


class CappedWriter:
    """A text stream that keeps the first ``limit`` characters and counts the rest."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, shared):
        self._shared = shared

    def write(self, text):
        text = str(text)
        shared = self._shared
        room = shared["limit"] - len(shared["text"])
        if room > 0:
            shared["text"] += text[:room]
        if len(text) > max(room, 0):
            shared["dropped"] += len(text) - max(room, 0)
        return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass

    def isatty(self):
        return False

    def fileno(self):
        raise OSError("output is captured")


class Stop(Exception):
    """The learner's file could not be run; ``error`` says why, as data."""

    def __init__(self, error):
        super().__init__(error.get("message", ""))
        self.error = error


def _clip(text, limit=MAX_MESSAGE):
    """``str(text)``, capped; the learner's objects may make ``str`` recurse, raise or hang on
    nothing we can fix, so any failure of it becomes a plain note."""
    try:
        text = str(text)
    except BaseException:  # noqa: BLE001 (RecursionError, MemoryError, their own exceptions)
        return "(this message could not be shown)"
    if not isinstance(text, str):
        return "(this message could not be shown)"
    return text if len(text) <= limit else text[:limit] + "…"


def learner_frames(tb):
    """The frames of a traceback that belong to the learner's file, innermost last: a walk that
    keeps only the last few, so a 50,000-frame recursion costs no more than a short one."""
    kept = collections.deque(maxlen=MAX_FRAMES)
    while tb is not None:
        code = tb.tb_frame.f_code
        if os.path.basename(code.co_filename) == SUBMISSION:
            kept.append((tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    return [{"line": line, "function": _clip(name, 200),
             "code": _clip(linecache.getline(SUBMISSION, line).strip(), 200)} for line, name in kept]


def describe_exception(exc, phase):
    try:
        name = _clip(type(exc).__name__, 200)
    except BaseException:  # noqa: BLE001 (a metaclass of the learner's)
        name = "Exception"
    error = {
        "phase": phase,
        "type": name,
        "message": _clip(exc),
        "traceback": learner_frames(exc.__traceback__),
    }
    if isinstance(exc, ModuleNotFoundError) and isinstance(exc.name, str):
        error["module"] = _clip(exc.name, 200)
    return error


class Api:
    """The services a kind module gets from the runtime."""

    def __init__(self, job_dir, job):
        self.job_dir = job_dir
        self.job = job

    def load_entry(self):
        """Import the learner's file and return its entry function (raises ``Stop``)."""
        path = os.path.join(self.job_dir, SUBMISSION)
        with open(path, "rb") as f:
            raw = f.read()
        try:
            source = raw.decode("utf-8")
            code = compile(source, SUBMISSION, "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise Stop(
                {
                    "phase": "syntax",
                    "type": type(exc).__name__,
                    "message": _clip(exc.msg),
                    "line": exc.lineno,
                    "offset": exc.offset,
                    "code": _clip((exc.text or "").rstrip("\n"), 200),
                    "traceback": [],
                }
            ) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise Stop({"phase": "syntax", "type": type(exc).__name__,
                        "message": _clip(exc), "traceback": []}) from None
        lines = source.splitlines(keepends=True)
        linecache.cache[SUBMISSION] = (len(source), None, lines, SUBMISSION)
        module = types.ModuleType("submission")
        module.__file__ = SUBMISSION
        sys.modules["submission"] = module
        try:
            exec(code, module.__dict__)
        except BaseException as exc:  # the learner's module body raised: report it
            raise Stop(describe_exception(exc, "load")) from None
        entry = self.job["entry"]
        fn = module.__dict__.get(entry)
        if not callable(fn):
            raise Stop({"phase": "signature", "type": "MissingFunction", "entry": entry,
                        "message": f"no function named {entry!r}", "traceback": []})
        return fn

    def check_signature(self, fn, names):
        """Raise ``Stop`` unless ``fn`` accepts ``len(names)`` positional arguments."""
        try:
            inspect.signature(fn).bind(*names)
        except TypeError as exc:
            raise Stop({"phase": "signature", "type": "WrongSignature",
                        "entry": self.job["entry"], "expected": list(names),
                        "message": _clip(exc), "traceback": []}) from None
        except ValueError:  # builtins without a signature: let the call decide
            pass

    def call(self, fn, args):
        """Call the learner's function; return None, or the error as data."""
        try:
            fn(*args)
        except BaseException as exc:  # everything the learner raises is data, even SystemExit
            return describe_exception(exc, "run")
        return None

    def call_for_value(self, fn, args):
        """Call the learner's function; return ``(value, None)`` or ``(None, error)``."""
        try:
            return fn(*args), None
        except BaseException as exc:  # everything the learner raises is data, even SystemExit
            return None, describe_exception(exc, "run")



def _harness_detail():
    """The harness's own traceback, for our logs; never allowed to fail in turn."""
    try:
        return _clip("".join(traceback.format_exc(limit=-MAX_FRAMES)), 4000)
    except BaseException:  # noqa: BLE001
        return ""


def write_trace(out_dir, trace, limit):
    text = trace_schema.dumps(trace)
    if len(text) > limit:
        slim = {k: v for k, v in trace.items() if k != "data"}
        slim["outcome"] = "error"
        slim["error"] = {"phase": "harness", "type": "TraceTooLarge",
                         "message": f"the trace was {len(text)} bytes (limit {limit})",
                         "traceback": []}
        text = trace_schema.dumps(slim)
    tmp = os.path.join(out_dir, "trace.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, os.path.join(out_dir, "trace.json"))


def main(argv):
    started = time.perf_counter()
    job_dir = os.path.abspath(argv[0])
    with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as f:
        job = json.load(f)
    out_dir = os.path.join(job_dir, "out")
    os.chdir(job_dir)
    output = {"text": "", "dropped": 0, "limit": int(job.get("output_limit", 65536))}
    real_stderr = sys.stderr
    sys.stdout = CappedWriter(output)
    sys.stderr = CappedWriter(output)
    trace = {"version": TRACE_VERSION, "kind": job["kind"], "outcome": "ok", "error": None}
    timings = {}
    try:
        with quiet.ignored():
            import torch  # noqa: F401  (timed: it is most of a cold start)

            # torch.optim imports it on the first step anyway; count it as start-up cost
            import torch._dynamo  # noqa: F401
        timings["import_ms"] = round((time.perf_counter() - started) * 1000)
        kind = importlib.import_module(job["kind"])
        run_started = time.perf_counter()
        api = Api(job_dir, job)
        try:
            data, error = kind.run(job, api)
        except Stop as stop:
            data, error = None, stop.error
        timings["run_ms"] = round((time.perf_counter() - run_started) * 1000)
        trace["data"] = data
        if error is not None:
            trace["outcome"] = "error"
            trace["error"] = error
    except BaseException as exc:  # a harness failure is still reported as data
        trace["outcome"] = "error"
        trace["error"] = {"phase": "harness", "type": type(exc).__name__, "message": _clip(exc),
                          "traceback": [], "detail": _harness_detail()}
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, real_stderr
    trace["output"] = output["text"]
    trace["output_dropped"] = output["dropped"]
    trace["timings"] = timings
    write_trace(out_dir, trace, int(job.get("trace_limit", 4 * 1024 * 1024)))
    return 0
