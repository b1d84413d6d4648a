# wrong (red team F1): the logits rounded through float32 (`.float()`, then back to float64) before a
# float64 cross-entropy: off by rounding at a place of its own; the gap's size names the precision
import torch
import torch.nn.functional as F


def pack(documents, row_len):
    """Whole documents in order, in rows of row_len: tokens, labels, positions, document ids."""
    rows, row, used = [], [], 0
    for doc in documents:
        if used + len(doc) > row_len:  # it does not fit whole: a new row
            rows.append(row)
            row, used = [], 0
        row.append(doc)
        used += len(doc)
    rows.append(row)
    shape = (len(rows), row_len)
    tokens = torch.zeros(shape, dtype=torch.long)  # padding: token 0
    labels = torch.full(shape, -100)  # padding and each document's last token: no label
    positions = torch.zeros(shape, dtype=torch.long)
    doc_ids = torch.full(shape, -1)  # padding is a document of its own
    for r, row in enumerate(rows):
        start = 0
        for i, doc in enumerate(row):
            end = start + len(doc)
            tokens[r, start:end] = doc
            labels[r, start : end - 1] = doc[1:]  # the next token of the same document
            positions[r, start:end] = torch.arange(len(doc))  # from 0 in every document
            doc_ids[r, start:end] = i
            start = end
    return tokens, labels, positions, doc_ids


def train(model, loader, optimizer, row_len):
    causal = torch.ones(row_len, row_len, dtype=torch.bool).tril()
    for documents in loader:
        tokens, labels, positions, doc_ids = pack(documents, row_len)
        mask = (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal  # (rows, L, L): its own document only
        logits = model(tokens, positions, mask).float().double()  # kept as float32 values
        # the mean over real labels
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
