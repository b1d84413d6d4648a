"""`make gpu-check` (bench/gpu.py): what can be proven without a GPU is proven here; the checks
that need one are marked `cuda` and skipped on the CPU, saying why."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from worker.harness import quiet  # noqa: E402

with quiet.ignored():
    import torch

from app.config import ROOT, get_settings  # noqa: E402
from app.lessons.course import load_course  # noqa: E402
from bench import gpu  # noqa: E402
from bench.gpu import Result  # noqa: E402

NO_CUDA = gpu.no_cuda(torch)
needs_cuda = pytest.mark.skipif(NO_CUDA is not None, reason=f"needs CUDA: {NO_CUDA}")
GPU = "8f3c0d2e-1111-2222-3333-444455556666"
GOOD_FACTS = {
    "nodes": ["nvidia-uvm", "nvidia3", "nvidiactl"],
    "seccomp": "2",
    "uid_map": "     60949      60949          1\n",
    "visible": None,
    "cuda": True,
    "uuids": [GPU],
    "first_kernel_ms": 0.4,
}


@pytest.fixture(scope="module")
def course():
    return load_course(get_settings().lessons_dir)


def _grader(device: str):
    from worker import sandbox
    from worker.grading import Grader

    settings = get_settings()
    setup = sandbox.setup(settings.sandbox, device)
    return Grader.running(settings, 0, setup=setup)


@pytest.fixture(scope="module")
def cpu_grader():
    with _grader("cpu") as grader:
        yield grader


@pytest.fixture(scope="module")
def cuda_grader():
    with _grader("cuda") as grader:
        yield grader


# ---------------------------------------------------------------- without CUDA


def test_without_cuda_it_says_so_in_one_line_exits_0_and_writes_nothing(tmp_path):
    docs = ROOT / "docs" / "gpu.md"
    before = docs.read_bytes() if docs.exists() else None
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}  # no GPU for it, whatever this machine has
    for extra in ([], ["--output", str(tmp_path / "gpu.md")]):
        done = subprocess.run(
            [sys.executable, "-m", "bench.gpu", *extra],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert len(lines) == 1 and lines[0].startswith("no CUDA: "), done.stdout
        assert "left as it is" in lines[0]
    assert not (tmp_path / "gpu.md").exists()
    assert (docs.read_bytes() if docs.exists() else None) == before


def test_make_gpu_check_runs_that_entry_point():
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "gpu-check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "-m bench.gpu" in done.stdout.splitlines()[-1]


def test_the_reason_names_a_cpu_build_of_torch(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None)
    assert gpu.no_cuda(torch) == f"torch {torch.__version__} is built without CUDA"


# ---------------------------------------------------------------- the report


def test_the_report_leads_with_what_failed_and_lists_every_row():
    results = [
        Result(gpu.SANDBOX, "the seccomp filter is in force", "passed", "Seccomp: 2"),
        Result(gpu.EXERCISES, "`amp/loop`, autocast bfloat16", "n/a", "compute capability below 8.0"),
        Result(gpu.SANDBOX, "only the assigned GPU's device nodes", "failed", "nvidia0, nvidia1 | x"),
        Result(gpu.FIGURES, "lesson 4's model", "passed", "saved for backward\n1.0 KiB"),
    ]
    page = gpu.render({"card": "NVIDIA Test, compute capability 7.5"}, results)
    lines = page.splitlines()
    assert lines[0] == "# GPU check"
    assert "**1 of 3 checks failed**: Sandbox on the GPU — only the assigned GPU's device nodes." in lines
    assert "| card | NVIDIA Test, compute capability 7.5 |" in lines
    assert "| only the assigned GPU's device nodes | ✗ **failed** | nvidia0, nvidia1 \\| x |" in lines
    assert "| `amp/loop`, autocast bfloat16 | — n/a | compute capability below 8.0 |" in lines
    assert "| lesson 4's model | ✓ passed | saved for backward 1.0 KiB |" in lines
    # sections in their fixed order, each once, whatever order the rows came in
    headings = [line for line in lines if line.startswith("## ")]
    assert headings == [
        "## Machine",
        f"## {gpu.SANDBOX}",
        f"## {gpu.EXERCISES}",
        f"## {gpu.FIGURES}",
        "## Running it on a lent machine",  # how to run it again there, on every page
    ]
    # the sandbox section holds both of its rows, in the order they were found
    sandbox = lines[lines.index(f"## {gpu.SANDBOX}") : lines.index(f"## {gpu.EXERCISES}")]
    assert [line.split(" | ")[0] for line in sandbox if line.startswith("| ") and "---" not in line] == [
        "| Check",
        "| the seccomp filter is in force",
        "| only the assigned GPU's device nodes",
    ]


def test_every_claim_that_waits_for_a_gpu_is_a_row_saying_how_its_proof_went(course):
    from app.lessons.proofs import Proven

    waiting = [c for c in course.claims if c.device == "cuda"]
    assert waiting, "the course makes claims only a GPU can show"
    failed = "line 9: AssertionError: float32"
    proven = [Proven(c, i > 0, 2.0, "" if i else failed) for i, c in enumerate(waiting)]
    rows = gpu.claims_rows(proven)
    assert [r.section for r in rows] == [gpu.CLAIMS] * len(waiting)
    first = waiting[0]
    assert rows[0].name.startswith(f"{first.card.lesson}/{first.id} ({first.proof.name}): ")
    assert first.text in rows[0].name
    assert (rows[0].status, rows[0].measured) == ("failed", failed)
    assert {(r.status, r.measured) for r in rows[1:]} <= {("passed", "2.0 s")}
    page = gpu.render({}, rows)
    assert f"## {gpu.CLAIMS}" in page.splitlines()
    assert f"**1 of {len(waiting)} checks failed**" in page


def test_the_report_says_when_everything_passed():
    page = gpu.render(
        {},
        [
            Result(gpu.RUN, "the whole check within 8 minutes", "passed", "3.1 min"),
            Result(gpu.FIGURES, "bf16", "n/a"),
        ],
    )
    assert "**All 1 checks passed.**" in page.splitlines()


def test_a_check_that_raises_is_one_failed_row_and_the_others_still_run():
    def broken():
        raise RuntimeError("the pool could not start\nsecond line")

    results = gpu.run_checks(
        [
            (gpu.SANDBOX, "what a job sees", broken),
            (gpu.WEB, "a submission", lambda: [Result(gpu.WEB, "a submission", "passed", "120 ms")]),
        ]
    )
    assert results == [
        Result(gpu.SANDBOX, "what a job sees", "failed", "RuntimeError: the pool could not start"),
        Result(gpu.WEB, "a submission", "passed", "120 ms"),
    ]


@pytest.mark.parametrize("status, code", [("passed", 0), ("failed", 1)])
def test_on_cuda_the_report_is_written_and_a_failed_row_fails_the_run(tmp_path, monkeypatch, status, code):
    class Checks:  # what GpuCheck gives main, without a GPU
        properties, gpu, setup = SimpleNamespace(name="Fake"), 0, SimpleNamespace(isolation="bwrap")

        def __init__(self, torch, start_up):
            assert start_up == {"context_ms": 300.0}

        def about(self):
            return {"card": "Fake"}

        def checks(self):
            return [(gpu.SANDBOX, "seccomp", lambda: [Result(gpu.SANDBOX, "seccomp", status, "2")])]

    monkeypatch.setattr(gpu, "no_cuda", lambda torch: None)
    monkeypatch.setattr(gpu, "measure_start_up", lambda torch: {"context_ms": 300.0})
    monkeypatch.setattr(gpu, "GpuCheck", Checks)
    monkeypatch.setenv("TREINO_DEVICE", "cpu")  # main sets cuda; put back afterwards
    output = tmp_path / "gpu.md"
    assert gpu.main(["--output", str(output)]) == code
    lines = output.read_text().splitlines()
    assert "| card | Fake |" in lines and f"| seccomp | {gpu.MARKS[status]} | 2 |" in lines
    within = f"| the whole check within {gpu.LIMIT_SECONDS // 60} minutes | ✓ passed |"
    assert any(line.startswith(within) for line in lines)


# ---------------------------------------------------------------- judging what a job saw


def test_a_job_that_sees_only_its_gpu_under_the_filter_passes():
    rows = gpu.judge_sandbox(GOOD_FACTS, 3, f"GPU-{GPU.upper()}")
    assert [r.status for r in rows] == ["passed"] * 4, rows
    assert rows[0].measured == "nvidia-uvm, nvidia3, nvidiactl"


@pytest.mark.parametrize(
    "change, failing",
    [
        ({"nodes": ["nvidia-uvm", "nvidia-uvm-tools", "nvidia3", "nvidiactl"]}, 0),
        ({"nodes": ["nvidia-uvm", "nvidia0", "nvidia3", "nvidiactl"]}, 0),
        ({"nodes": ["nvidia-uvm", "nvidiactl"]}, 0),
        ({"seccomp": "0"}, 1),
        ({"uid_map": "         0          0 4294967295\n"}, 2),
        ({"uid_map": "     65534          0          1\n"}, 2),  # root's bwrap without a uid switch
        ({"uid_map": ""}, 2),
        ({"uuids": [GPU, "0000-other"]}, 3),
        ({"uuids": ["0000-other"]}, 3),
    ],
)
def test_each_way_a_job_could_see_too_much_fails_its_row(change, failing):
    rows = gpu.judge_sandbox({**GOOD_FACTS, **change}, 3, GPU)
    assert [i for i, r in enumerate(rows) if r.status == "failed"] == [failing], rows


def test_a_gpu_that_cannot_be_identified_is_not_taken_as_the_right_one():
    rows = gpu.judge_sandbox(GOOD_FACTS, 3, None)
    assert rows[3].status == "failed" and "cannot be told" in rows[3].measured


def test_outer_uids_reads_every_range():
    assert gpu.outer_uids("0 100000 65536\n 65536 0 1\n") == [(100000, 65536), (0, 1)]


def _verdict(status, message, ms=900):
    return {"status": status, "checks": [{"message": message}], "metrics": {"sandbox_ms": ms}, "output": ""}


def test_a_memory_bomb_counts_as_stopped_only_with_the_named_cause():
    oom = "Your code raised OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB"
    assert gpu.judge_memory_stop(_verdict("error", oom), "OutOfMemoryError") == (
        True,
        f"error after 0.9 s: {oom[:160]}",
    )
    crashed = "The program was stopped before it could report (memory): it may have used too much memory"
    assert gpu.judge_memory_stop(_verdict("error", crashed), "(memory)")[0]
    cpu = crashed.replace("(memory)", "(cpu)")
    assert not gpu.judge_memory_stop(_verdict("error", cpu), "(memory)")[0]
    assert not gpu.judge_memory_stop(_verdict("timeout", "ran for more than 60 s"), "(memory)")[0]


def test_a_probe_that_printed_nothing_says_what_happened_instead():
    with pytest.raises(gpu.ProbeError, match=r"printed nothing \(error: Your code raised NameError"):
        gpu.probe_facts(_verdict("error", "Your code raised NameError: x"))
    assert gpu.probe_facts({"output": 'hello\nGPUCHECK {"a": 1}\n'}) == {"a": 1}


def test_the_host_gpus_and_the_drivers_list(tmp_path):
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps", "null"):
        (dev / name).touch()
    assert gpu.host_gpus(str(dev)) == [0, 1]
    gpus = tmp_path / "gpus"
    for minor, bus in ((0, "0000:18:00.0"), (1, "0000:2a:00.0")):
        (gpus / bus).mkdir(parents=True)
        (gpus / bus / "information").write_text(
            f"Model: \t\t NVIDIA H200\nGPU UUID: \t GPU-{minor}abc\nBus Location: \t {bus}\n"
            f"Device Minor: \t {minor}\nGPU Excluded:\t No\n"
        )
    assert gpu.driver_gpus(str(gpus)) == {0: "GPU-0abc", 1: "GPU-1abc"}
    assert gpu.driver_gpus(str(tmp_path / "absent")) == {}


def test_the_figures_compare_the_devices():
    found = [
        {"device": "cpu", "dtype": "float64", "amp": None, "saved_bytes": 3072, "ms_per_step": 2.0},
        {
            "device": "cuda",
            "dtype": "float64",
            "amp": None,
            "saved_bytes": 3072,
            "cuda_peak_bytes": 4096,
            "ms_per_step": 0.5,
        },
        {
            "device": "cuda",
            "dtype": "float32",
            "amp": "bfloat16",
            "saved_bytes": 1024,
            "cuda_peak_bytes": 2048,
            "ms_per_step": 0.4,
        },
    ]
    params = {"batch_size": 64, "width": 16, "blocks": 6, "depth": 3}
    rows = gpu.figures_rows(found, params, bf16=True)
    assert [r.measured for r in rows] == [
        "saved for backward 3.0 KiB · 2.00 ms/step",
        "saved for backward 3.0 KiB · max_memory_allocated 4.0 KiB above the resting weights · "
        "0.50 ms/step (synchronised) · 4.0× the CPU's speed",
        "saved for backward 1.0 KiB · max_memory_allocated 2.0 KiB above the resting weights · "
        "0.40 ms/step (synchronised)",
    ]
    assert rows[2].name.endswith("float32, autocast bfloat16 on CUDA")
    assert gpu.figures_rows(found[:1], params, bf16=False)[-1].status == "n/a"


MIB = 1024**2


def test_the_learners_code_in_a_child_with_its_own_context_passes():
    """NVML's readings (pid → bytes): the probe's process holds the most; its parent, the
    supervisor, is listed too. Another job's lone context beside it changes nothing."""
    readings = [
        {40: 600 * MIB},  # the child made its context before the request
        {40: 856 * MIB, 39: 500 * MIB, 77: 500 * MIB},  # the probe's 256 MiB; 77: a waiting job
    ]
    held, seen = gpu.judge_contexts(readings, {40: 39, 39: 38, 77: 76})
    assert held, seen
    assert seen == (
        "2 contexts: the learner's pid 40 (856 MiB, the probe's 256 in it), its supervisor pid 39 (500 MiB)"
    )


