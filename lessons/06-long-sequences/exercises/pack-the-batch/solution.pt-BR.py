import torch
import torch.nn.functional as F


def pack(documents, row_len):
    """Documentos inteiros, em ordem, em linhas de row_len: tokens, rótulos, posições, ids de documento."""
    rows, row, used = [], [], 0
    for doc in documents:
        if used + len(doc) > row_len:  # não cabe inteiro: uma linha nova
            rows.append(row)
            row, used = [], 0
        row.append(doc)
        used += len(doc)
    rows.append(row)
    shape = (len(rows), row_len)
    tokens = torch.zeros(shape, dtype=torch.long)  # preenchimento: token 0
    labels = torch.full(shape, -100)  # preenchimento e último token de cada documento: sem rótulo
    positions = torch.zeros(shape, dtype=torch.long)
    doc_ids = torch.full(shape, -1)  # o preenchimento é um documento à parte
    for r, row in enumerate(rows):
        start = 0
        for i, doc in enumerate(row):
            end = start + len(doc)
            tokens[r, start:end] = doc
            labels[r, start : end - 1] = doc[1:]  # o próximo token do mesmo documento
            positions[r, start:end] = torch.arange(len(doc))  # do 0 em cada documento
            doc_ids[r, start:end] = i
            start = end
    return tokens, labels, positions, doc_ids


def train(model, loader, optimizer, row_len):
    causal = torch.ones(row_len, row_len, dtype=torch.bool).tril()
    for documents in loader:
        tokens, labels, positions, doc_ids = pack(documents, row_len)
        mask = (doc_ids[:, :, None] == doc_ids[:, None, :]) & causal  # (linhas, L, L): só o próprio documento
        logits = model(tokens, positions, mask)
        # a média sobre os rótulos reais
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
