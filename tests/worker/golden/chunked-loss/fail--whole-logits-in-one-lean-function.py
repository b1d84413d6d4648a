# wrong (red team 5): the whole logits (125 MiB on the first batch) in one buffer, softmax and
# its gradient in place, lm_head never called (no report): the kernel's rise is far over 72 MiB.
import torch


class WholeLean(torch.autograd.Function):
    """WRONG for this exercise: the WHOLE logits of the batch (2,000 x 16,384, 125 MiB) built at
    once in one buffer; softmax and its gradient computed in place in that buffer, the
    gradients of h, W and b taken in forward, the logits freed before backward."""

    @staticmethod
    def forward(ctx, h, W, b, y):
        logits = torch.addmm(b, h, W.t())  # the whole logits
        real = y != -100
        n = real.sum()
        rows = torch.nonzero(real).squeeze(1)
        zy = logits[rows, y[rows]]
        m = logits.max(dim=1, keepdim=True).values
        logits.sub_(m)
        logits.exp_()
        s = logits.sum(dim=1, keepdim=True)
        loss = ((s.log() + m).squeeze(1)[rows] - zy).sum() / n
        logits.div_(s)  # softmax, in place
        logits[~real] = 0
        logits[rows, y[rows]] -= 1
        logits.div_(n)  # d loss / d logits
        ctx.save_for_backward(logits @ W, logits.t() @ h, logits.sum(0))
        del logits
        return loss

    @staticmethod
    def backward(ctx, g):
        dh, dW, db = ctx.saved_tensors
        return dh * g, dW * g, db * g, None


def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        loss = WholeLean.apply(h, model.lm_head.weight, model.lm_head.bias, labels.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
