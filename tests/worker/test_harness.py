"""The harness runs inside the sandbox: standard library and torch only."""

import ast
import contextlib
import sys
from pathlib import Path

import pytest

from worker.checks.accumulation import reference
from worker.harness import scenarios

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "worker" / "harness"


def _siblings(node: ast.ImportFrom) -> set[str]:
    """The harness modules a relative import names: ``from . import a, b`` or ``from .a import x``."""
    return {alias.name for alias in node.names} if node.module is None else {node.module.split(".")[0]}


def test_harness_imports_only_stdlib_torch_and_itself_relatively():
    """A package (issue 41): ``harness`` in the sandbox (``python -m harness.run``), ``worker.harness``
    on the trusted side. Its own modules only by relative import (a bare ``import supervise``
    would need the folder on ``sys.path``, and would load a second copy beside the package's);
    anything else from the standard library or torch; no module puts a folder of its own on
    ``sys.path`` (the input pipeline appends the job's folder, where the learner's file is, so
    that a worker started fresh imports ``submission``: nothing of the harness's is there)."""
    own = {p.stem for p in HARNESS.glob("*.py")} - {"__init__"}
    for path in HARNESS.glob("*.py"):
        source = path.read_text()
        source_paths = source.replace("sys.path.append(api.work_dir)", "").replace("not in sys.path", "")
        assert "sys.path" not in source_paths, path
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.level == 1, (path, node.module)  # nothing above the package
                assert _siblings(node) <= own, (path, node.module)
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in own, (path, name)  # a sibling by bare name
                assert top in sys.stdlib_module_names or top == "torch", (path, name)


def test_leaf_modules_import_no_siblings():
    # the trusted checks import these (worker.harness.<name>): they stay leaves, so that judging
    # loads no instrument, supervisor or kind of the sandbox's
    own = {p.stem for p in HARNESS.glob("*.py")}
    for leaf in ("scenarios", "memory"):
        tree = ast.parse((HARNESS / f"{leaf}.py").read_text())
        imported = {
            a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
        }
        imported |= {
            name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level for name in _siblings(n)
        }
        assert not imported & own, leaf


@pytest.mark.parametrize(
    "params",
    [
        {"scenario": "mlp", "n_micro": 12, "micro_batch": 5, "accum_steps": 4, "lr": 0.1},
        {"scenario": "tokens", "n_micro": 8, "micro_batch": 2, "accum_steps": 4, "lr": 0.5},
    ],
)
def test_one_micro_batch_holds_a_quarter_of_the_cycle(params):
    ref = reference(params)
    assert len(ref.trajectory) == 2 if params["scenario"] == "tokens" else 3
    assert ref.cycle_peak == pytest.approx(4 * ref.micro_peak, rel=0.05)


def test_scenarios_are_seeded():
    a = scenarios.build({"scenario": "tokens", "n_micro": 2, "micro_batch": 2, "seed": 3})
    b = scenarios.build({"scenario": "tokens", "n_micro": 2, "micro_batch": 2, "seed": 3})
    assert all(
        (x1 == x2).all() and (y1 == y2).all()
        for (x1, y1), (x2, y2) in zip(a.micro_batches, b.micro_batches, strict=True)
    )


def test_live_tensor_meter_sees_what_a_checkpointed_backward_recomputes():
    from torch.utils.checkpoint import checkpoint

    from worker.harness import memory

    params = {"seed": 0, "width": 16, "blocks": 6, "depth": 3, "batch_size": 64, "n_batches": 1}
    model, [(x, y)], loss_fn = scenarios.block_net(params)
    weights = list(model.parameters())

    def peak(forward):
        model.zero_grad(set_to_none=True)
        with memory.LiveTensorMeter(weights) as meter:
            loss_fn(forward(x), y).backward()
        return meter.peak

    def per_block(h):
        for block in model.blocks:
            h = checkpoint(block, h, use_reentrant=False)
        return model.head(h)

    naive = peak(model)
    assert peak(per_block) <= 0.6 * naive  # 0.55
    # one checkpoint around everything: backward recomputes it all at once
    assert peak(lambda h: checkpoint(model, h, use_reentrant=False)) == naive


