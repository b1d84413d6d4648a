def train(model, loader, loss_fn, make_optimizer):
    """Cada parâmetro dá o passo do próprio Adam assim que o gradiente dele fica pronto."""
    optimizers = {p: make_optimizer([p]) for p in model.parameters()}

    def step_now(p):
        optimizers[p].step()
        p.grad = None  # liberado antes que chegue o gradiente do próximo parâmetro

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(step_now)  # uma vez, antes do loop
    for x, y in loader:
        loss_fn(model(x), y).backward()  # as atualizações acontecem aqui dentro
