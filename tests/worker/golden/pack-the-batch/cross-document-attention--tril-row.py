import torch
import torch.nn.functional as F


def rows_of(documents, row_len):
    rows, current = [], []
    for doc in documents:
        if current and sum(map(len, current)) + len(doc) > row_len:
            rows.append(current)
            current = []
        current.append(doc)
    return rows + [current]


def labels_of(docs, i):
    return torch.cat([docs[i][1:], torch.tensor([-100])])


def positions_of(docs, i):
    return torch.arange(len(docs[i]))


def mask_of(docs, pad, row_len):
    return torch.ones(row_len, row_len, dtype=torch.bool).tril()  # the whole row


def one_row(docs, row_len):
    pad = row_len - sum(map(len, docs))
    tokens = torch.cat([*docs, torch.zeros(pad, dtype=torch.long)])
    labels = torch.cat([labels_of(docs, i) for i in range(len(docs))] + [torch.full((pad,), -100)])
    positions = [positions_of(docs, i) for i in range(len(docs))]
    positions = torch.cat([*positions, torch.zeros(pad, dtype=torch.long)])
    return tokens, labels, positions, mask_of(docs, pad, row_len)


def train(model, loader, optimizer, row_len):
    for documents in loader:
        packed = [one_row(docs, row_len) for docs in rows_of(documents, row_len)]
        tokens, labels, positions, mask = (torch.stack(t) for t in zip(*packed, strict=True))
        logits = model(tokens, positions, mask)
        total = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, reduction="sum")
        loss = total / (labels != -100).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
