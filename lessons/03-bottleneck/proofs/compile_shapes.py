"""torch.compile compiles at the first call, compiles again for a new shape, then treats that size
as dynamic: a third shape costs nothing more."""

import torch

compiled = []


def backend(graph, example_inputs):
    compiled.append([tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)])
    return graph.forward


@torch.compile(backend=backend)
def step(x):
    return (x * 2).sum()


step(torch.ones(4))
step(torch.ones(4))
assert len(compiled) == 1  # same shape: no new compile
step(torch.ones(3))  # a short last batch
assert len(compiled) == 2
step(torch.ones(5))
step(torch.ones(7))
assert len(compiled) == 2  # the size is dynamic now
torch._dynamo.reset()