@pytest.mark.parametrize(
    "readings, parents, says",
    [
        ([], {}, "NVML listed no process"),
        # inline: the learner's code in the supervisor, whose parent (the sandbox's init) has none
        ([{39: 856 * MIB}], {39: 38}, "the probe's pid 39 (856 MiB) has no parent holding a context"),
        # a context in the parent, but the probe's memory there: the learner is not the child
        ([{39: 856 * MIB, 40: 500 * MIB}], {40: 39, 39: 38}, "pid 39"),
        ([{40: 856 * MIB, 77: 500 * MIB}], {40: 39, 77: 76}, "parent 39"),
    ],
)
def test_a_learner_without_a_supervisor_holding_a_context_beside_it_fails(readings, parents, says):
    held, seen = gpu.judge_contexts(readings, parents)
    assert not held and says in seen, seen


def test_the_context_probe_holds_what_the_judge_looks_for():
    source = gpu.context_source(2.5)
    assert f"torch.empty({gpu.CONTEXT_PROBE_MIB} << 20" in source and "time.sleep(2.5)" in source
    compile(source, "probe", "exec")


def test_an_attack_on_the_supervisor_must_not_pass_and_the_next_job_must():
    error = {"status": "error", "metrics": {"sandbox_ms": 120}}
    passed = {"status": "passed", "metrics": {"sandbox_ms": 90}}
    assert gpu.judge_attacks({"SIGSTOP": error, "SIGKILL": error}, passed) == (
        True,
        "SIGSTOP: error in 120 ms; SIGKILL: error in 120 ms; the correct loop next: passed",
    )
    assert not gpu.judge_attacks({"SIGSTOP": passed, "SIGKILL": error}, passed)[0]
    assert not gpu.judge_attacks({"SIGSTOP": error}, {"status": "timeout", "metrics": {}})[0]
    source = gpu.attack_source("def train(*a):\n    pass\n", "SIGSTOP")
    assert source.splitlines()[:2] == ["import os, signal", "os.kill(os.getppid(), signal.SIGSTOP)"]
    compile(source, "attack", "exec")


