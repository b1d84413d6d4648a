"""Decoys (issue 41): wrong programs that passed, or that the graded inputs let pass, on three
exercises, each run through the real grading path under both starts (conftest's PAIRS). None may
pass, and each exercise's solution still does.

- train-an-adapter: a decoy adapter of the asked rank beside a rank-8 one that does the work.
  Every tensor an optimizer updates besides the model's is read by the supervisor in the pool
  the harness puts it in (make_optimizer's, a group added later, an optimizer of the program's
  own), so a second adapter is counted; one trained by hand, or with torch's global hooks
  cleared, changes what the program hands ``loss_fn`` or what its model computes once ``train``
  returns, both recomputed from the adapter the supervisor read (that is the program's report:
  it fails a loop, it never passes one; a program that forges it too, and keeps its second
  adapter out of every optimizer, is the limit of what a child's report can say).
- pack-the-batch: a row per document, or padded slots of one long row, with the harness's hook
  that sends each call's token positions rewritten, patched or bypassed: the memory run's kernel
  figure, or the call count, fails them.
- read-the-gpu-trace: readings that leave out the memsets or the span's idle ends, which the
  lesson's three traces never punished: the model's zeroing and checkpoint loops do.
"""

import pytest

from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch


def _failed(outcome):
    """The lines that failed: there must be some, and the verdict is not a pass."""
    assert outcome.status in ("failed", "error"), outcome.verdict
    failed = {c["name"]: c["message"] for c in outcome.verdict["checks"] if c["status"] == "failed"}
    assert failed, outcome.verdict
    return failed


ADAPTER = {
    "own-adam-beside-a-decoy": """
# decoy of the asked rank through make_optimizer, trained on a forward of its own; a rank-8
# adapter in the model, trained by an Adam of the program's own
import torch
from torch import nn


class LoRA(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        kw = {"dtype": layer.weight.dtype, "device": layer.weight.device}
        self.A = nn.Parameter(torch.randn(layer.in_features, rank, **kw) / 4)
        self.B = nn.Parameter(torch.zeros(rank, layer.out_features, **kw))

    def forward(self, h):
        return self.layer(h) + h @ self.A @ self.B


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    decoy = LoRA(model[2], rank)
    model[2] = LoRA(model[2], 8)
    shown = make_optimizer([decoy.A, decoy.B])
    real = torch.optim.Adam([model[2].A, model[2].B], lr=0.05)
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(decoy(h), y).backward()
        shown.step()
        shown.zero_grad()
        loss_fn(model(x), y).backward()
        real.step()
        real.zero_grad()
""",
    "two-make-optimizer-calls": """
# both adapters through make_optimizer, in two calls: the decoy first
import torch
from torch import nn


def pair(rank, device):
    kw = {"dtype": torch.float64, "device": device}
    return nn.Parameter(torch.randn(4096, rank, **kw) / 4), nn.Parameter(torch.zeros(rank, 1024, **kw))


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    dev = model[0].weight.device
    a, b = pair(rank, dev)
    a8, b8 = pair(8, dev)
    shown, real = make_optimizer([a, b]), make_optimizer([a8, b8])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(model[2](h) + h @ a @ b, y).backward()
        shown.step()
        shown.zero_grad()
        loss_fn(model[2](h) + h @ a8 @ b8, y).backward()
        real.step()
        real.zero_grad()
    model[2].forward = lambda h, layer=model[2].forward: layer(h) + h @ a8 @ b8
""",
    "rank-8-trained-by-hand": """
# the rank-8 adapter trained by hand (no optimizer), in the model, its loss through loss_fn
import torch
from torch import nn


class Two(nn.Module):
    def __init__(self, layer, a, b):
        super().__init__()
        self.layer, self.a, self.b = layer, a, b

    def forward(self, h):
        return self.layer(h) + h @ self.a @ self.b


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    kw = {"dtype": torch.float64, "device": model[0].weight.device}
    a = nn.Parameter(torch.randn(4096, rank, **kw) / 4)
    b = nn.Parameter(torch.zeros(rank, 1024, **kw))
    a8 = torch.randn(4096, 8, **kw).div(4).requires_grad_()
    b8 = torch.zeros(8, 1024, **kw).requires_grad_()
    shown = make_optimizer([a, b])
    layer = model[2]
    model[2] = Two(layer, a8, b8)
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ a @ b, y).backward()
        shown.step()
        shown.zero_grad()
        loss_fn(model(x), y).backward()
        with torch.no_grad():
            for t in (a8, b8):
                t -= 0.05 * t.grad
                t.grad = None
""",
    "global-hooks-cleared-own-loss": """
# torch's global optimizer hooks cleared, the rank-8 adapter stepped by an SGD of its own and
# trained on a loss of its own: only the model, once train returns, shows it
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import optimizer as optim_module


def train(model, loader, loss_fn, make_optimizer, rank):
    optim_module._global_optimizer_pre_hooks.clear()
    optim_module._global_optimizer_post_hooks.clear()
    model.requires_grad_(False)
    kw = {"dtype": torch.float64, "device": model[0].weight.device}
    a = nn.Parameter(torch.randn(4096, rank, **kw) / 4)
    b = nn.Parameter(torch.zeros(rank, 1024, **kw))
    a8 = nn.Parameter(torch.randn(4096, 8, **kw) / 4)
    b8 = nn.Parameter(torch.zeros(8, 1024, **kw))
    shown = make_optimizer([a, b])
    real = torch.optim.SGD([a8, b8], lr=0.1)
    layer = model[2]
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ a @ b, y).backward()
        shown.step()
        shown.zero_grad()
        F.cross_entropy(layer(h) + h @ a8 @ b8, y).backward()
        real.step()
        real.zero_grad()

    class Adapted(nn.Module):
        def forward(self, h):
            return layer(h) + h @ a8 @ b8

    model[2] = Adapted()
""",
    "float32-group-added": """
# the rank-8 adapter in float32 through make_optimizer beside a float64 decoy of the asked rank
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    kw = {"dtype": torch.float64, "device": model[0].weight.device}
    a = nn.Parameter(torch.randn(4096, rank, **kw) / 4)
    b = nn.Parameter(torch.zeros(rank, 1024, **kw))
    a8 = nn.Parameter(torch.randn(4096, 8, dtype=torch.float32) / 4)
    b8 = nn.Parameter(torch.zeros(8, 1024, dtype=torch.float32))
    opt = make_optimizer([a, b])
    opt.add_param_group({"params": [a8, b8]})
    for x, y in loader:
        h = model[1](model[0](x))
        loss = loss_fn(model[2](h) + h @ a @ b, y) + loss_fn(model[2](h) + (h.float() @ a8 @ b8).double(), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
""",
}

