# wrong (red team F1): the cross-entropy written by hand in float32 (log_softmax of the logits cast
# down, the real labels gathered): off by rounding, not by a mask; the text names the precision
import torch


def pack(documents, row_len):
    rows = [[]]
    for doc in documents:
        if sum(map(len, rows[-1])) + len(doc) > row_len:
            rows.append([])
        rows[-1].append(doc)
    n = len(rows)
    tokens = torch.zeros(n, row_len, dtype=torch.long)
    labels = torch.full((n, row_len), -100)
    positions = torch.zeros(n, row_len, dtype=torch.long)
    ids = torch.full((n, row_len), -1)
    for r, row in enumerate(rows):
        at = 0
        for i, doc in enumerate(row):
            k = len(doc)
            tokens[r, at : at + k] = doc
            labels[r, at : at + k - 1] = doc[1:]
            positions[r, at : at + k] = torch.arange(k)
            ids[r, at : at + k] = i
            at += k
    return tokens, labels, positions, ids


def train(model, loader, optimizer, row_len):
    causal = torch.tril(torch.ones(row_len, row_len, dtype=torch.bool))
    for documents in loader:
        tokens, labels, positions, ids = pack(documents, row_len)
        mask = causal & (ids.unsqueeze(2) == ids.unsqueeze(1))
        logp = torch.log_softmax(model(tokens, positions, mask).to(torch.float32), dim=-1)
        real = labels != -100
        picked = logp[real].gather(1, labels[real].unsqueeze(1)).squeeze(1)
        loss = -picked.sum() / real.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
