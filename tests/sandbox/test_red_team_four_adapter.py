"""Red team 4 (issue 41), train-an-adapter: "no gradient for the base" rests on one run.

The learner's loop was called twice, a small maths run (the weights, the adapter's pool, its
trajectory) and a memory run on a base whose first layer took 262,144 inputs. Wrong loops passed
by telling the two apart: the base left trainable in the small run and frozen only where
``model[0].in_features > 100000``, or only ``model[0].weight`` frozen (the memory run's one wide
layer), the other gradients computed and dropped before each step: in the maths run the base's
gradients rested on the child's ``.grad`` report.

Now the loop runs once (``worker/harness/adapter.py``), on a base whose every weight's gradient
is 32 MiB (``Linear(1024, 4096)``, ``Tanh``, ``Linear(4096, 1024)``, no biases), with the weights
and the adapter's pool read by the supervisor in that same run and the kernel's rise over the
call deciding "base frozen" (right loops 2.5-5.0 MiB, the line 16 MiB, a gradient for one weight
35, for both 68). Each attack here reports no base gradient at any step or batch; each right
loop, in another style, still passes. Every program runs under both starts (conftest's PAIRS).
"""

import pytest

from tests.sandbox.course import find_exercise, solution_text

pytestmark = pytest.mark.slow  # real sandboxes, real torch

NO_GRADIENT = "No gradient for the frozen weights"

_ADAPTER = """
import math
import torch
from torch import nn


def adapter(layer, rank):
    like = {"dtype": layer.weight.dtype, "device": layer.weight.device}
    bound = 1 / math.sqrt(layer.in_features)
    A = nn.Parameter(torch.empty(layer.in_features, rank, **like).uniform_(-bound, bound))
    B = nn.Parameter(torch.zeros(rank, layer.out_features, **like))
    return A, B
"""

# (a) frozen only where the first layer is wide: the old memory run's tell
FROZEN_WHERE_WIDE = (
    _ADAPTER
    + """

def train(model, loader, loss_fn, make_optimizer, rank):
    if model[0].in_features > 100000:
        model.requires_grad_(False)
    layer = model[2]
    A, B = adapter(layer, rank)
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ A @ B, y).backward()
        model.zero_grad(set_to_none=True)  # the base's gradients, gone before anyone looks
        optimizer.step()
        optimizer.zero_grad()
"""
)

# (b) only the first weight frozen (the old memory run's one wide layer); the rest dropped
FIRST_WEIGHT_ONLY = (
    _ADAPTER
    + """

def train(model, loader, loss_fn, make_optimizer, rank):
    model[0].weight.requires_grad_(False)
    layer = model[2]
    A, B = adapter(layer, rank)
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ A @ B, y).backward()
        for p in model.parameters():
            p.grad = None
        optimizer.step()
        optimizer.zero_grad()
"""
)

# (c) only the layer beside the adapter frozen; the first layer's gradients dropped by a hook
LAST_LAYER_ONLY_HOOK_DROPS = (
    _ADAPTER
    + """

def _drop(p):
    p.grad = None


def train(model, loader, loss_fn, make_optimizer, rank):
    model[2].requires_grad_(False)
    for p in model[0].parameters():
        p.register_post_accumulate_grad_hook(_drop)  # each gradient dropped as it lands
    layer = model[2]
    A, B = adapter(layer, rank)
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ A @ B, y).backward()
        optimizer.step()
        optimizer.zero_grad()
"""
)

# (d) torch.autograd.grad over the adapter and every base weight that is still trainable (all
# but the first); the base's gradients thrown away, no .grad ever set on the model
AUTOGRAD_BESIDE = (
    _ADAPTER
    + """

def train(model, loader, loss_fn, make_optimizer, rank):
    model[0].weight.requires_grad_(False)
    layer = model[2]
    A, B = adapter(layer, rank)
    optimizer = make_optimizer([A, B])
    base = [p for p in model.parameters() if p.requires_grad]
    for x, y in loader:
        h = model[1](model[0](x))
        grads = torch.autograd.grad(loss_fn(layer(h) + h @ A @ B, y), [A, B, *base])
        A.grad, B.grad = grads[0], grads[1]
        optimizer.step()
        optimizer.zero_grad()
"""
)

# (e) the runs told apart by counting calls: frozen from the second call on
COUNTED_CALLS = (
    _ADAPTER
    + """
CALLS = []


def train(model, loader, loss_fn, make_optimizer, rank):
    CALLS.append(1)
    if len(CALLS) > 1:
        model.requires_grad_(False)
    layer = model[2]
    A, B = adapter(layer, rank)
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ A @ B, y).backward()
        model.zero_grad(set_to_none=True)
        optimizer.step()
        optimizer.zero_grad()
"""
)

# (f) every weight frozen but one, chosen as the smallest: each of the base's weights is wide now
SMALLEST_LEFT_TRAINABLE = (
    _ADAPTER
    + """

def train(model, loader, loss_fn, make_optimizer, rank):
    weights = list(model.parameters())
    smallest = min(weights, key=lambda p: p.numel())
    for p in weights:
        p.requires_grad_(p is smallest)
    layer = model[2]
    A, B = adapter(layer, rank)
    optimizer = make_optimizer([A, B])
    for x, y in loader:
        h = model[1](model[0](x))
        loss_fn(layer(h) + h @ A @ B, y).backward()
        smallest.grad = None
        optimizer.step()
        optimizer.zero_grad()
"""
)

