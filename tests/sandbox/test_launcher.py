"""The launcher's pieces that need no sandbox: GPU binding, the choice of sandbox, the pool,
the fork path's launcher."""

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from worker import forkserver, pool, sandbox

LDCONFIG = """\
12 libs found in cache `/etc/ld.so.cache'
\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
\tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64) => /opt/nvidia/lib64/libnvidia-ptxjitcompiler.so.1
\tlibcuda.so.1 (libc6,x86-64) => /opt/nvidia/lib64/libcuda.so.1
\tlibcuda.so.1 (libc6) => /usr/lib/i386-linux-gnu/libcuda.so.1
\tlibcudart.so.12 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcudart.so.12
\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6
"""


@pytest.fixture
def fake_dev(tmp_path):
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        (tmp_path / name).touch()
    return tmp_path


def test_driver_libraries_are_the_64_bit_nvidia_ones():
    assert sandbox.driver_libraries(LDCONFIG) == [
        "/opt/nvidia/lib64/libcuda.so.1",
        "/opt/nvidia/lib64/libnvidia-ptxjitcompiler.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    ]


def test_only_the_assigned_gpu_is_bound(fake_dev):
    args = sandbox._gpu_args(1, dev=str(fake_dev), ldconfig=LDCONFIG)
    pairs = list(zip(args, args[1:], args[2:], strict=False))
    devices = [dst for flag, _src, dst in pairs if flag == "--dev-bind"]
    assert devices == ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert "/dev/nvidia0" not in args and "/dev/nvidia-uvm-tools" not in args
    assert "/dev/nvidia-modeset" not in args
    binds = [src for flag, src, _dst in pairs if flag == "--ro-bind"]
    # /usr/lib is visible already; the libraries elsewhere are bound one by one
    assert binds == ["/opt/nvidia/lib64/libcuda.so.1", "/opt/nvidia/lib64/libnvidia-ptxjitcompiler.so.1"]


def test_a_missing_gpu_node_is_refused(fake_dev):
    os.remove(fake_dev / "nvidia-uvm")
    with pytest.raises(sandbox.SandboxUnavailable, match="nvidia-uvm is missing"):
        sandbox._gpu_args(0, dev=str(fake_dev), ldconfig=LDCONFIG)


def test_the_worker_owns_one_gpu(fake_dev, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert sandbox.assigned_gpu(str(fake_dev)) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(sandbox.SandboxUnavailable, match="one device number"):
        sandbox.assigned_gpu(str(fake_dev))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(sandbox.SandboxUnavailable, match="2 GPUs visible"):
        sandbox.assigned_gpu(str(fake_dev))
    os.remove(fake_dev / "nvidia0")  # a container given GPU 1 only
    assert sandbox.assigned_gpu(str(fake_dev)) == 1


def test_bwrap_args_show_the_isolation():
    args = sandbox._bwrap_args("cpu", None, 60123, 9)
    for flag in (
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--unshare-uts",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
    ):
        assert flag in args
    assert args[args.index("--uid") + 1] == args[args.index("--gid") + 1] == "60123"
    assert args[args.index("--seccomp") + 1] == "9"
    assert "--dev" not in args  # bwrap would nest a namespace whose root shows in uid_map
    read_only = {args[i + 2] for i, a in enumerate(args) if a == "--ro-bind"}
    assert "/proc/sys" in read_only
    assert "/proc/sysrq-trigger" in read_only or not os.path.exists("/proc/sysrq-trigger")
    visible = {args[i + 2] for i, a in enumerate(args) if a in ("--ro-bind", "--bind")}
    from app.config import ROOT

    assert not any(
        v == str(ROOT) or v.startswith(str(ROOT / "lessons")) or v.startswith(str(ROOT / "var"))
        for v in visible
    )
    assert "--bind" not in args  # nothing of the host is writable
    devices = {args[i + 2] for i, a in enumerate(args) if a == "--dev-bind"}
    assert devices == {f"/dev/{name}" for name in sandbox.DEVICES}


def test_mode_choice(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: "bubblewrap (bwrap) is not installed")
    assert sandbox.isolation("process") == "process"
    assert sandbox.isolation("auto") == "process"
    with pytest.raises(sandbox.SandboxUnavailable, match="TREINO_SANDBOX=bwrap but bubblewrap"):
        sandbox.isolation("bwrap")
    monkeypatch.setattr(sandbox, "bwrap_problem", lambda: None)
    assert sandbox.isolation("auto") == sandbox.isolation("bwrap") == "bwrap"


def test_cuda_is_mandatory_when_asked(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert sandbox.resolve_device("auto") == "cpu"
    with pytest.raises(sandbox.SandboxUnavailable, match="TREINO_DEVICE=cuda"):
        sandbox.resolve_device("cuda")


class FakeBox:
    started = 0

    def __init__(self, ready=False, alive=True):
        FakeBox.started += 1
        self._ready, self._alive, self.closed = ready, alive, False

    def ready(self, timeout=0):
        return self._ready and self._alive

    def alive(self):
        return self._alive

    def close(self):
        self.closed = True


def test_pool_hands_out_a_warm_box_and_refills():
    boxes = []

    def start():
        boxes.append(FakeBox())
        return boxes[-1]

    def eventually(condition):  # a condition, waited for as long as a loaded machine may need
        deadline = time.monotonic() + 30
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        return condition()

    p = pool.Pool(2, start=start)
    assert len(boxes) == 2
    boxes[1]._ready = True
    assert p.take() is boxes[1]  # the warm one, not the first started
    time.sleep(0.2)
    assert len(boxes) == 2  # not replaced while its job runs: the job keeps the cores
    p.refill()  # the job is done
    assert eventually(lambda: len(boxes) == 3 and len(p._boxes) == 2)
    boxes[0]._alive = False
    taken = p.take()
    assert boxes[0].closed and taken is boxes[2]  # a dead one is never handed out
    assert eventually(lambda: len(boxes) == 4)  # the dead one is replaced at once
    p.refill()
    assert eventually(lambda: len(boxes) == 5)  # and the taken one once its job is done
    boxes[4]._alive = False  # dies while waiting: the pool's thread notices and replaces it
    assert eventually(lambda: boxes[4].closed and len(boxes) == 6)
    p.close()
    assert all(b.closed for b in boxes[3:])


def test_the_pool_starts_its_sandboxes_from_its_own_thread():
    """bwrap --die-with-parent follows the starting thread: a refill from a short-lived thread
    (an executor's, a request's) would leave sandboxes that die with it."""
    threads = []

    def start():
        threads.append(threading.current_thread().name)
        return FakeBox(ready=True)

    p = pool.Pool(1, start=start)
    worker = threading.Thread(target=lambda: (p.take(), p.refill()))
    worker.start()
    worker.join()
    deadline = time.monotonic() + 30
    while len(threads) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    p.close()
    assert threads == ["treino-pool", "treino-pool"]


def test_an_empty_pool_goes_cold():
    p = pool.Pool(0, start=FakeBox)
    assert p._boxes == [] and isinstance(p.take(), FakeBox)
    p.close()


def test_writable_tmpfs_comes_before_the_read_only_binds():
    """A checkout (and so its venv) under /tmp must stay visible: the tmpfs is mounted first."""
    from worker import sandbox

    args = sandbox._bwrap_args("cpu", None, 60123, 9)
    tmp = args.index("/tmp", args.index("--tmpfs"))
    binds = [i for i, a in enumerate(args) if a == "--ro-bind"]
    assert binds and all(i > tmp for i in binds)


def test_a_pool_whose_sandboxes_cannot_start_says_why_and_leaves_nothing_running():
    def start():
        raise sandbox.SandboxUnavailable("bwrap cannot create its namespaces")

    before = set(threading.enumerate())
    with pytest.raises(sandbox.SandboxUnavailable, match="namespaces"):
        pool.Pool(2, start=start)
    deadline = time.monotonic() + 30
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not set(threading.enumerate()) - before


def test_waiting_for_the_reaping_while_sandboxes_are_handed_to_it():
    """Grades in parallel threads without a pool (`lessons check`, the slow tests): one thread
    waits for every reaping while another hands a used sandbox over."""

    class Used:
        def __init__(self, n):
            self.id = str(n)

        def close(self):
            pass

    errors, stop = [], threading.Event()

    def wait_for_all():
        while not stop.is_set():
            try:
                sandbox.reap_all(1)
            except RuntimeError as exc:  # e.g. "cannot join thread before it is started"
                errors.append(exc)
                return

    waiter = threading.Thread(target=wait_for_all)
    waiter.start()
    for n in range(5000):
        sandbox._reap(Used(n))
        if errors:
            break
    stop.set()
    waiter.join()
    assert not errors


def test_the_memory_watch_counts_shared_pages_once():
    """Where no cgroup holds a job, the worker sums its tree's memory: forked DataLoader workers
    share their parent's pages, and counting them once each (RSS) would kill a correct job."""
    import mmap
    import signal

    held = mmap.mmap(-1, 128 * 1024 * 1024)
    held.write(b"x" * len(held))  # 128 MiB resident, then shared by three forks
    before = sandbox.tree_memory(os.getpid())
    children = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:
            signal.pause()
            os._exit(0)
        children.append(pid)
    try:
        grown = sandbox.tree_memory(os.getpid()) - before
        child_rss = sum(int(Path(f"/proc/{p}/statm").read_text().split()[1]) * sandbox.PAGE for p in children)
        assert child_rss > 3 * 128 * 1024 * 1024  # what counting RSS would have added
        assert grown < 64 * 1024 * 1024, grown
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        held.close()


# ---------------------------------------------------------------- the fork path's launcher


def test_a_template_runs_with_a_plain_proc_and_may_make_namespaces():
    """Its jobs make their own namespaces and mount a fresh /proc (refused where the /proc in
    view has locked over-mounts), then mask it as a single-use sandbox's is masked."""
    args = sandbox._bwrap_args("cpu", None, 60123, 9, forks=True)
    assert "--disable-userns" not in args
    bound = [args[i + 2] for i, a in enumerate(args) if a == "--ro-bind"]
    assert not any(path.startswith("/proc/") for path in bound)
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-net", "--die-with-parent"):
        assert flag in args
    config = json.loads(sandbox.template_config(True))
    assert config["proc_read_only"] == list(sandbox.PROC_READ_ONLY)
    assert config["proc_hidden"] == list(sandbox.PROC_HIDDEN)


@pytest.mark.slow
def test_the_templates_filter_allows_its_setup_calls_and_refuses_the_rest():
    if sandbox.bwrap_problem() is not None:
        pytest.skip(f"bwrap unavailable here: {sandbox.bwrap_problem()}")
    probe = """
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
for name, nr, args in (("unshare", 272, (0x10000000,)), ("ptrace", 101, (16, 1, 0, 0)),
                       ("bpf", 321, (0, None, 0)), ("io_uring_setup", 425, (1, None))):
    print(name, libc.syscall(nr, *args), errno.errorcode.get(ctypes.get_errno()))
"""
    done = sandbox.run_isolated([sys.executable, "-I", "-S", "-c", probe], timeout=60, forks=True)
    out = done.stdout.decode()
    assert "unshare 0" in out, (out, done.stderr)
    for name in ("ptrace", "bpf", "io_uring_setup"):
        assert f"{name} -1 EPERM" in out, out


def test_the_grader_forks_only_where_it_can_and_warm_sandboxes_are_wanted(monkeypatch, caplog):
    started = []
    monkeypatch.setattr(forkserver, "ForkServer", lambda *a, **k: started.append(a) or "fork server")
    monkeypatch.setattr(forkserver, "problem", lambda isolation: None)
    setup = sandbox.Setup("bwrap", "cpu")
    assert forkserver.runner("fork", setup, 2) == "fork server"
    assert started == [("bwrap", "cpu", None)]
    for start, size in (("exec", 2), ("fork", 0)):  # asked for exec; `treino check`'s cold one
        runner = forkserver.runner(start, setup, size)
        assert isinstance(runner, pool.Pool)
        runner.close()
    monkeypatch.setattr(forkserver, "problem", lambda isolation: "no user namespaces here")
    runner = forkserver.runner("fork", setup, 2)
    assert isinstance(runner, pool.Pool)
    runner.close()
    assert "no user namespaces here" in caplog.text


def test_a_host_where_templates_never_get_warm_falls_back_to_single_use_sandboxes(monkeypatch):
    """Say a library starts threads in every process there: the template refuses to serve,
    twice in a row; jobs then go to a pool of single-use sandboxes, and none is lost."""

    class Unwarmable:
        isolation, device = "process", "cpu"

        def __init__(self) -> None:
            self.id, self.closed = f"t{len(templates)}", False
            templates.append(self)

        def ready(self, timeout: float = 0) -> bool:
            return False

        def alive(self) -> bool:
            return not self.closed

        def tail(self) -> str:
            return "template: 3 threads after warm-up (python3, cuda00001400006, pt_autograd_0)"

        def close(self) -> None:
            self.closed = True

    class Single:
        """A single-use sandbox that answers at once."""

        def __init__(self, *args) -> None:
            pass

        def ready(self, timeout: float = 0) -> bool:
            return True

        def alive(self) -> bool:
            return True

        def run(self, kind, job, code, limits, cancel=None) -> sandbox.Result:
            return sandbox.Result("ok", {"single-use": True}, 1, "", 0)

        def close(self) -> None:
            pass

    templates: list[Unwarmable] = []
    monkeypatch.setattr(forkserver, "Sandbox", Single)
    fs = forkserver.ForkServer("process", "cpu", start=Unwarmable, fallback_size=1)
    try:
        results = [fs.run("accumulation", {}, b"", sandbox.Limits()) for _ in range(4)]
        assert all(r.trace == {"single-use": True} for r in results)  # cold, then the pool's
        assert fs._fallback is not None
        deadline = time.monotonic() + 10
        while fs.warm() != 1 and time.monotonic() < deadline:  # the pool's is being replaced
            time.sleep(0.01)
        assert fs.warm() == 1
        assert len(templates) == forkserver.WARM_UP_FAILURES  # no template started after that
        assert all(t.closed for t in templates)
    finally:
        fs.close()


def test_a_venv_under_tmp_is_bound_back_over_a_forked_jobs_own_tmp():
    """A clone in /tmp (CI's, say) keeps its venv there: a forked job's own tmpfs on /tmp would
    hide it, and the first lazy `import torch.x` of the learner's code would fail; the job binds
    such paths back, read-only."""
    paths = ["/tmp/ci/.venv", "/root/.pyenv/versions/3.11.7", "/usr/lib", "/dev/shm/py", "/tmpfoo"]
    assert sandbox.under_job_tmpfs(paths) == ["/tmp/ci/.venv", "/dev/shm/py"]
    config = json.loads(sandbox.template_config(isolate=True))
    assert set(sandbox.under_job_tmpfs([sys.prefix])) <= set(config["keep"])  # this venv, if in /tmp


# ---------------------------------------------------------------- the exec start, cold


@pytest.mark.slow  # real sandboxes, real torch: one cold interpreter per file
@pytest.mark.parametrize("isolation", ["bwrap", "process"])
def test_a_cold_single_use_sandbox_grades_an_exercise_bank(isolation):
    """The exec start with no warm pool: `treino check`'s and `treino lessons check`'s, and where
    a fork server sends a job its template failed. Each file of token-loss's bank in a sandbox of
    its own, started cold: the solution passes and each mistake is named. (The golden files are
    graded through fork servers, tests/worker/conftest.py; tests/sandbox's hostile and forging
    suites run both starts from warm sandboxes.)"""
    if isolation == "bwrap" and (why := sandbox.bwrap_problem()) is not None:
        pytest.skip(f"bwrap unavailable here: {why}")
    from app.config import get_settings
    from app.lessons.course import load_course
    from worker.grading import Grader

    exercise = load_course(get_settings().lessons_dir).exercise("gradient-accumulation/token-loss")
    assert exercise is not None
    setup = sandbox.Setup(isolation, "cpu")
    runner = forkserver.runner("fork", setup, 0)  # no warm sandboxes wanted: never forked
    assert isinstance(runner, pool.Pool) and runner.size == 0
    with Grader(setup, runner) as grader:
        assert grader.check_exercise(exercise) == []


def test_both_starts_hand_a_job_to_one_job_handle():
    """A single-use sandbox (a warm pool's, or cold) and a fork of a template are one ``Job``:
    the same hand-off, wait and result (``Job.run``); each only gets ready, kills and closes in
    its own way."""
    for handle in (sandbox.Sandbox, forkserver.ForkedJob):
        assert issubclass(handle, sandbox.Job)
        assert not getattr(handle, "__abstractmethods__", None), handle
    assert forkserver.ForkedJob.run is sandbox.Job.run
