import torch
import torch.nn.functional as F


def train(model, loader, optimizer, row_len):
    for documents in loader:
        tokens, labels = [], []
        for doc in documents:
            n = len(doc)
            tokens.append(doc.tolist() + [0] * (row_len - n))
            labels.append(doc[1:].tolist() + [-100] * (row_len - n + 1))
        tokens, labels = torch.tensor(tokens), torch.tensor(labels)
        rows = len(documents)
        positions = torch.arange(row_len).expand(rows, -1)
        mask = torch.ones(row_len, row_len, dtype=torch.bool).tril().expand(rows, -1, -1)
        logits = model(tokens, positions, mask)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
