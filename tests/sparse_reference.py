"""Dense single-process maths of the sparse optimizers, the reference their tests compare
with: each step, every row touched by some lookup is updated once with the mean of its
gradients (duplicates averaged), untouched rows keep their values and state."""
import torch

ADAGRAD = {"lr": 0.1, "eps": 1e-10}
ADAM = {"lr": 0.05, "betas": (0.9, 0.99), "eps": 1e-8}
TOL = {"rtol": 0, "atol": 1e-6}


def mean_gradient(calls, num: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad, touched)`` of one step from its ``(ids, coef)`` lookups (``coef`` is the
    gradient of the rows): ``(num, dim)`` mean gradients and a ``(num, 1)`` mask."""
    grad, count = torch.zeros(num, dim), torch.zeros(num)
    for ids, coef in calls:
        grad.index_add_(0, ids, coef)
        count.index_add_(0, ids, torch.ones(ids.numel()))
    return grad / count.clamp(min=1).unsqueeze(1), (count > 0).unsqueeze(1)


def adagrad(weight, total, grad, touched) -> tuple[torch.Tensor, torch.Tensor]:
    """One Adagrad step on the touched rows; ``(weight, sum of squares)``."""
    total = torch.where(touched, total + grad * grad, total)
    return torch.where(touched, weight - ADAGRAD["lr"] * grad /
                       (total.sqrt() + ADAGRAD["eps"]), weight), total


def adam(weight, step, mem, power, grad, touched) -> tuple:
    """One Adam step on the touched rows (a step count per row); ``(weight, step, mem,
    power)``."""
    beta1, beta2 = ADAM["betas"]
    step = step + touched.squeeze(1)
    mem = torch.where(touched, beta1 * mem + (1 - beta1) * grad, mem)
    power = torch.where(touched, beta2 * power + (1 - beta2) * grad * grad, power)
    t = step.clamp(min=1).unsqueeze(1)
    update = ADAM["lr"] * (mem / (1 - beta1 ** t)) / \
        ((power / (1 - beta2 ** t)).sqrt() + ADAM["eps"])
    return torch.where(touched, weight - update, weight), step, mem, power
