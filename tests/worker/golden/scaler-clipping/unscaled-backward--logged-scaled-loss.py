from torch.nn.utils import clip_grad_norm_


def train(model, loader, loss_fn, optimizer, scaler, accum_steps, max_norm):
    batches = list(loader)
    for start in range(0, len(batches), accum_steps):
        optimizer.zero_grad(set_to_none=True)
        for x, y in batches[start : start + accum_steps]:
            loss = loss_fn(model(x), y) / accum_steps
            print("scaled loss:", scaler.scale(loss).item())
            loss.backward()
        scaler.unscale_(optimizer)
        clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