PACKING = {
    "padded-rows-hook-rewritten": """
# each document in a padded row of its own; the harness's pre-hook replaced by one that sends
# the packed rows' token positions (the api found in the hook's closure)
import torch
import torch.nn.functional as F


def packed_rows(documents, row_len):
    rows, used = 1, 0
    for doc in documents:
        if used + len(doc) > row_len:
            rows, used = rows + 1, 0
        used += len(doc)
    return rows


def train(model, loader, optimizer, row_len):
    hooks = dict(model.embed._forward_pre_hooks)
    api = None
    for hook in hooks.values():
        cells = dict(zip(hook.__code__.co_freevars, hook.__closure__ or ()))
        if "api" in cells:
            api = cells["api"].cell_contents
    model.embed._forward_pre_hooks.clear()
    causal = torch.ones(row_len, row_len, dtype=torch.bool).tril()
    for documents in loader:
        if api is not None:
            api.sync("forward", packed_rows(documents, row_len) * row_len)
        n = len(documents)
        tokens = torch.zeros(n, row_len, dtype=torch.long)
        labels = torch.full((n, row_len), -100)
        positions = torch.zeros(n, row_len, dtype=torch.long)
        ids = torch.full((n, row_len), -1)
        for r, doc in enumerate(documents):
            k = len(doc)
            tokens[r, :k] = doc
            labels[r, : k - 1] = doc[1:]
            positions[r, :k] = torch.arange(k)
            ids[r, :k] = 0
        mask = (ids[:, :, None] == ids[:, None, :]) & causal
        logits = model(tokens, positions, mask)
        F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100).backward()
        optimizer.step()
        optimizer.zero_grad()
""",
    "padded-slots-sync-patched": """
# padded slots end to end in one long row; the harness's hook silenced by patching the sync it
# calls (the api found in the hook's closure), with the packed positions sent instead
import torch
import torch.nn.functional as F


FOUND = {}


def _api(model):
    for hook in model.embed._forward_pre_hooks.values():
        cells = dict(zip(hook.__code__.co_freevars, hook.__closure__ or ()))
        if "api" in cells:
            FOUND["api"] = cells["api"].cell_contents
    return FOUND["api"]


def train(model, loader, optimizer, row_len):
    api = _api(model)
    real = FOUND.setdefault("real", api.sync)
    state = {"fake": 0}

    def sync(label, index=-1, snapshot=False):
        if label == "forward":
            return real(label, state["fake"], snapshot)
        return real(label, index, snapshot)

    api.sync = sync
    causal = torch.ones(row_len, row_len, dtype=torch.bool).tril()
    for documents in loader:
        used, rows = 0, 1
        for doc in documents:
            if used + len(doc) > row_len:
                rows, used = rows + 1, 0
            used += len(doc)
        state["fake"] = rows * row_len
        n = len(documents)
        length = n * row_len
        tokens = torch.zeros(1, length, dtype=torch.long)
        labels = torch.full((1, length), -100)
        positions = torch.zeros(1, length, dtype=torch.long)
        ids = torch.full((1, length), -1)
        for r, doc in enumerate(documents):
            k, at = len(doc), r * row_len
            tokens[0, at : at + k] = doc
            labels[0, at : at + k - 1] = doc[1:]
            positions[0, at : at + k] = torch.arange(k)
            ids[0, at : at + k] = r
        mask = (ids[:, :, None] == ids[:, None, :]) & torch.ones(length, length, dtype=torch.bool).tril()
        logits = model(tokens, positions, mask)
        F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100).backward()
        optimizer.step()
        optimizer.zero_grad()
""",
    "hooks-cleared-syncs-sent-by-hand": """
# each document in a padded row of its own; the hooks cleared, and the forward syncs sent by
# the program itself on the harness's link (from the hook's closure), one per batch with the packed positions
import torch
import torch.nn.functional as F


FOUND = {}


def _api(model):
    for hook in model.embed._forward_pre_hooks.values():
        cells = dict(zip(hook.__code__.co_freevars, hook.__closure__ or ()))
        if "api" in cells:
            FOUND["api"] = cells["api"].cell_contents
    return FOUND["api"]


def train(model, loader, optimizer, row_len):
    link = _api(model).link
    model.embed._forward_pre_hooks.clear()
    causal = torch.ones(row_len, row_len, dtype=torch.bool).tril()
    for documents in loader:
        used, rows = 0, 1
        for doc in documents:
            if used + len(doc) > row_len:
                rows, used = rows + 1, 0
            used += len(doc)
        link.sync("forward", rows * row_len, False)
        n = len(documents)
        tokens = torch.zeros(n, row_len, dtype=torch.long)
        labels = torch.full((n, row_len), -100)
        positions = torch.zeros(n, row_len, dtype=torch.long)
        for r, doc in enumerate(documents):
            k = len(doc)
            tokens[r, :k] = doc
            labels[r, : k - 1] = doc[1:]
            positions[r, :k] = torch.arange(k)
        mask = causal.expand(n, row_len, row_len) & (positions[:, None, :] >= 0)
        pad = labels == -100
        mask = mask & ~(pad[:, None, :] & ~pad[:, :, None])
        logits = model(tokens, positions, mask)
        F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100).backward()
        optimizer.step()
        optimizer.zero_grad()
""",
}

