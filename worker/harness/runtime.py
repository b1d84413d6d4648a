"""What every check kind shares inside the sandbox: output capture, loading the
learner's file, calling it, turning failures into data and writing the trace.

This process is the trusted supervisor (``supervise.py``). A kind prepares here what the
supervisor needs (its hooks, the items it serves, the layout of the parameters it will read:
nothing on the device) and runs everything else through ``Api.supervise``, in a forked child:
first its ``set_up`` (the seeded scenario, built before the learner's file is loaded), which
hands the parameters' storage over (``Api.hand_off``, ``sharing``), then the learner's code. The
child's report (the kind's data, the error, the captured output) and what this process observed
(``data["observed"]``) make the trace, which only this process writes.

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
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

from . import quiet, sharing, supervise, trace_schema
from .protocol import Message, Outcome, Spec
from .supervise import Items, Part

# what a kind hands ``Api.supervise``: run in the child, the kind's data and an error, as data
Learner = Callable[[], tuple[Any, dict[str, Any] | None]]

TRACE_VERSION = trace_schema.VERSION
SUBMISSION = "submission.py"
SPEC_FILE = "spec.json"  # the spec, written into the job's folder by ``run.run_job``
MAX_MESSAGE = 2000
MAX_FRAMES = 20


class CappedWriter:
    """A text stream that keeps the first ``limit`` characters and counts the rest."""

    encoding = "utf-8"
    errors = "replace"

    def __init__(self, shared: dict[str, Any]) -> None:
        self._shared = shared

    def write(self, text: object) -> int:
        text = str(text)
        shared = self._shared
        room = shared["limit"] - len(shared["text"])
        if room > 0:
            shared["text"] += text[:room]
        if len(text) > max(room, 0):
            shared["dropped"] += len(text) - max(room, 0)
        return len(text)

    def writelines(self, lines: Iterable[object]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def fileno(self) -> NoReturn:
        raise OSError("output is captured")


class Stop(Exception):
    """The learner's file could not be run; ``error`` says why, as data."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message", ""))
        self.error = error


def _clip(text: object, limit: int = MAX_MESSAGE) -> str:
    """``str(text)``, capped; the learner's objects may make ``str`` recurse, raise or hang on
    nothing we can fix, so any failure of it becomes a plain note."""
    try:
        text = str(text)
    except BaseException:  # noqa: BLE001 (RecursionError, MemoryError, their own exceptions)
        return "(this message could not be shown)"
    if not isinstance(text, str):
        return "(this message could not be shown)"
    return text if len(text) <= limit else text[:limit] + "…"


def learner_frames(tb: types.TracebackType | None) -> list[dict[str, Any]]:
    """The frames of a traceback that belong to the learner's file, innermost last: a walk that
    keeps only the last few, so a 50,000-frame recursion costs no more than a short one."""
    kept: collections.deque = collections.deque(maxlen=MAX_FRAMES)
    while tb is not None:
        code = tb.tb_frame.f_code
        if os.path.basename(code.co_filename) == SUBMISSION:
            kept.append((tb.tb_lineno, code.co_name))
        tb = tb.tb_next
    return [
        {
            "line": line,
            "function": _clip(name, 200),
            "code": _clip(linecache.getline(SUBMISSION, line).strip(), 200),
        }
        for line, name in kept
    ]


def describe_exception(exc: BaseException, phase: str) -> dict[str, Any]:
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
    limit = getattr(exc, "limit", None) if name == "Unavailable" else None
    if isinstance(limit, str):  # instrument.Unavailable: a feature the grader cannot offer
        error["limit"] = _clip(limit, 40)
    return error


