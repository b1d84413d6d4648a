"""Entry point of the sandboxed child, the harness package run as a module:
``python -B -E -s -m harness.run WORK_DIR CONTROL_FD DEVICE SANDBOX_ID``, started in the
directory that holds the package and nothing else (``worker.sandbox.host.HARNESS_ROOT``,
``/opt/treino`` under bubblewrap, read-only; ``worker/sandbox/host.py``'s ``harness_command``
says why ``-E -s`` and not ``-I``).

Runs with only the standard library and torch available. It makes itself not dumpable, warms up
(imports torch and every kind's harness, takes one tiny optimizer step, creates the CUDA context
on a GPU), then makes its channel for the job (``offer``: a socket pair, one end sent to the
worker with ``R`` on the control socket) and waits on it: a warm sandbox of the pool sits here.
At hand-off the worker sends, on that channel, the job's trace file and done pipe (made then:
nothing that ran before holds them) and the request (``protocol.Request``: the spec, the code,
the limits), and closes its end (``receive``); the child applies the job's limits, writes the
spec and the code into WORK_DIR, runs it (``runtime.main``, which writes its trace into the
trace file, which the learner's child never holds), and writes ``D`` on the done pipe: the
worker then kills the whole sandbox and reads the trace (never one without the ``D``).
SANDBOX_ID only marks the processes, so that leftovers can be found.
"""

import importlib
import json
import os
import resource
import socket
import sys
import traceback
from typing import NoReturn

from . import linux, observer, quiet, runtime
from .protocol import Limits, Request, Word

HERE = os.path.dirname(os.path.abspath(__file__))

HARNESS_MODULES = sorted(
    name[:-3]
    for name in os.listdir(HERE)
    if name.endswith(".py") and name not in ("__init__.py", "__main__.py", "run.py", "template.py")
)


def warm_up(device: str, autograd: bool = True) -> None:
    """Pay the first-use costs before any job: imports, and with ``autograd`` one tiny backward
    and optimizer step on ``device``. A template (template.py) leaves the step out: the first
    backward starts autograd's device threads (on a host with a GPU, after initialising the
    CUDA driver, even for a CPU tensor), and a fork can use neither; its jobs pay it."""
    quiet.silence()  # this process is the sandbox: for good
    import torch
    import torch._dynamo  # noqa: F401  (the optimizer's first step imports it)

    for name in HARNESS_MODULES:  # the job's kind is imported by its name: here, it costs nothing
        importlib.import_module(f".{name}", __package__)

    if not autograd:
        return
    model = torch.nn.Linear(4, 2).to(device)  # no random numbers: the job's seeds stay intact
    with torch.no_grad():
        model.weight.fill_(0.5)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(3, 4, device=device)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def offer(control: socket.socket, word: Word) -> socket.socket:
    """The job's channel: a socket pair made now, by this process (not dumpable: nothing that
    ran before can hold either end), one end sent to the worker with ``word`` on ``control``.
    The worker takes it only if the kernel says this sandbox's process made it."""
    channel, theirs = socket.socketpair()
    try:
        socket.send_fds(control, [word], [theirs.fileno()])
    finally:
        theirs.close()
    return channel


def receive(channel: socket.socket) -> tuple[Request, int, int]:
    """``(request, trace_fd, done_fd)`` from the worker on ``channel`` (``job.hand_over``): the
    two descriptors with its first byte, then the request up to its end; the channel closed.
    The job's cgroup's memory counters, where the worker sent them after those two, go to the
    supervisor's observer (``observer.use_counters``)."""
    try:
        first, fds, _, _ = socket.recv_fds(channel, 1, 4)
        if first != Word.HANDOFF or len(fds) < 2:
            for fd in fds:
                os.close(fd)
            raise RuntimeError(f"the hand-off brought {len(fds)} descriptors ({first!r})")
        chunks = []
        while chunk := channel.recv(1 << 16):
            chunks.append(chunk)
    finally:
        channel.close()
    for fd in fds:
        os.set_inheritable(fd, False)
    observer.use_counters(fds[2:])
    return json.loads(b"".join(chunks).decode("utf-8")), fds[0], fds[1]


def apply_limits(limits: Limits) -> None:
    """The job's own limits, tighter than the sandbox's start-up ones; the warm-up's CPU
    time does not count against the job."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime) + 1
    cpu = spent + int(limits["cpu_seconds"])
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard != resource.RLIM_INFINITY:
        cpu = min(cpu, hard - 1)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    address_space, gpu_memory = limits.get("address_space_mb"), limits.get("gpu_memory_mb")
    if address_space:  # only where no memory cgroup holds the sandbox
        # room to grow by the job's memory: a CUDA build of torch maps gigabytes of address space
        # on import, so an absolute cap below that would fail every allocation (the worker's
        # watch of the tree's memory is the real bound there)
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * resource.getpagesize()
        size = mapped + int(address_space) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if gpu_memory:  # on CUDA: no cgroup counts device memory
        import torch

        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, int(gpu_memory) * 1024 * 1024 / total))


def run_job(work_dir: str, request: Request, trace_fd: int, done_fd: int) -> NoReturn:
    """The job part, in a warm sandbox or in a fork of a template (template.py): the job's
    limits, its files in WORK_DIR, the run and its trace into TRACE_FD, then "D" on
    DONE_FD. Ends the process once the learner's code has run."""
    apply_limits(request["limits"])
    spec = request["spec"]
    os.makedirs(os.path.join(work_dir, "tmp"), exist_ok=True)
    with open(os.path.join(work_dir, runtime.SPEC_FILE), "w", encoding="utf-8") as f:
        json.dump(spec, f)
    with open(os.path.join(work_dir, runtime.SUBMISSION), "w", encoding="utf-8") as f:
        f.write(request["code"])
    try:
        runtime.main(work_dir, trace_fd)  # the supervisor writes its trace there itself
        os.write(done_fd, Word.DONE)  # the worker kills the sandbox now: exiting torch takes a while
    except BaseException:  # noqa: BLE001 (ours, not the learner's: said in the output, exit 1)
        traceback.print_exc()
        os._exit(1)
    finally:
        os._exit(0)  # no interpreter or torch teardown, nor threads the learner left running


def main(argv: list[str]) -> None:
    work_dir, control, device = argv[0], socket.socket(fileno=int(argv[1])), argv[2]
    # warm, this process waits for its job while another job runs beside it: in the
    # process-only sandbox, a job of the same uid that could open its descriptors through /proc
    # (the job's channel, made below) would have the next job read a trace of its making
    linux.not_dumpable()
    warm_up(device)
    channel = offer(control, Word.READY)
    control.close()  # the learner's code gets no channel back to the worker
    request, trace_fd, done_fd = receive(channel)
    run_job(work_dir, request, trace_fd, done_fd)


if __name__ == "__main__":
    main(sys.argv[1:])