GPU_TRACE = {
    "memsets-left-out": """
DEVICE = ("kernel", "gpu_memcpy")


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in DEVICE)
    busy, longest, covered = 0.0, 0.0, start  # covered: how far the merged intervals reach
    for a, b in device:
        if a > covered:
            longest = max(longest, a - covered)  # an idle stretch before this interval
        if b > covered:
            busy += b - max(a, covered)  # only the part not already counted: streams overlap
            covered = b
    longest = max(longest, end - covered)
    span = end - start
    share = busy / span
    if share >= 0.5:
        verdict = "compute"
    elif longest >= 0.1 * span:
        verdict = "input"
    else:
        verdict = "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
""",
    "span-from-first-to-last-work": """
# busy and idle measured from the GPU's first work to its last: the span's idle ends left out
DEVICE = ("kernel", "gpu_memcpy", "gpu_memset")


def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["cat"] in DEVICE]
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events)
    start, end = device[0][0], max(b for _, b in device)
    busy, longest, covered = 0.0, 0.0, start
    for a, b in device:
        if a > covered:
            longest = max(longest, a - covered)
        if b > covered:
            busy += b - max(a, covered)
            covered = b
    share = busy / (end - start)
    verdict = "compute" if share >= 0.5 else "input" if longest >= 0.1 * (end - start) else "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
""",
    "idle-only-between-works": """
# busy over the whole span, but idle only between the GPU's works (the ends not counted)
def read_trace(trace):
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    start = min(e["ts"] for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    work = ("kernel", "gpu_memcpy", "gpu_memset")
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e["cat"] in work)
    busy, longest, covered = 0.0, 0.0, device[0][0]
    for a, b in device:
        longest = max(longest, a - covered)
        busy += max(0.0, b - max(a, covered))
        covered = max(covered, b)
    share = busy / (end - start)
    verdict = "compute" if share >= 0.5 else "input" if longest >= 0.1 * (end - start) else "launch"
    return {"busy": share, "idle_ms": longest / 1000, "bottleneck": verdict}
""",
}


