import torch.nn.functional as F


def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        logits = model.lm_head(model.hidden(tokens))  # (rows, seq, vocab): the whole logits
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