class Api:
    """The services a kind module gets from the runtime."""

    def __init__(self, work_dir: str, spec: Spec) -> None:
        self.work_dir = work_dir  # the job's folder: the learner's file, its writable place
        self.spec = spec  # what to run (``protocol.Spec``)
        self.output: dict[str, Any] = {
            "text": "",
            "dropped": 0,
            "limit": int(spec.get("output_limit", 65536)),
        }
        self.link: Any = None  # in the child: the way to the supervisor
        self._slow: tuple[list[str], float] | None = None
        self._items: supervise.Items | None = None
        self._hooks: dict[str, supervise.Hook] = {}
        self._meters = 0
        # in the child of an ``alone`` kind (forked under the filter that refuses threads and
        # processes); not inline on CUDA, where the learner runs in this process unfiltered
        self.alone = False
        self.inline = False  # the learner's code runs in this process (CUDA: ``supervise``)

    # ------------------------------------------------------------ the supervisor's side

    def slow_one(self, labels: Iterable[str], seconds: float) -> None:
        """Have the supervisor make one of ``labels`` slow in each run (the syncs' index): it
        takes ``seconds`` before answering each sync of that label, in time the learner's code
        cannot shorten, and draws which label once the child exists (``observed["slowed"]``)."""
        self._slow = (list(labels), float(seconds))

    def serve_items(self, count: int, seconds: float, make: Callable[[int, int], bytes], size: int) -> Items:
        """Have the supervisor serve a dataset of ``count`` items, each ``make(seed, index)``
        (``size`` bytes) ``seconds`` after it is asked for, under a new seed at each ``run``
        sync; returns the server, whose ``address`` the child's dataset connects to."""
        self._items = supervise.Items(count, seconds, make, size)
        return self._items

    def on_sync(self, label: str, hook: "supervise.Hook") -> None:
        """Have the supervisor call ``hook(observer, index)`` at each sync of ``label``, before it
        answers: what it does there (a modelled device's kernels, ``Observer.mark``) is the
        supervisor's own, in time the learner's code cannot shorten."""
        self._hooks[label] = hook

    def supervise(
        self,
        learner: Learner,
        alone: bool = False,
        layout: sharing.Layout | None = None,
        device: str | None = None,
        reading: Callable[[list[Any], bool], Any] | None = None,
    ) -> tuple[Any, dict[str, Any] | None]:
        """``learner()`` → ``(data, error)``, run in a child process (or here on CUDA, where
        the child could not use the device); returns the child's data with what was observed
        under ``data["observed"]``. A child that dies without reporting raises
        ``supervise.Died``: its death goes into the trace, where the worker reads the cause. With
        ``alone``, the child can start no thread or process (kinds whose meters see one thread
        of one process). A kind whose set-up runs in the child (``learner``'s first part) names
        the ``device`` it builds on and the ``layout`` of the parameters it hands over
        (``hand_off``): the supervisor reads them from then on, and refuses any other; with
        ``reading`` (``(tensors, mapped)`` → a ``supervise.Shared``), through a reader of the
        kind's own (sampled places: ``hookstep.Sampled``)."""
        import torch

        self.inline = torch.cuda.is_initialized() or (
            device is not None and torch.device(device).type == "cuda"
        )
        supervisor = supervise.Supervisor(
            None,  # the parameters: the child's hand-off (``layout``), once it is made
            int(self.spec.get("trace_limit", 4 << 20)),
            items=self._items,
            alone=alone,
            slow=self._slow,
            hooks=self._hooks,
            layout=layout,
            reading=reading,
        )
        part = self._part(learner)
        self.alone = alone and not self.inline
        report: dict[str, Any] | None
        death: supervise.Death | None
        if self.inline:
            report, death = supervisor.inline(part)
            mode = "inline"
            shared = supervisor.observer.shared
            if isinstance(shared, supervise.Shared):
                shared.mirror()
        else:
            report, death = supervisor.run(part)
            mode = "fork"
        shared = supervisor.observer.shared
        observed = supervisor.observer.result(shared.snapshot() if shared is not None else None)
        observed["mode"] = mode
        if self._items is not None:
            observed["items"] = self._items.result(supervisor.observer.started)
        if report is None and death is not None and not observed["interfered"]:
            raise supervise.Died(death)
        data, error = self._reported(report, observed)
        if isinstance(data, dict):
            data["observed"] = observed
        else:
            data = {"reported": data, "observed": observed}
        return data, error

    def _reported(
        self, report: dict[str, Any] | None, observed: dict[str, Any]
    ) -> tuple[Any, dict[str, Any] | None]:
        """The child's report, checked for shape; interference where it is not one."""
        if report is None:
            return None, None
        data, error = report.get("data"), report.get("error")
        text, dropped = report.get("output"), report.get("dropped")
        if (
            not isinstance(text, str)
            or not isinstance(dropped, int)
            or isinstance(dropped, bool)
            or (error is not None and not isinstance(error, dict))
        ):
            observed["interfered"] = observed["interfered"] or [{"key": "shape", "values": {}}]
            return None, None
        self.output["text"], self.output["dropped"] = text[: self.output["limit"]], max(dropped, 0)
        return data, error

    def _part(self, learner: Learner) -> Part:
        """What the child runs: the learner, output captured, its report as bytes."""

        def part(link: supervise.Link) -> bytes:
            self.link = link
            real = sys.stdout, sys.stderr
            sys.stdout = CappedWriter(self.output)
            sys.stderr = CappedWriter(self.output)
            try:
                data, error = learner()
            except Stop as stop:
                data, error = None, stop.error
            except BaseException as exc:  # noqa: BLE001 (the harness failed, or was made to)
                data, error = (
                    None,
                    {
                        "phase": "harness",
                        "type": _clip(type(exc).__name__, 200),
                        "message": _clip(exc),
                        "traceback": [],
                        "detail": _harness_detail(),
                    },
                )
            finally:
                sys.stdout, sys.stderr = real
            return trace_schema.dumps(
                {
                    "t": Message.REPORT,
                    "data": data,
                    "error": error,
                    "output": self.output["text"],
                    "dropped": self.output["dropped"],
                }
            ).encode()

        return part

    # ------------------------------------------------------------ the child's side

    def hand_off(self, tensors: Iterable[Any], dropped: int = 0) -> None:
        """The set-up's last act, before the learner's file is loaded: the parameters' storage
        handed to the supervisor (``Link.share``), which checks it against the layout the kind
        asked for and reads the parameters from it from then on. Once: the supervisor refuses
        a second. ``dropped``: of the last tensors, how many leave this process's page tables
        once handed over, until it reads them (``sharing.export_cpu``; the CPU only)."""
        self.link.share(tensors, dropped)

    def sync(self, label: str, index: int = -1, snapshot: bool = False) -> None:
        """Tell the supervisor ``label`` happened (and wait while it reads the parameters)."""
        self.link.sync(label, index, snapshot)

    def meter_report(self) -> Callable[..., None]:
        """A report callback for a new meter: its counts go to the supervisor as they change,
        and a note when it has one (``memory.BLIND``, ``memory.RECOMPUTED``)."""
        number = self._meters
        self._meters += 1
        return lambda packed, freed, note=0: self.link.meter(number, packed, freed, note)

    def load_entry(self) -> Callable[..., Any]:
        """Import the learner's file and return its entry function (raises ``Stop``)."""
        path = os.path.join(self.work_dir, SUBMISSION)
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
            raise Stop(
                {"phase": "syntax", "type": type(exc).__name__, "message": _clip(exc), "traceback": []}
            ) from None
        lines = source.splitlines(keepends=True)
        linecache.cache[SUBMISSION] = (len(source), None, lines, SUBMISSION)
        module = types.ModuleType("submission")
        module.__file__ = SUBMISSION
        sys.modules["submission"] = module
        try:
            exec(code, module.__dict__)
        except BaseException as exc:  # the learner's module body raised: report it
            raise Stop(describe_exception(exc, "load")) from None
        entry = self.spec["entry"]
        fn = module.__dict__.get(entry)
        if not callable(fn):
            raise Stop(
                {
                    "phase": "signature",
                    "type": "MissingFunction",
                    "entry": entry,
                    "message": f"no function named {entry!r}",
                    "traceback": [],
                }
            )
        return fn

    def check_signature(self, fn: Callable[..., Any], names: Sequence[str]) -> None:
        """Raise ``Stop`` unless ``fn`` accepts ``len(names)`` positional arguments."""
        try:
            inspect.signature(fn).bind(*names)
        except TypeError as exc:
            raise Stop(
                {
                    "phase": "signature",
                    "type": "WrongSignature",
                    "entry": self.spec["entry"],
                    "expected": list(names),
                    "message": _clip(exc),
                    "traceback": [],
                }
            ) from None
        except ValueError:  # builtins without a signature: let the call decide
            pass

    def call(self, fn: Callable[..., Any], args: Sequence[Any]) -> dict[str, Any] | None:
        """Call the learner's function; return None, or the error as data."""
        try:
            fn(*args)
        except BaseException as exc:  # everything the learner raises is data, even SystemExit
            return describe_exception(exc, "run")
        return None

    def call_for_value(
        self, fn: Callable[..., Any], args: Sequence[Any]
    ) -> tuple[Any, dict[str, Any] | None]:
        """Call the learner's function; return ``(value, None)`` or ``(None, error)``."""
        try:
            return fn(*args), None
        except BaseException as exc:  # everything the learner raises is data, even SystemExit
            return None, describe_exception(exc, "run")


