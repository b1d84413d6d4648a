# wrong (helper, red team 5): the whole softmax kept at once in float16 (62.5 MiB on the first
# batch, under the 72 MiB line); its gradients land ~7e-5 of a step off, outside the 2e-5 allowed.
import torch


class WholeProbsHalf(torch.autograd.Function):
    """WRONG for this exercise: the whole batch's softmax (2,000 x 16,384) kept at once in float16
    (62.5 MiB), each row block computed in float32 and stored; the gradients taken from it."""

    @staticmethod
    def forward(ctx, h, W, b, y):
        n_rows = h.shape[0]
        probs = torch.empty(n_rows, W.shape[0], dtype=torch.float16)
        real = y != -100
        n = real.sum()
        loss = torch.zeros(())
        for i in range(0, n_rows, 64):
            z = torch.addmm(b, h[i : i + 64], W.t())
            lse = torch.logsumexp(z, dim=1)
            yy, rr = y[i : i + 64], real[i : i + 64]
            zy = z.gather(1, yy.clamp(min=0)[:, None])[:, 0]
            loss = loss + ((lse - zy) * rr).sum()
            p = torch.exp(z - lse[:, None])
            p[torch.arange(len(yy))[rr], yy[rr]] -= 1
            p[~rr] = 0
            probs[i : i + 64] = p
        dh = torch.cat([probs[i : i + 64].float() @ W for i in range(0, n_rows, 64)]) / n
        dW = sum(probs[i : i + 64].float().t() @ h[i : i + 64] for i in range(0, n_rows, 64)) / n
        db = probs.sum(0, dtype=torch.float32) / n
        ctx.save_for_backward(dh, dW, db)
        return loss / n

    @staticmethod
    def backward(ctx, g):
        dh, dW, db = ctx.saved_tensors
        return dh * g, dW * g, db * g, None


def train(model, loader, optimizer, chunk_size):
    for tokens, labels in loader:
        h = model.hidden(tokens).flatten(0, 1)
        loss = WholeProbsHalf.apply(h, model.lm_head.weight, model.lm_head.bias, labels.flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