def test_live_tensor_meter_counts_what_is_saved_while_it_is_switched_off_and_says_so():
    """Taking the meter's dispatch mode off the stack around the naive step (torch's private
    ``_disable_current_modes``) hid every activation: peak 0 bytes, and fit-the-budget passed."""
    from torch.utils._python_dispatch import _disable_current_modes

    from worker.harness import memory

    params = {"seed": 0, "width": 16, "blocks": 6, "depth": 3, "batch_size": 64, "n_batches": 1}
    model, [(x, y)], loss_fn = scenarios.block_net(params)
    weights = list(model.parameters())
    told = []

    def report(packed, freed, note=0):
        told.append(note == memory.BLIND)

    with memory.LiveTensorMeter(weights, report, inputs=(x, y)) as meter:
        loss_fn(model(x), y).backward()
    naive = meter.peak
    assert not any(told)
    model.zero_grad(set_to_none=True)
    with memory.LiveTensorMeter(weights, report, inputs=(x, y)) as meter:
        with _disable_current_modes():
            loss = loss_fn(model(x), y)  # activations saved where no op was seen
        assert meter.peak >= 0.8 * naive  # counted anyway, through autograd's saved tensors
        loss.backward()
    assert any(told)  # and the supervisor is told at once


def test_saved_tensor_meter_counts_through_the_programs_own_hooks():
    """A loop's own saved_tensors_hooks and save_on_cpu were called interference: the meter's
    hooks were not on top. What their pack keeps is counted now; a pack that keeps no tensor
    (the saved one stored out of the meter's sight) is still reported."""
    from torch.autograd.graph import save_on_cpu, saved_tensors_hooks

    from worker.harness import memory

    scenario = scenarios.build({"seed": 0, "n_micro": 1, "micro_batch": 8})
    model, [(x, y)] = scenario.model, scenario.micro_batches
    notes = []

    def peak(context):
        with memory.SavedTensorMeter(model.parameters(), lambda p, f, note=0: notes.append(note)) as meter:
            with context():
                loss = scenario.loss_fn(model(x), y)
            loss.backward()
        return meter.peak

    plain = peak(contextlib.nullcontext)
    assert plain > 0
    assert peak(lambda: saved_tensors_hooks(lambda t: t, lambda t: t)) == plain
    assert peak(save_on_cpu) == plain
    assert memory.BLIND not in notes
    store = []
    hidden = peak(lambda: saved_tensors_hooks(lambda t: store.append(t) or len(store) - 1, store.__getitem__))
    assert hidden == 0 and memory.BLIND in notes


def test_wrapped_methods_are_bound_with_the_originals_signature():
    """torch's LR schedulers rebind ``optimizer.step.__func__``; step(closure) hands the
    recorder the gradient the closure made."""
    import inspect

    import torch

    from worker.harness import instrument

    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    instrument.wrap_step(optimizer, lambda: seen.append(model.weight.grad.clone()))
    assert inspect.signature(optimizer.step) == inspect.signature(torch.optim.SGD([model.weight]).step)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    x = torch.ones(2, 3)

    def closure():
        optimizer.zero_grad()
        loss = model(x).sum()
        loss.backward()
        return loss

    loss = optimizer.step(closure)
    scheduler.step()
    assert loss is not None and len(seen) == 1
    assert torch.equal(seen[0], torch.full((1, 3), 2.0))
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)