def _harness_detail() -> str:
    """The harness's own traceback, for our logs; never allowed to fail in turn."""
    try:
        return _clip("".join(traceback.format_exc(limit=-MAX_FRAMES)), 4000)
    except BaseException:  # noqa: BLE001
        return ""


def write_trace(fd: int, trace: dict[str, Any], limit: int) -> None:
    """Written by the supervisor alone, once, into ``fd`` (a memory file it held before the child
    existed, which the child never holds), once the child and all it started are dead."""
    text = trace_schema.dumps(trace)
    if len(text) > limit:
        slim = {k: v for k, v in trace.items() if k != "data"}
        slim["outcome"] = "error"
        slim["error"] = {
            "phase": "harness",
            "type": "TraceTooLarge",
            "message": f"the trace was {len(text)} bytes (limit {limit})",
            "traceback": [],
        }
        text = trace_schema.dumps(slim)
    data = text.encode("utf-8")
    os.ftruncate(fd, 0)
    written = 0
    while written < len(data):
        written += os.pwrite(fd, data[written:], written)


def kind_module(name: str) -> types.ModuleType:
    """The harness module of the check kind ``name`` (``accumulation``, ``amp``, …), imported
    relative to this package: ``harness`` in the sandbox, ``worker.harness`` on the trusted side.
    Only a plain module name of this package: never a path, a dotted or a parent's name."""
    if not name.isidentifier() or name.startswith("_"):
        raise ValueError(f"not a check kind: {name!r}")
    return importlib.import_module(f".{name}", __package__)


