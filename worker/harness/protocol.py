"""The protocol between the worker, the sandbox's supervisor and its child, in one place: what
each sends the other, as typed records, the words on the wire, and who vouches for each field of
the trace. Standard library only: the sandbox imports it as ``harness.protocol``, the worker as
``worker.harness.protocol``.

One name per thing along a submission's way (docs/architecture.md, "Names along the way"):

- **submission**: what the learner sent (code, exercise, mode), a row of the queue;
- **spec** (``Spec``): what the harness is to run: the check kind, the entry function, the
  kind's parameters, the device, the output and trace caps. Built by the grader;
- **request** (``Request``): what the worker hands a sandbox at hand-off: the spec, the code and
  the limits (``worker.sandbox.job.request``, read by ``run.receive``);
- **job**: one run of one request in a sandbox: a single-use sandbox or a fork of a template
  (``worker.sandbox.Job``), its processes and its ``/job`` folder. Nothing else is a job;
- **report** (``Report``): what the child (the learner's process) sends its supervisor at the
  end: the kind's data, an error, the captured output. Everything in it is *reported*;
- **trace** (``Trace``): what the supervisor writes once the child is dead: the report's fields
  plus ``data["observed"]`` (``Observed``), what the supervisor and the kernel saw themselves;
- **verdict record**: what the trusted checks make of the trace (``contracts.verdict``).

Who vouches for what (``PROVENANCE``, ``OBSERVED_FIELDS``): a field is ``OBSERVED`` when the
supervisor or the kernel read or counted it without the child's help (parameters read from the
shared mapping, syncs counted and timed, the memory the kernel accounted, batches it served), and
``REPORTED`` when the learner's process wrote it (the kind's data, the error, the output, and the
in-child meters' counts, sent over the link). A pass rests on observed fields only; a trusted
check reads a reported one through ``reported`` (or ``reported_meters``), so that each such read
names itself in review (``grep -n reported worker/checks``).
"""

import enum
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

# ---------------------------------------------------------------- the words


class Word(bytes, enum.Enum):
    """The one-byte words on the worker's channels to a job, and the supervisor's answer."""

    READY = b"R"  # a warm single-use sandbox, with its channel (SCM_RIGHTS): ready for a request
    FORKED = b"P"  # a fork's init, with its channel: ready for a request (worker.forkserver)
    FORK = b"J"  # worker -> template: fork a job (with its socket, output and status pipe)
    HANDOFF = b"T"  # worker -> job, with the trace file and the done pipe, before the request
    DONE = b"D"  # job -> worker, on the done pipe: the trace is written
    ANSWER = b"k"  # supervisor -> child: the sync is observed, go on


class Message(enum.StrEnum):
    """The ``t`` of a message the child sends its supervisor on the link (strict JSON)."""

    SYNC = "sync"  # something happened (a label): the supervisor counts, times and reads
    # the parameters' storage handed over (``Share``, with its descriptor): once, first, before
    # the learner's code (``sharing``)
    SHARE = "share"
    REPORT = "report"  # the end: the report (``Report``)


class Outcome(enum.StrEnum):
    OK = "ok"
    ERROR = "error"


class Source(enum.StrEnum):
    """Who vouches for a field of the trace."""

    OBSERVED = "observed"  # the supervisor or the kernel, without the child's help
    REPORTED = "reported"  # the learner's process (the child): believed for names and figures only


# ---------------------------------------------------------------- worker -> sandbox


class Spec(TypedDict):
    """What the harness runs (``request["spec"]``, the job folder's ``spec.json``, ``Api.spec``)."""

    kind: str  # the check kind: worker/harness/<kind>.py and worker/checks/<kind>.py
    entry: str  # the learner's function
    params: dict[str, Any]  # the kind's parameters (the exercise's, plus the grader's inputs)
    device: str  # "cpu" or "cuda"
    output_limit: int  # characters of output kept
    trace_limit: int  # bytes of trace written at most


class Limits(TypedDict):
    """A job's own limits, applied by the harness before it runs the learner's code."""

    cpu_seconds: int
    address_space_mb: int | None  # only where no memory cgroup holds the sandbox
    gpu_memory_mb: int | None  # on CUDA


class Request(TypedDict):
    """What the worker sends a job at hand-off, after ``Word.HANDOFF`` and its two descriptors."""

    spec: Spec
    code: str
    limits: Limits
    work_dir: NotRequired[str]  # a process-only fork server's job: the folder the worker made


# ---------------------------------------------------------------- child -> supervisor


class Frame(TypedDict):
    line: int
    function: str
    code: str


class Error(TypedDict):
    """Why a run did not end well, as data: ``phase`` is ``syntax``, ``load``, ``signature``,
    ``run`` (the learner's), or ``harness`` (ours); optional fields by phase."""

    phase: str
    type: str
    message: str
    traceback: list[Frame]
    line: NotRequired[int | None]
    offset: NotRequired[int | None]
    code: NotRequired[str]
    entry: NotRequired[str]
    expected: NotRequired[list[str]]
    module: NotRequired[str]
    limit: NotRequired[str]
    detail: NotRequired[str]