def test_a_one_thread_kind_names_the_profiler_and_threads_as_its_limit():
    """The memory kinds' child may start no thread (childfilter.guard): torch.profiler failed there
    with a bare 'Operation not permitted' from its C++ thread. With ``alone`` the profiler and a
    thread or process started from Python raise ``Unavailable`` with the limit named, as the
    runtime reports it; record_function labels still work. Run in a fresh interpreter: the
    patches are for the learner's process only."""
    import subprocess

    program = """
import os, threading
import torch
from worker.harness import instrument, runtime
instrument.name_limits(alone=True)
with torch.profiler.record_function("forward"):
    torch.ones(2).sum()
found = []
for start in (
    lambda: torch.profiler.profile().__enter__(),
    lambda: torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]).start(),
    lambda: torch.autograd.profiler.profile().__enter__(),
    lambda: threading.Thread(target=print).start(),
    os.fork,
):
    try:
        start()
    except RuntimeError as exc:
        error = runtime.describe_exception(exc, "run")
        found.append((error["type"], error.get("limit")))
print(found)
"""
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert found == [("Unavailable", "profiler")] * 3 + [("Unavailable", "threads")] * 2, done.stderr


# every module of the harness, whose every function is annotated (issue 41): the supervisor, its
# link and observations, the entry points, the runtime, the protocol, the scenarios and each kind
TYPED = sorted(p.stem for p in HARNESS.glob("*.py") if p.stem != "__init__")


