import torch
import torch.nn.functional as F


def train(model, loader, optimizer, row_len):
    for documents in loader:
        tokens = torch.stack([F.pad(doc, (0, row_len - len(doc))) for doc in documents])
        labels = torch.stack([F.pad(doc[1:], (0, row_len - len(doc) + 1), value=-100) for doc in documents])
        positions = torch.arange(row_len).repeat(len(documents), 1)
        mask = torch.ones(len(documents), row_len, row_len, dtype=torch.bool).tril()
        logits = model(tokens, positions, mask)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
