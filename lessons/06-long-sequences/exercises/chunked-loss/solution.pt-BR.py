import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def train(model, loader, optimizer, chunk_size):
    """A perda sobre pedaços dos estados ocultos: os logits de cada pedaço só existem enquanto ele é usado."""

    def chunk_loss(h, y):  # h: (linhas, dim), y: (linhas,)
        logits = model.lm_head(h)  # (linhas, vocab): os logits de um pedaço, montados de novo no backward
        return F.cross_entropy(logits, y, reduction="sum", ignore_index=-100)

    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)  # (linhas * seq, dim): um pedaço pode atravessar linhas
        y = labels.flatten()
        total = 0
        for start in range(0, len(y), chunk_size):  # o último pedaço pode ser mais curto
            end = start + chunk_size
            total = total + checkpoint(chunk_loss, h[start:end], y[start:end], use_reentrant=False)
        loss = total / (y != -100).sum()  # uma vez só, pelos tokens reais do lote inteiro
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