def _typed(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Its return and every parameter but ``self``/``cls`` annotated."""
    a = node.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
    return node.returns is not None and all(
        p.annotation is not None for p in params if p.arg not in ("self", "cls")
    )


@pytest.mark.parametrize("name", TYPED)
def test_every_harness_module_is_typed(name):
    tree = ast.parse((HARNESS / f"{name}.py").read_text())
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    assert [n.name for n in defs if not _typed(n)] == [], name


# ---------------------------------------------------------------- the hand-off, end to end
# (worker/harness/sharing.py; the supervisor's side alone: tests/supervisor/test_hand_off.py)

RIGHT_LOOP = """
def _loop(model, loader, loss_fn, optimizer, accum_steps):
    optimizer.zero_grad()
    for step, (x, y) in enumerate(loader):
        (loss_fn(model(x), y) / accum_steps).backward()
        if (step + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
"""

MAPPED = """
def _mapped():
    # the parameters' shared memory file, as this process maps it
    for line in open("/proc/self/maps"):
        if "memfd:parameters" in line:
            start, end = (int(v, 16) for v in line.split()[0].split("-"))
            return start, end
    return None
"""


def test_the_parameters_are_handed_over_before_the_learners_file_loads(exercise, grade):
    """The child's set-up built the scenario and handed its parameters' storage over before
    this file was loaded: at its first line the shared memory file is mapped, and the model's
    parameters live in it; the supervisor's reads of it are what the pass rests on."""
    code = (
        MAPPED
        + RIGHT_LOOP
        + """
AT_LOAD = _mapped()
print("mapped at load", AT_LOAD is not None)

def train(model, loader, loss_fn, optimizer, accum_steps):
    start, end = AT_LOAD
    print("parameters in it", all(start <= p.data_ptr() < end for p in model.parameters()))
    _loop(model, loader, loss_fn, optimizer, accum_steps)
"""
    )
    verdict = grade(exercise("accumulate"), code.encode())
    assert verdict["status"] == "passed", verdict
    assert "mapped at load True" in verdict["output"] and "parameters in it True" in verdict["output"]


# the harness's ``Api``, found up the learner's stack (its objects are frozen out of gc's sight)
FIND_API = """
import sys
def _api():
    frame = sys._getframe()
    while frame is not None:
        for value in frame.f_locals.values():
            if type(value).__name__ == "Api":
                return value
        frame = frame.f_back
"""

# each a learner's attempt at the hand-off, after its set-up: nothing it gains
AFTER_THE_FACT = {
    # the harness's own hand-off called again, on parameters of the learner's
    "second-hand-off": FIND_API
    + """
def train(model, loader, loss_fn, optimizer, accum_steps):
    api = _api()
    own = [p.detach().clone() for p in model.parameters()]
    api.hand_off(own)
    _loop(model, loader, loss_fn, optimizer, accum_steps)
""",
    # a forged hand-off message on the link, with a descriptor of its own
    "forged-descriptor": FIND_API
    + """
import json, os, socket, struct
def train(model, loader, loss_fn, optimizer, accum_steps):
    link = _api().link
    fd = os.memfd_create("parameters", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096)
    payload = json.dumps({"t": "share", "device": "cpu", "files": [4096], "tensors": []}).encode()
    socket.send_fds(link._sock, [struct.pack("!I", len(payload)) + payload], [fd])
    link._sock.recv(1)
    _loop(model, loader, loss_fn, optimizer, accum_steps)
""",
    # the parameters moved out of the shared memory: the loop trains where nobody reads
    "rebound-data": """
def train(model, loader, loss_fn, optimizer, accum_steps):
    for p in model.parameters():
        p.data = p.data.clone()
    _loop(model, loader, loss_fn, optimizer, accum_steps)
""",
}


@pytest.mark.parametrize("name", sorted(AFTER_THE_FACT))
def test_a_hand_off_after_the_set_up_gains_the_learner_nothing(exercise, grade, name):
    verdict = grade(exercise("accumulate"), (RIGHT_LOOP + AFTER_THE_FACT[name]).encode())
    assert verdict["status"] != "passed", verdict
    text = " ".join(c["message"] for c in verdict["checks"])
    if name != "rebound-data":  # the supervisor refused it: interference, named as such
        assert "could not be trusted" in text or "cannot rely" in text, verdict


def _run_job(tmp_path: Path, spec: dict, code: str, inline: bool) -> dict:
    """``runtime.main`` on a job folder in a fresh interpreter (no sandbox), ``inline`` forced as
    on CUDA (a context exists: the learner's code runs in the supervisor's process); its trace."""
    import json
    import subprocess

    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "submission.py").write_text(code)
    program = f"""
import json, os, sys
from worker.harness import quiet
quiet.silence()
import torch
if {inline!r}:
    torch.cuda.is_initialized = lambda: True
from worker.harness import runtime
fd = os.memfd_create("trace")
runtime.main({str(tmp_path)!r}, fd)
print(os.pread(fd, 1 << 24, 0).decode())
"""
    done = subprocess.run(
        [sys.executable, "-c", program],
        cwd=ROOT,
        # one thread, as the sandbox's environment has it (worker/sandbox/host.py): an ``alone``
        # child may start none
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("inline", [False, True], ids=["fork", "inline"])
def test_the_set_up_in_the_child_and_inline_as_on_cuda_read_the_same_parameters(tmp_path, inline):
    """The same job forked (the CPU's flow: the child's hand-off, read from the supervisor's
    mapping) and inline (CUDA's path today: the set-up in this process, its hand-off mirrored
    into a mapping of its own at each sync): the same parameters read at each step and at the
    end, and the ones the loop reported."""
    spec = {
        "kind": "accumulation",
        "entry": "train",
        "device": "cpu",
        "params": {"n_micro": 4, "micro_batch": 8, "accum_steps": 2, "lr": 0.1, "seed": 0},
    }
    code = RIGHT_LOOP + "\ntrain = _loop\n"
    trace = _run_job(tmp_path, spec, code, inline)
    assert trace["error"] is None, trace["error"]
    data = trace["data"]
    seen = data["observed"]
    assert seen["mode"] == ("inline" if inline else "fork") and seen["interfered"] is None
    assert seen["counts"]["step"] == 2
    assert seen["snapshots"] == [step["params"] for step in data["steps"]]
    assert seen["final_params"] == data["final_params"] != data["initial_params"]


def test_the_layouts_given_from_shapes_alone_are_the_models():
    """chunked's and packing's supervisor asks for a layout without drawing the weights (4 MiB
    at 16,384 words): the shapes ``layout`` gives are the built model's, in order."""
    import torch

    from worker.harness import sequences, sharing

    tiny = sequences.TinyLM(40, 6)
    assert sequences.TinyLM.layout(40, 6, "float32") == sharing.layout(tiny.parameters())
    packed = sequences.PackedLM(40, 6, 12).to(torch.float64)
    assert sequences.PackedLM.layout(40, 6, 12, "float64") == sharing.layout(packed.parameters())


def test_checkpointing_draws_its_release_model_a_layer_at_a_time_as_block_net_does():
    """fit-the-budget's release run: the supervisor's layout from shapes alone (meta device) is
    the built models', and the child's layer-at-a-time draw into the handed-over storage
    (``checkpointing._draw``) gives ``scenarios.block_net``'s model and batch, bit for bit: the
    checks' reference is built by the latter."""
    import torch

    from worker.harness import checkpointing, sharing

    params = {"seed": 0, "width": 4, "blocks": 2, "depth": 2, "batch_size": 8, "n_batches": 2, "lr": 0.1}
    params |= {"memory_batch": 16, "memory_release_width": 12}
    sized = scenarios.release_params(params)
    expected, [(x, y)], _ = scenarios.block_net(sized)
    empty = checkpointing._empty(sized, "cpu")
    model, drawn_x, drawn_y = checkpointing._draw(empty, sized, "cpu", inline=True)
    assert all(torch.equal(a, b) for a, b in zip(expected.parameters(), model.parameters(), strict=True))
    assert torch.equal(x, drawn_x) and torch.equal(y, drawn_y)
    calls, _, _ = scenarios.block_net(params)
    big, _, _ = scenarios.block_net(scenarios.memory_params(params))
    whole, sampled = checkpointing._read(calls, big, expected)
    assert checkpointing.prepare(params) == (sharing.layout([*whole, *sampled]), len(whole))
    with pytest.raises(ValueError):  # a private page's bytes would be lost
        sharing.drop_pages([x])


def test_a_tensor_larger_than_a_file_spans_files_mapped_back_to_back():
    """A memory file is held under the sandbox's 16 MiB RLIMIT_FSIZE (``sharing.FILE_CAP``):
    a larger tensor (adapter's 32 MiB weights) is spread over consecutive files, each within the
    cap, mapped back to back in the child (one contiguous storage it computes in) and in the
    supervisor (its read-only views read the same values); its pages can be dropped and read
    again; a hand-off short of a file is still refused."""
    import os

    import torch

    from worker.harness import adapter, sharing
    from worker.harness.link import Interference

    cap = sharing.FILE_CAP
    tensors = [
        torch.arange(5, dtype=torch.float64),
        torch.randn(cap // 8 * 2 + 1000, dtype=torch.float64),
        torch.randn(3, 4, dtype=torch.float32),
    ]
    values = [t.clone() for t in tensors]
    message, fds = sharing.export_cpu(tensors)
    try:
        assert len(fds) == 4 and message["files"] == [40, cap, cap, 8000 + 48]
        assert all(os.fstat(fd).st_size <= cap for fd in fds)
        assert all(torch.equal(t, v) for t, v in zip(tensors, values, strict=True))
        with torch.no_grad():
            tensors[1][-1] = 7.0  # the child computes in the files: the last one's part too
        sharing.drop_pages([tensors[1]])
        assert float(tensors[1][-1]) == 7.0 and torch.equal(tensors[1][:-1], values[1][:-1])
        expected = sharing.layout(tensors)
        with pytest.raises(Interference):
            sharing.open_cpu(message, [os.dup(fd) for fd in fds[:-1]], expected)
        reader = sharing.open_cpu(message, [os.dup(fd) for fd in fds], expected)
    finally:
        for fd in fds:
            os.close(fd)
    seen = reader.tensors()
    assert all(torch.equal(s, t) for s, t in zip(seen, tensors, strict=True))
    assert reader.snapshot() == [float(v) for t in tensors for v in t.reshape(-1).tolist()]
    with torch.no_grad():
        tensors[1][0] = -1.0  # read where the child writes
    assert float(seen[1][0]) == -1.0
    params = {"inputs": 1024, "hidden": 4096, "classes": 1024}  # the exercise's base: 9 files
    layout = adapter.prepare(params)
    assert len(sharing.placement(layout)[1]) == 9 <= sharing.MAX_FILES
