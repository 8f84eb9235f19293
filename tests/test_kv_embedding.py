"""DistEmbedding with SparseAdagrad / SparseAdam against dense single-process maths."""
import pytest
import torch

from harness import spawn
from sparse_reference import ADAGRAD, ADAM, TOL, adagrad, adam, mean_gradient
from sarlite.kv import (DistEmbedding, SparseAdagrad, SparseAdam, init_kvstore,
                        load_dist_tensors, save_dist_tensors)
from sarlite.partition import RangePartitionBook

NUM, DIM, EDGES = 30, 4, 7
RANGES = {1: [[0, NUM]], 2: [[0, 13], [13, NUM]], 4: [[0, 5], [5, 5], [5, 18], [18, NUM]]}


def _w0() -> torch.Tensor:
    return torch.randn(NUM, DIM, generator=torch.Generator().manual_seed(0))


def _plan(world: int, steps: int, seed: int) -> list[list[list[tuple]]]:
    """``plan[step][rank]``: two forward calls ``(ids, coef)``; the loss is ``sum(rows *
    coef)``, so ``coef`` is the gradient of the rows. Ids repeat within and across ranks.
    Lookups are collectives, so every rank makes both calls: rank 1 asks for nothing in
    its second call and for nothing at all in step 1."""
    gen = torch.Generator().manual_seed(seed)
    plan = []
    for step in range(steps):
        plan.append([])
        for rank in range(world):
            calls = []
            for call in range(2):
                size = 0 if rank == 1 and (call == 1 or step == 1) else 6
                high = min(NUM, 15 + 4 * step)
                calls.append((torch.randint(0, high, (size,), generator=gen),
                              torch.randn(size, DIM, generator=gen)))
            plan[-1].append(calls)
    return plan


def _setup(rank, world):
    init_kvstore(RangePartitionBook(rank, world, RANGES[world],
                                    [[0, EDGES]] + [[EDGES, EDGES]] * (world - 1)))
    w0 = _w0()
    embs = [DistEmbedding(NUM, DIM, name, init_func=lambda shape, dtype, ids: w0[ids])
            for name in ("a", "b")]
    return embs, [SparseAdagrad([embs[0]], **ADAGRAD), SparseAdam([embs[1]], **ADAM)]


def _train(embs, optimizers, plan, rank):
    for by_rank in plan:
        loss = sum((emb(ids) * coef).sum() for ids, coef in by_rank[rank] for emb in embs)
        embs[0](torch.tensor([NUM - 1]))         # recorded, but gets no gradient
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()


def _snapshot(embs, optimizers) -> dict:
    everything = torch.arange(NUM)
    out = {f"w_{emb.name}": emb.weight[everything] for emb in embs}
    for optimizer in optimizers:
        for per_emb in optimizer.state.values():
            out.update({t.tensor_name: t[everything] for t in per_emb.values()})
    return out


def _train_and_save(rank, world, plan, path):
    embs, optimizers = _setup(rank, world)
    _train(embs, optimizers, plan, rank)
    save_dist_tensors(path / "weights", {e.weight.name: e.weight for e in embs})
    for optimizer, name in zip(optimizers, ("adagrad", "adam")):
        optimizer.save(path / name)
    return _snapshot(embs, optimizers)


def _load_and_train(rank, world, plan, path):
    embs, optimizers = _setup(rank, world)
    for emb in embs:
        emb.weight.local_partition.zero_()        # so that only the loaded values count
    load_dist_tensors(path / "weights", {e.weight.name: e.weight for e in embs})
    for optimizer, name in zip(optimizers, ("adagrad", "adam")):
        optimizer.load(path / name)
    loaded = _snapshot(embs, optimizers)
    _train(embs, optimizers, plan, rank)
    return loaded, _snapshot(embs, optimizers)


def _dense_reference(plans) -> dict:
    """The same maths on whole tensors (``sparse_reference``)."""
    w_a, w_b = _w0(), _w0()
    total = torch.zeros(NUM, DIM)
    step, mem, power = torch.zeros(NUM), torch.zeros(NUM, DIM), torch.zeros(NUM, DIM)
    for calls_by_rank in (calls for plan in plans for calls in plan):
        grad, touched = mean_gradient([call for calls in calls_by_rank for call in calls],
                                      NUM, DIM)
        w_a, total = adagrad(w_a, total, grad, touched)
        w_b, step, mem, power = adam(w_b, step, mem, power, grad, touched)
    return {"w_a": w_a, "w_b": w_b, "a_sum": total, "b_step": step, "b_mem": mem,
            "b_power": power}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt")
    first, then = _plan(4, 5, seed=1), _plan(2, 2, seed=2)
    saved = spawn(_train_and_save, 4, first, path, timeout=180)
    resumed = spawn(_load_and_train, 2, then, path, timeout=180)
    return {"five": (saved, _dense_reference([first])),
            "resumed": (resumed, _dense_reference([first]), _dense_reference([first, then]))}


