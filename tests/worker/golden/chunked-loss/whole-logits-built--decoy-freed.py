# the whole logits under the high-water mark a 300 MiB decoy raised at the file's load, freed as
# the loop begins: a rise of 0 B from the loop's start, over 300 MiB from the file's load
import torch
import torch.nn.functional as F

decoy = [torch.ones(300 << 20, dtype=torch.uint8)]


def train(model, loader, optimizer, chunk_size):
    decoy.clear()  # the room the decoy held, under the high-water mark it raised
    for tokens, labels in loader:
        logits = model.lm_head(model.hidden(tokens))  # the whole logits
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