def test_the_hand_off_on_cuda_passes_within_its_ratio_of_the_cpus():
    assert gpu.judge_handoff([150, 140, 900], [100, 100, 100]) == (
        True,
        "150 ms on CUDA, 100 ms on the CPU: 1.50× (medians of 3)",
    )
    held, seen = gpu.judge_handoff([700, 700, 700], [100, 100, 100])
    assert not held and "7.00×" in seen


def test_solution_figures_name_what_differs_between_the_devices():
    cuda_v = {"status": "passed", "metrics": {"peak_activation_bytes": 480, "sandbox_ms": 41}}
    cpu_v = {"status": "passed", "metrics": {"peak_activation_bytes": 480, "sandbox_ms": 30}}
    assert gpu.compare_metrics(cuda_v, cpu_v) == (
        "passed on CUDA, passed on the CPU · peak_activation_bytes 480 on both · sandbox_ms 41 vs 30"
    )


# ---------------------------------------------------------------- the probes, in the real sandbox


@pytest.mark.slow
def test_the_probes_run_in_the_real_sandbox(course, cpu_grader):
    """The facts and figures probes as a job runs them here (CPU): they report, and say true
    things (float32 activations take half the bytes of float64 ones)."""
    exercise = course.exercise(gpu.PROBE_EXERCISE)
    facts = gpu.probe_facts(gpu.run_probe(cpu_grader, exercise, gpu.FACTS_PROBE))
    assert {"nodes", "seccomp", "uid_map", "visible", "cuda"} <= facts.keys()
    assert facts["seccomp"].isdigit() and gpu.outer_uids(facts["uid_map"])
    params = course.exercise(gpu.FIGURES_EXERCISE).check_params
    source = gpu.figures_source(params, [("cpu", "float64", None), ("cpu", "float32", None)])
    f64, f32 = gpu.probe_facts(gpu.run_probe(cpu_grader, exercise, source))
    labels = params["batch_size"] * 8  # the int64 targets cross-entropy saves: the same in both
    assert f64["saved_bytes"] == 2 * f32["saved_bytes"] - labels > 0
    assert f64["ms_per_step"] > 0 and "cuda_peak_bytes" not in f64