class Sync(TypedDict):
    t: Literal["sync"]
    label: str
    index: int
    snapshot: bool
    meter: NotRequired[list[int]]  # a meter's running counts: (number, packed, freed[, note])


class Shared(TypedDict):
    """One tensor of a hand-off: where it lies in the storage, and what it is."""

    shape: list[int]
    dtype: str
    file: int  # which of the hand-off's files (its descriptors, in order)
    offset: int


class Share(TypedDict):
    """The hand-off (``sharing``), sent by the harness before the learner's file is loaded; the
    supervisor holds it to the layout the kind asked for."""

    t: Literal["share"]
    device: str  # how the storage is shared: "cpu" (sealed memory files, their descriptors passed)
    files: list[int]  # each file's size
    tensors: list[Shared]


class Report(TypedDict):
    """The child's last message: all of it reported."""

    t: Literal["report"]
    data: Any  # the kind's own measurements
    error: Error | None
    output: str
    dropped: int


# ---------------------------------------------------------------- supervisor -> worker


class Note(TypedDict):
    """Interference the supervisor saw: ``interfered.<key>`` of messages.yaml, and its values."""

    key: str
    values: dict[str, int | str]


class Observed(TypedDict):
    """``trace["data"]["observed"]``, written by the supervisor alone (``Observer.result`` and
    ``runtime.Api.supervise``). ``meters`` is the one member the child wrote: see
    ``OBSERVED_FIELDS``."""

    counts: dict[str, int]  # syncs per label, counted
    events: list[list[Any]]  # [label, index, ms, snapshot] per sync, timed
    events_dropped: int
    timeline: list[list[Any]]  # [label, index, ms] the supervisor made itself (a modelled device)
    snapshots: list[Any]  # the parameters read from the shared mapping at the syncs that asked
    final_params: Any  # read once the child and all it started were dead
    meters: list[Any]  # per meter: the counts the child sent, and the peak kept from them
    interfered: list[Note] | None
    slowed: Any  # what the supervisor drew to make slow (phases)
    memory: Any  # the kernel's figures of the child's memory, where watched
    memory_lowered: Any
    mode: Literal["fork", "inline"]
    items: NotRequired[Any]  # the batches it served


class Death(TypedDict):
    how: Literal["signal", "exit"]
    number: int


class Trace(TypedDict):
    """What comes out of a sandbox (``trace_schema`` holds it to its schema)."""

    version: int
    kind: str
    outcome: Literal["ok", "error"]
    error: Error | None
    data: Any  # the report's data, with ``observed`` added by the supervisor
    output: str
    output_dropped: int
    timings: dict[str, float]
    death: NotRequired[Death]


# who vouches for each field of the trace; ``data`` is the child's but for ``data["observed"]``
PROVENANCE: dict[str, Source] = {
    "version": Source.OBSERVED,
    "kind": Source.OBSERVED,
    "outcome": Source.REPORTED,  # "error" when the report carried one (or the child died)
    "error": Source.REPORTED,  # the learner's, or the harness's own (phase "harness")
    "data": Source.REPORTED,
    "output": Source.REPORTED,
    "output_dropped": Source.REPORTED,
    "timings": Source.OBSERVED,
    "death": Source.OBSERVED,
}
OBSERVED_FIELDS: dict[str, Source] = {
    "counts": Source.OBSERVED,
    "events": Source.OBSERVED,
    "events_dropped": Source.OBSERVED,
    "timeline": Source.OBSERVED,
    "snapshots": Source.OBSERVED,
    "final_params": Source.OBSERVED,
    "meters": Source.REPORTED,  # the in-child meters' counts, sent over the link: a figure, never a pass
    "interfered": Source.OBSERVED,
    "slowed": Source.OBSERVED,
    "memory": Source.OBSERVED,  # the kernel's (VmRSS, VmHWM; a cgroup's peak)
    "memory_lowered": Source.OBSERVED,
    "mode": Source.OBSERVED,
    "items": Source.OBSERVED,
}


def reported(data: Mapping[str, Any], name: str, default: Any = None) -> Any:
    """The member ``name`` of a trace's ``data`` as the learner's process reported it: for a
    mistake's name or a figure shown as the program's own, never for a pass. Refuses
    ``observed`` (read it with ``worker.checks.observed``)."""
    if name == "observed":
        raise KeyError("observed is the supervisor's: not a reported field")
    return data.get(name, default) if isinstance(data, Mapping) else default


def reported_meters(observed: Mapping[str, Any]) -> list[Any]:
    """The meters' counts (``observed["meters"]``): kept by the supervisor as the child sent them,
    so reported: what the learner's process said its meters counted."""
    meters = observed.get("meters") if isinstance(observed, Mapping) else None
    return list(meters) if isinstance(meters, list) else []


def source(path: str) -> Source:
    """Who vouches for the trace field at ``path``: ``"timings"``, ``"data.observed.memory"``,
    ``"data.loss"``… A path this module does not know is ``REPORTED``."""
    parts = path.split(".")
    if parts[:2] == ["data", "observed"] and len(parts) > 2:
        return OBSERVED_FIELDS.get(parts[2], Source.REPORTED)
    if parts == ["data", "observed"]:
        return Source.OBSERVED
    return PROVENANCE.get(parts[0], Source.REPORTED)
