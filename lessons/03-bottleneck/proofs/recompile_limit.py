"""After 8 compiled versions of one function (recompile_limit), a call that matches none of them
runs uncompiled."""

import logging

import torch

assert torch._dynamo.config.recompile_limit == 8
logging.getLogger("torch._dynamo").setLevel(logging.ERROR)  # the limit's warning, expected here
compiled = []


def backend(graph, example_inputs):
    compiled.append(1)
    return graph.forward


@torch.compile(backend=backend)
def step(x, mode):
    return x * 2 if mode.startswith("a") else x + 1  # branches on a Python value


for i in range(12):
    assert torch.equal(step(torch.ones(3), f"a{i}"), torch.full((3,), 2.0))  # still right
assert len(compiled) == 8, len(compiled)
torch._dynamo.reset()