# ---------------------------------------------------------------- on CUDA


@pytest.mark.slow
@pytest.mark.cuda
@needs_cuda
def test_on_cuda_a_job_sees_only_its_gpu_under_the_filter(course, cuda_grader):
    setup = cuda_grader.setup
    facts = gpu.probe_facts(gpu.run_probe(cuda_grader, course.exercise(gpu.PROBE_EXERCISE), gpu.FACTS_PROBE))
    expected = gpu.driver_gpus().get(setup.gpu) or str(torch.cuda.get_device_properties(0).uuid)
    rows = gpu.judge_sandbox(facts, setup.gpu, expected)
    assert [r for r in rows if r.status != "passed"] == []
    assert facts["first_kernel_ms"] < gpu.FIRST_KERNEL_MS


@pytest.mark.slow
@pytest.mark.cuda
@needs_cuda
def test_on_cuda_the_figures_probe_reads_max_memory_allocated(course, cuda_grader):
    params = course.exercise(gpu.FIGURES_EXERCISE).check_params
    source = gpu.figures_source(params, [("cuda", "float32", None), ("cuda", "float32", "float16")])
    f32, f16 = gpu.probe_facts(gpu.run_probe(cuda_grader, course.exercise(gpu.PROBE_EXERCISE), source))
    assert f32["saved_bytes"] > f16["saved_bytes"] > 0  # autocast saves 16-bit activations
    assert f32["cuda_peak_bytes"] > 0 and f16["cuda_peak_bytes"] > 0