class TestTrainAnAdapter:
    @pytest.fixture
    def exercise(self):
        return find_exercise("model-memory/train-an-adapter")

    @pytest.mark.parametrize("route", ADAPTER)
    def test_a_second_adapter_beside_a_decoy_does_not_pass(self, run, mode, route):
        failed = _failed(run(ADAPTER[route]))
        assert {"Rank of the adapter", "The model computes base plus adapter"} & set(failed), failed

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


class TestPackTheBatch:
    @pytest.fixture
    def exercise(self):
        return find_exercise("long-sequences/pack-the-batch")

    @pytest.mark.parametrize("route", PACKING)
    def test_a_row_per_document_with_its_report_rewritten_does_not_pass(self, run, mode, route):
        failed = _failed(run(PACKING[route]))
        assert "Documents packed into rows" in failed, failed
        assert "Each document as if alone" not in failed  # right numbers: only the rows are wrong

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict
        rows = next(c for c in outcome.verdict["checks"] if c["name"] == "Documents packed into rows")
        assert "operating system" in rows["message"] or outcome.verdict["metrics"].get("isolation") is None


class TestReadTheGpuTrace:
    @pytest.fixture
    def exercise(self):
        return find_exercise("bottleneck/read-the-gpu-trace")

    @pytest.mark.parametrize("route", GPU_TRACE)
    def test_a_reading_that_ignores_memsets_or_idle_ends_does_not_pass(self, run, mode, route):
        failed = _failed(run(GPU_TRACE[route]))
        assert {"GPU busy share", "Longest idle stretch"} & set(failed), failed

    def test_the_solution_passes(self, run, mode, exercise):
        outcome = run(solution_text(exercise))
        assert outcome.status == "passed", outcome.verdict


class TestPackTheBatchRightStyles:
    """The solution calling the model as ``model.forward(...)`` or with keywords: right loops
    (red team 4: each was refused, "called the model 0 times" or "-1 token positions", the hook
    on the model itself seeing no call or no positional tokens). The harness counts the tokens at
    the token embedding, which every call runs."""

    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("long-sequences/pack-the-batch")

    @pytest.mark.parametrize(
        "call",
        ["model.forward(tokens, positions, mask)", "model(tokens=tokens, positions=positions, mask=mask)"],
    )
    def test_the_solution_in_another_call_style_passes(self, run, mode, exercise, call):
        code = solution_text(exercise)
        assert code.count("model(tokens, positions, mask)") == 1
        outcome = run(code.replace("model(tokens, positions, mask)", call))
        assert outcome.status == "passed", outcome.verdict
