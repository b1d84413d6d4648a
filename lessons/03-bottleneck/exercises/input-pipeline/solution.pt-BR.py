import torch
from torch.utils.data import DataLoader


def make_loader(dataset, batch_size):
    """O loader que o loop de treino percorre: os mesmos lotes, carregados mais depressa."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        num_workers=2,  # dois processos carregam os próximos lotes enquanto este treina
        pin_memory=torch.cuda.is_available(),  # memória fixa: a cópia para a GPU não espera
    )
