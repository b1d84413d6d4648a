# wrong: no packing at all: each document gets a padded slot of row_len tokens of its own (the
# starter's one-document-per-row), and the slots are laid end to end in ONE row of
# docs * row_len tokens, so the model is called on "1 row".
import torch
import torch.nn.functional as F


def train(model, loader, optimizer, row_len):
    for documents in loader:
        n = len(documents)
        L = n * row_len
        tokens = torch.zeros(1, L, dtype=torch.long)
        labels = torch.full((1, L), -100)
        positions = torch.zeros(1, L, dtype=torch.long)
        ids = torch.full((1, L), -1)
        for i, doc in enumerate(documents):
            s = i * row_len
            tokens[0, s : s + len(doc)] = doc
            labels[0, s : s + len(doc) - 1] = doc[1:]
            positions[0, s : s + len(doc)] = torch.arange(len(doc))
            ids[0, s : s + row_len] = i  # the slot's padding is its document's
        causal = torch.ones(L, L, dtype=torch.bool).tril()
        mask = (ids[:, :, None] == ids[:, None, :]) & causal
        logits = model(tokens, positions, mask)
        F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100).backward()
        optimizer.step()
        optimizer.zero_grad()
