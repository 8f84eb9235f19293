"""DistTensor and KVStore: pull/push by global id against a single-process reference."""
import pytest
import torch

from harness import spawn
from sarlite.comm import traffic
from sarlite.kv import DistTensor, init_kvstore
from sarlite.partition import RangePartitionBook

NUM_NODES, NUM_EDGES, WIDTH = 40, 70, 3
WORLDS = [1, 2, 3, 4]


def _ranges(total: int, world: int) -> list[list[int]]:
    """Uneven ranges; with 3 or more parts, part 1 owns nothing."""
    cuts = [0] + [total * (k * k + 1) // (world * world + 1) for k in range(1, world)] + [total]
    if world >= 3:
        cuts[2] = cuts[1]
    return [[a, b] for a, b in zip(cuts, cuts[1:])]


def _book(rank: int, world: int) -> RangePartitionBook:
    return RangePartitionBook(rank, world, _ranges(NUM_NODES, world),
                              _ranges(NUM_EDGES, world))


def _full() -> torch.Tensor:
    return torch.randn(NUM_NODES, WIDTH, generator=torch.Generator().manual_seed(0))


def _requests(rank: int, world: int, step: int, high: int) -> torch.Tensor:
    """Random ids with duplicates; the last rank asks for nothing."""
    if rank == world - 1 and world > 1:
        return torch.zeros(0, dtype=torch.int64)
    gen = torch.Generator().manual_seed(100 * step + rank)
    return torch.randint(0, high, (3 * high // 2,), generator=gen)


def _values(rank: int, ids: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + rank)
    return torch.randn(ids.numel(), WIDTH, generator=gen).to(dtype)


def _scenarios(rank: int, world: int) -> dict:
    """Everything the multi-rank tests check, run once per world size."""
    init_kvstore(_book(rank, world))
    full = _full()
    x = DistTensor((NUM_NODES, WIDTH), torch.float32, "x",
                   init_func=lambda shape, dtype, ids: full[ids])
    out = {"pull": (_requests(rank, world, 0, NUM_NODES), None)}
    out["pull"] = (out["pull"][0], x[out["pull"][0]])

    pushed = _requests(rank, world, 1, NUM_NODES)
    x[pushed] = _values(rank, pushed)
    out["push"] = (pushed, x[torch.arange(NUM_NODES)])

    added = _requests(rank, world, 2, NUM_NODES)
    x.scatter_add(added, _values(rank, added))
    out["add"] = (added, x[torch.arange(NUM_NODES)])

    counts = DistTensor((NUM_EDGES,), torch.int64, "counts")   # edge policy, 1-D rows
    edges = _requests(rank, world, 3, NUM_EDGES)
    before = x[torch.arange(NUM_NODES)]
    counts.scatter_add(edges, torch.ones_like(edges))
    mid = x[edges % NUM_NODES]
    counts.scatter_add(edges, torch.ones_like(edges))
    out["interleave"] = (edges, counts[torch.arange(NUM_EDGES)], before, mid)

    traffic.reset()
    remote = torch.full((50,), NUM_NODES - 1 if rank == 0 else 0)
    x[remote if world > 1 else remote[:0]]
    out["traffic"] = traffic.snapshot().get("kv_pull", {"sent": 0, "received": 0})
    out["policies"] = (x.part_policy.policy_str, counts.part_policy.policy_str,
                       tuple(x.local_partition.shape), x.name, x.tensor_name)
    return out


@pytest.fixture(scope="module")
def runs() -> dict[int, list[dict]]:
    results = {1: [_scenarios(0, 1)]}
    for world in WORLDS[1:]:
        results[world] = spawn(_scenarios, world, timeout=180)
    return results


@pytest.mark.parametrize("world", WORLDS)
def test_pull_returns_the_rows_asked_for_in_order_with_duplicates(runs, world):
    full = _full()
    for ids, rows in (r["pull"] for r in runs[world]):
        assert torch.equal(rows, full[ids])


def _after_pushes(world: int, step: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    ids = [_requests(r, world, step, NUM_NODES) for r in range(world)]
    return ids, [_values(r, i) for r, i in enumerate(ids)]


@pytest.mark.parametrize("world", WORLDS)
def test_push_keeps_the_last_write_in_source_rank_then_position_order(runs, world):
    expected = _full()
    ids, values = _after_pushes(world, 1)
    for r in range(world):                    # rank order, then position order
        for i, v in zip(ids[r].tolist(), values[r]):
            expected[i] = v
    for result in runs[world]:
        assert torch.equal(result["push"][1], expected)


@pytest.mark.parametrize("world", WORLDS)
def test_scatter_add_adds_every_contribution_to_the_pushed_rows(runs, world):
    expected = runs[world][0]["push"][1].clone()
    ids, values = _after_pushes(world, 2)
    for r in range(world):
        expected.index_add_(0, ids[r], values[r])
    for result in runs[world]:
        torch.testing.assert_close(result["add"][1], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("world", WORLDS)
def test_two_tensors_interleaved_keep_their_own_rows(runs, world):
    edges = torch.cat([r["interleave"][0] for r in runs[world]])
    expected = 2 * torch.bincount(edges, minlength=NUM_EDGES)
    for result in runs[world]:
        own_edges, counts, before, mid = result["interleave"]
        assert torch.equal(counts, expected)
        assert torch.equal(mid, before[own_edges % NUM_NODES])


@pytest.mark.parametrize("world", [2, 3, 4])
def test_pull_sends_a_duplicated_remote_id_once_and_its_row_once(runs, world):
    # rank 0 asks 50 times for the last node, every other rank 50 times for node 0
    for rank, result in enumerate(runs[world]):
        headers = 2 * 8 * (world - 1)             # status and tag, to every other rank
        rows_served = world - 1 if rank == 0 else int(rank == world - 1)
        assert result["traffic"]["sent"] == headers + 8 + rows_served * WIDTH * 4
