"""Harness of the "packing" kind (lesson 6, pack-the-batch): the learner's loop packs documents of
uneven length into rows of fixed length, with the loss over real labels only and attention kept
inside each document.

``train(model, loader, optimizer, row_len)`` runs one pass over the seeded float64 ``PackedLM``'s
batches, each a list of documents (1-D token tensors), with the plain SGD it is given. The
supervisor reads the parameters as each batch is fetched and at the end: the trajectory, which the
checks compare with each document trained alone. Each call of the model syncs too, with the number
of token positions it was given (``forward``): the supervisor counts the calls; the rows are sent by this
harness's hook in the child.
"""

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from . import sequences
from .instrument import flat, name_limits

if TYPE_CHECKING:
    from .protocol import Spec
    from .runtime import Api


def run(spec: "Spec", api: "Api") -> tuple[Any, dict[str, Any] | None]:
    params = spec["params"]
    device = spec.get("device", "cpu")
    model, batches = sequences.packing(params)
    model = model.to(device)
    batches = [[doc.to(device) for doc in batch] for batch in batches]
    weights = list(model.parameters())
    api.share(weights)

    def learner() -> tuple[dict[str, Any], dict[str, Any] | None]:
        def loader() -> Iterator[list[torch.Tensor]]:
            for i, batch in enumerate(batches):
                api.sync("batch", i, snapshot=True)
                yield list(batch)

        class Loader:
            def __len__(self) -> int:
                return len(batches)

            def __iter__(self) -> Iterator[list[torch.Tensor]]:
                return loader()

        def counted(module: torch.nn.Module, args: tuple[Any, ...]) -> None:
            tokens = args[0] if args else None
            positions = int(tokens.numel()) if isinstance(tokens, torch.Tensor) and tokens.dim() == 2 else -1
            api.sync("forward", positions)  # token positions: rows of any length are counted whole

        model.register_forward_pre_hook(counted)
        name_limits()
        fn = api.load_entry()
        api.check_signature(fn, ["model", "loader", "optimizer", "row_len"])
        optimizer = torch.optim.SGD(weights, lr=float(params["lr"]))
        error = api.call(fn, [model, Loader(), optimizer, int(params["row_len"])])
        return {"final_params": flat(weights)}, error

    return api.supervise(learner)
