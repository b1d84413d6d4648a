import torch


def train(model, loader, loss_fn, optimizer, scaler, device_type, amp_dtype, max_norm):
    """Precisão mista: forward em 16 bits sob autocast, perda escalada com o GradScaler."""
    for x, y in loader:
        optimizer.zero_grad()
        with torch.autocast(device_type, dtype=amp_dtype):
            loss = loss_fn(model(x), y)  # camadas lineares em float16, a perda em float32
        scaler.scale(loss).backward()  # fora do autocast
        scaler.unscale_(optimizer)  # o clipping vê os gradientes verdadeiros, não os escalados
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)  # pulado quando algum gradiente é inf ou NaN
        scaler.update()  # metade da escala após um passo pulado; mais, após passos limpos
