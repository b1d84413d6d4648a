"""A packed row's labels are its tokens shifted by one: masking the label that would cross into the
next document, and the padding, leaves exactly each document's own labels; the loss averaged over the
batch's real labels equals the documents' own loss, averaged row by row it does not, nor with the
crossing label kept."""

import torch
import torch.nn.functional as F

torch.manual_seed(0)
vocab, width, pad = 20, 8, 0
docs = [torch.randint(1, vocab, (n,)) for n in (5, 3, 4, 2)]
rows = [[0, 1], [2, 3]]  # documents per row: 5 + 3 tokens, then 4 + 2 and two of padding


def pack(which: list[int], keep_crossing: bool = False) -> tuple[torch.Tensor, torch.Tensor, list]:
    tokens = torch.cat([docs[i] for i in which])
    doc = torch.cat([torch.full((len(docs[i]),), i) for i in which])
    labels = torch.full((width,), -100)
    labels[: len(tokens) - 1] = tokens[1:]  # shifted by one
    if not keep_crossing:
        labels[: len(tokens) - 1][doc[1:] != doc[:-1]] = -100  # it would predict the next document
    where = [(int(doc[i]), int(i - (doc == doc[i]).nonzero()[0])) for i in range(len(tokens))]
    return torch.cat([tokens, torch.full((width - len(tokens),), pad)]), labels, where


logits = torch.randn(len(rows), width, vocab)  # what a model would give each packed position
packed = [pack(r) for r in rows]
labels = torch.stack([p[1] for p in packed])

# each document's own labels, found at its own positions in the packed rows
own = {(i, j): int(t) for i, d in enumerate(docs) for j, t in enumerate(d[1:])}
found = {packed[r][2][c]: int(labels[r, c]) for r in range(2) for c in range(width) if labels[r, c] != -100}
assert found == own and len(own) == 10

reference = torch.stack(
    [
        F.cross_entropy(logits[r, c], labels[r, c], reduction="none")
        for r in range(2)
        for c in range(width)
        if labels[r, c] != -100
    ]
).mean()
batch = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
assert torch.allclose(batch, reference)

per_row = torch.stack([F.cross_entropy(logits[r], labels[r], ignore_index=-100) for r in range(2)]).mean()
assert not torch.allclose(per_row, reference, rtol=1e-3)  # 6 and 4 real labels weigh the same

crossing = torch.stack([pack(r, keep_crossing=True)[1] for r in rows])
assert int((crossing != -100).sum()) == 12
assert not torch.allclose(
    F.cross_entropy(logits.flatten(0, 1), crossing.flatten(), ignore_index=-100), reference
)
