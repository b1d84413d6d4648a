# A well-known recipe: count the tokens as a tensor, scale the gradients by 1 / count at the boundary


def train(model, loader, loss_fn, optimizer, accum_steps):
    num_tokens = 0
    for i, (inputs, labels) in enumerate(loader):
        num_tokens = num_tokens + (labels != -100).sum()  # an int64 tensor
        loss_fn(model(inputs), labels).sum().backward()
        if (i + 1) % accum_steps == 0:
            scale = 1 / num_tokens  # an int64 count gives a float32 factor
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(scale)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            num_tokens = 0