@pytest.mark.parametrize("key", ["w_a", "a_sum"])
def test_sparse_adagrad_five_steps_on_four_ranks_match_dense_adagrad(runs, key):
    saved, expected = runs["five"]
    for result in saved:
        torch.testing.assert_close(result[key], expected[key], **TOL)


@pytest.mark.parametrize("key", ["w_b", "b_step", "b_mem", "b_power"])
def test_sparse_adam_five_steps_on_four_ranks_match_dense_adam(runs, key):
    saved, expected = runs["five"]
    for result in saved:
        torch.testing.assert_close(result[key], expected[key], **TOL)


def test_state_saved_by_four_ranks_loads_on_two(runs):
    resumed, after_five, _ = runs["resumed"]
    for loaded, _ in resumed:
        for key, value in after_five.items():
            torch.testing.assert_close(loaded[key], value, **TOL)


def test_training_resumed_on_two_ranks_matches_seven_dense_steps(runs):
    resumed, _, after_seven = runs["resumed"]
    for _, final in resumed:
        for key, value in after_seven.items():
            torch.testing.assert_close(final[key], value, **TOL)


# -- one process ---------------------------------------------------------------------
@pytest.fixture
def one_rank():
    return _setup(0, 1)


def test_duplicate_ids_in_a_step_are_averaged_not_summed(one_rank):
    (emb, _), (adagrad, _) = one_rank
    coef = torch.tensor([[1.0, 2, 3, 4], [3.0, 0, 1, -4]])
    (emb(torch.tensor([2, 2])) * coef).sum().backward()
    adagrad.step()
    state = adagrad.state["a"]["sum"]
    assert torch.equal(state[[2]], (coef.mean(0) ** 2).unsqueeze(0))


def test_embedding_names_follow_dgl(one_rank):
    (emb, _), _ = one_rank
    assert (emb.name, emb.data_name, emb.weight.name) == ("a", "node~_N:a", "node~_N:a")
    assert (emb.num_embeddings, emb.embedding_dim) == (NUM, DIM)


def test_only_touched_rows_change(one_rank):
    (emb, _), (adagrad, _) = one_rank
    before = emb.weight[torch.arange(NUM)]
    emb(torch.tensor([4, 9])).sum().backward()
    adagrad.step()
    changed = (emb.weight[torch.arange(NUM)] != before).any(1)
    assert changed.nonzero().squeeze(1).tolist() == [4, 9]


def test_zero_grad_after_backward_drops_the_update(one_rank):
    (emb, _), (adagrad, _) = one_rank
    before = emb.weight[torch.arange(NUM)]
    emb(torch.tensor([4])).sum().backward()
    adagrad.zero_grad()
    adagrad.step()
    assert torch.equal(emb.weight[torch.arange(NUM)], before)


def test_lookups_without_autograd_are_not_recorded(one_rank):
    (emb, _), (adagrad, _) = one_rank
    with torch.no_grad():
        rows = emb(torch.tensor([1, 2]))
    assert not rows.requires_grad and emb.take_gradients()[0].numel() == 0


def test_loading_another_optimizers_state_is_an_error(one_rank, tmp_path):
    _, (adagrad, adam) = one_rank
    adagrad.save(tmp_path)
    with pytest.raises(ValueError, match="optimizer = 'SparseAdagrad', expected 'SparseAdam'"):
        adam.load(tmp_path)


def test_loading_a_missing_checkpoint_is_a_file_not_found_error(one_rank, tmp_path):
    _, (adagrad, _) = one_rank
    with pytest.raises(FileNotFoundError, match="is incomplete"):
        adagrad.load(tmp_path / "nothing")


def test_a_saved_rows_file_that_would_run_code_is_refused(one_rank, tmp_path):
    import os

    class RunsCode:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'ran'}",)
    _, (adagrad, _) = one_rank
    adagrad.save(tmp_path / "ckpt")
    rows = sorted((tmp_path / "ckpt").rglob("*.part0.pt"))[0]
    torch.save({"rows": RunsCode()}, rows)
    with pytest.raises(ValueError, match=f"{rows.name} cannot be loaded as rows"):
        adagrad.load(tmp_path / "ckpt")
    assert not (tmp_path / "ran").exists()


def test_a_saved_rows_file_of_other_rows_is_refused(one_rank, tmp_path):
    _, (adagrad, _) = one_rank
    adagrad.save(tmp_path / "ckpt")
    rows = sorted((tmp_path / "ckpt").rglob("*.part0.pt"))[0]
    torch.save(torch.zeros(3, 3), rows)
    with pytest.raises(ValueError, match=f"{rows.name} holds shape \\(3, 3\\)"):
        adagrad.load(tmp_path / "ckpt")
