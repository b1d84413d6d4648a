import torch
import torch.nn.functional as F


def train(model, loader, optimizer, row_len):
    causal = torch.ones(row_len, row_len, dtype=torch.bool).tril()
    for documents in loader:
        # one document per row, padded to row_len: most positions hold padding
        rows = len(documents)
        tokens = torch.zeros(rows, row_len, dtype=torch.long)
        labels = torch.full((rows, row_len), -100)
        for r, doc in enumerate(documents):
            tokens[r, : len(doc)] = doc
            labels[r, : len(doc) - 1] = doc[1:]
        positions = torch.arange(row_len).expand(rows, row_len)
        mask = causal.expand(rows, row_len, row_len)
        logits = model(tokens, positions, mask)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
