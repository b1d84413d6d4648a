# right (red team 5): the solution, every batch packed first in a list comprehension; read after
# each optimizer step, not at the next fetch, it passes.
import torch
import torch.nn.functional as F


def pack(documents, row_len):
    rows, row, used = [], [], 0
    for doc in documents:
        if used + len(doc) > row_len:
            rows.append(row)
            row, used = [], 0
        row.append(doc)
        used += len(doc)
    rows.append(row)
    shape = (len(rows), row_len)
    tokens = torch.zeros(shape, dtype=torch.long)
    labels = torch.full(shape, -100)
    positions = torch.zeros(shape, dtype=torch.long)
    doc_ids = torch.full(shape, -1)
    for r, row in enumerate(rows):
        start = 0
        for i, doc in enumerate(row):
            end = start + len(doc)
            tokens[r, start:end] = doc
            labels[r, start : end - 1] = doc[1:]
            positions[r, start:end] = torch.arange(len(doc))
            doc_ids[r, start:end] = i
            start = end
    return tokens, labels, positions, doc_ids


def train(model, loader, optimizer, row_len):
    """The solution, with the batches packed up front (a right loop)."""
    causal = torch.ones(row_len, row_len, dtype=torch.bool).tril()
    packed = [pack(documents, row_len) for documents in loader]
    for tokens, labels, positions, doc_ids in packed:
        mask = (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal
        logits = model(tokens, positions, mask)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