WRONG = {
    "frozen-where-wide": FROZEN_WHERE_WIDE,
    "first-weight-only": FIRST_WEIGHT_ONLY,
    "last-layer-only-hook-drops": LAST_LAYER_ONLY_HOOK_DROPS,
    "autograd-grad-beside": AUTOGRAD_BESIDE,
    "counted-calls": COUNTED_CALLS,
    "smallest-left-trainable": SMALLEST_LEFT_TRAINABLE,
}

# right loops, in other styles than the solution's
PEFT_LIKE = """
# a peft-like wrapper: LoraLinear over the base layer (its weight through F.linear), the adapter
# two bias-free nn.Linear, scaling alpha / r = 1; requires_grad set by parameter name
import math
import torch
import torch.nn.functional as F
from torch import nn


class LoraLinear(nn.Module):
    def __init__(self, base, r, alpha):
        super().__init__()
        self.base_layer = base
        kw = {"dtype": base.weight.dtype, "device": base.weight.device}
        self.lora_A = nn.Linear(base.in_features, r, bias=False, **kw)
        self.lora_B = nn.Linear(r, base.out_features, bias=False, **kw)
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)
        self.scaling = alpha / r

    def forward(self, x):
        result = F.linear(x, self.base_layer.weight, self.base_layer.bias)
        return result + self.lora_B(self.lora_A(x)) * self.scaling


def train(model, loader, loss_fn, make_optimizer, rank):
    model[2] = LoraLinear(model[2], rank, alpha=rank)
    for name, p in model.named_parameters():
        p.requires_grad = "lora_" in name
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad])
    for x, y in loader:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        optimizer.step()
"""

FORWARD_HOOK = """
# the adapter added by a forward hook on the last layer, A and B in a ParameterDict
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    for p in model.parameters():
        p.requires_grad_(False)
    last = model[2]
    kw = {"dtype": last.weight.dtype, "device": last.weight.device}
    adapter = nn.ParameterDict({
        "A": nn.Parameter(torch.randn(last.in_features, rank, **kw) / last.in_features**0.5),
        "B": nn.Parameter(torch.zeros(rank, last.out_features, **kw)),
    })
    last.register_forward_hook(lambda m, args, out: out + args[0] @ adapter["A"] @ adapter["B"])
    optimizer = make_optimizer(adapter.parameters())
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
"""

NO_GRAD_BODY_CLOSURE = """
# the body run under torch.no_grad (and frozen), the adapter beside the model, each step a
# closure handed to optimizer.step
import torch
from torch import nn


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    body, head = model[:2], model[2]
    kw = {"dtype": torch.float64, "device": head.weight.device}
    down = torch.randn(head.in_features, rank, **kw).mul_(0.02).requires_grad_()
    up = torch.zeros(rank, head.out_features, **kw, requires_grad=True)
    optimizer = make_optimizer([down, up])
    for x, y in loader:
        with torch.no_grad():
            h = body(x)

        def closure(h=h, y=y):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(head(h) + (h @ down) @ up, y)
            loss.backward()
            return loss

        optimizer.step(closure)
"""

FUNC_GRAD = """
# torch.func.grad over the adapter alone, through functional_call of the model
import torch
from torch import nn
from torch.func import functional_call, grad


class LoRA(nn.Module):
    def __init__(self, layer, rank):
        super().__init__()
        self.layer = layer
        kw = {"dtype": layer.weight.dtype, "device": layer.weight.device}
        self.A = nn.Parameter(torch.randn(layer.in_features, rank, **kw) / rank)
        self.B = nn.Parameter(torch.zeros(rank, layer.out_features, **kw))

    def forward(self, h):
        return self.layer(h) + h @ self.A @ self.B


def train(model, loader, loss_fn, make_optimizer, rank):
    model.requires_grad_(False)
    model[2] = LoRA(model[2], rank)
    adapter = {"2.A": model[2].A, "2.B": model[2].B}
    opt = make_optimizer(list(adapter.values()))
    for x, y in loader:
        g = grad(lambda p, x=x, y=y: loss_fn(functional_call(model, p, (x,)), y))(
            {k: v.detach() for k, v in adapter.items()}
        )
        for k, p in adapter.items():
            p.grad = g[k]
        opt.step()
        opt.zero_grad()
"""

RIGHT = {
    "solution": None,
    "peft-like": PEFT_LIKE,
    "forward-hook": FORWARD_HOOK,
    "no-grad-body-closure": NO_GRAD_BODY_CLOSURE,
    "func-grad": FUNC_GRAD,
}


class TestTrainAnAdapter:
    @pytest.fixture
    def exercise(self):
        """``run`` grades this exercise in this class."""
        return find_exercise("model-memory/train-an-adapter")

    @pytest.mark.parametrize("name", list(WRONG))
    def test_a_base_with_gradients_does_not_pass_on_one_run(self, run, mode, name):
        outcome = run(WRONG[name])
        assert outcome.status == "failed", outcome.verdict
        line = next(c for c in outcome.verdict["checks"] if c["name"] == NO_GRADIENT)
        assert line["status"] == "failed", outcome.verdict  # the kernel's figure, not a report
        assert "as the operating system counted the process" in line["message"], line
        passed = {c["name"] for c in outcome.verdict["checks"] if c["status"] == "passed"}
        assert "Frozen weights unchanged" in passed and "Adapter after each step" in passed, outcome.verdict

    @pytest.mark.parametrize("name", list(RIGHT))
    def test_right_loops_in_other_styles_pass(self, run, mode, exercise, name):
        outcome = run(solution_text(exercise) if RIGHT[name] is None else RIGHT[name])
        assert outcome.status == "passed", outcome.verdict
        line = next(c for c in outcome.verdict["checks"] if c["name"] == NO_GRADIENT)
        assert "as the operating system counted the process" in line["message"], line