def main(work_dir: str, trace_fd: int) -> int:
    """The job in ``work_dir`` (its spec, ``SPEC_FILE``, and the learner's file), its trace into
    ``trace_fd``."""
    started = time.perf_counter()
    work_dir = os.path.abspath(work_dir)
    with open(os.path.join(work_dir, SPEC_FILE), encoding="utf-8") as f:
        spec: Spec = json.load(f)
    os.chdir(work_dir)
    supervise.harden()
    api = Api(work_dir, spec)
    trace: dict[str, Any] = {
        "version": TRACE_VERSION,
        "kind": spec["kind"],
        "outcome": Outcome.OK,
        "error": None,
    }
    timings: dict[str, float] = {}
    try:
        with quiet.ignored():
            import torch  # noqa: F401  (timed: it is most of a cold start)

            # torch.optim imports it on the first step anyway; count it as start-up cost
            import torch._dynamo  # noqa: F401
        timings["import_ms"] = round((time.perf_counter() - started) * 1000)
        kind = kind_module(spec["kind"])
        run_started = time.perf_counter()
        try:
            data, error = kind.run(spec, api)
        except Stop as stop:
            data, error = None, stop.error
        timings["run_ms"] = round((time.perf_counter() - run_started) * 1000)
        trace["data"] = data
        if error is not None:
            trace["outcome"] = Outcome.ERROR
            trace["error"] = error
    except supervise.Died as died:  # the learner's program ended without a report
        how, number = died.death
        trace["outcome"] = Outcome.ERROR
        trace["error"] = {"phase": "run", "type": "Died", "message": str(died), "traceback": []}
        trace["death"] = {"how": how, "number": number}
    except BaseException as exc:  # a harness failure is still reported as data
        trace["outcome"] = Outcome.ERROR
        trace["error"] = {
            "phase": "harness",
            "type": type(exc).__name__,
            "message": _clip(exc),
            "traceback": [],
            "detail": _harness_detail(),
        }
    trace["output"] = api.output["text"]
    trace["output_dropped"] = api.output["dropped"]
    trace["timings"] = timings
    write_trace(trace_fd, trace, int(spec.get("trace_limit", 4 * 1024 * 1024)))
    return 0
