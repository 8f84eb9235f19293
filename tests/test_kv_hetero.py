"""The KV layer and node_split/edge_split on a heterogeneous partitioning: per-type
policies over type-wise ids, against dense single-process tensors.

The layouts are built by hand for 1, 2 and 3 partitions. Homogeneous ids are sorted by
partition, then by type id; type-wise ids number a type's nodes (edges) one partition
after the other, so a type-wise id means the same node (edge) in every layout and the
dense reference is indexed by it. With 2 partitions, partition 1 owns no author; with 3,
partition 1 owns no author and no venue (and no ``paper:in:venue`` edge)::

    nodes     author  paper  venue        edges   writes  cites  in
    1 part    7       9      4                    12      9      5
    2 parts   7, 0    4, 5   1, 3                 6, 6    4, 5   0, 5
    3 parts   3, 0, 4 2, 4, 3 2, 0, 2             5, 3, 4 2, 4, 3 2, 0, 3

``paper`` and ``paper:cites:paper`` both have 9 ids, so a 9-row tensor needs its policy
named.
"""
import pytest
import torch

from harness import outcome, spawn
from sparse_reference import ADAGRAD, ADAM, TOL, adagrad, adam, mean_gradient
from sarlite.kv import (DistEmbedding, DistTensor, KVStore, SparseAdagrad, SparseAdam,
                        init_kvstore, load_dist_tensors, same_partitioning,
                        save_dist_tensors)
from sarlite.partition import EdgePartitionPolicy, NodePartitionPolicy, RangePartitionBook
from sarlite.sampling.split import edge_split, node_split

NTYPES = ["author", "paper", "venue"]
ETYPES = [("author", "writes", "paper"), ("paper", "cites", "paper"),
          ("paper", "in", "venue")]
CITES = ("paper", "cites", "paper")
NODE_COUNTS = {1: {"author": [7], "paper": [9], "venue": [4]},
               2: {"author": [7, 0], "paper": [4, 5], "venue": [1, 3]},
               3: {"author": [3, 0, 4], "paper": [2, 4, 3], "venue": [2, 0, 2]}}
EDGE_COUNTS = {1: {ETYPES[0]: [12], ETYPES[1]: [9], ETYPES[2]: [5]},
               2: {ETYPES[0]: [6, 6], ETYPES[1]: [4, 5], ETYPES[2]: [0, 5]},
               3: {ETYPES[0]: [5, 3, 4], ETYPES[1]: [2, 4, 3], ETYPES[2]: [2, 0, 3]}}
# same homogeneous node ranges as the 2-part layout ([0, 12), [12, 20)), other types
OTHER_NODE_COUNTS = {"author": [6, 1], "paper": [5, 4], "venue": [1, 3]}
WORLDS = [1, 2, 3]
WIDTH, DIM = 3, 4


def _homogeneous_map(counts: dict) -> dict:
    """``{type: [[start, end) per partition]}`` in homogeneous ids: partition by
    partition, types in type-id order."""
    out = {name: [] for name in counts}
    start = 0
    for part in range(len(next(iter(counts.values())))):
        for name, per_part in counts.items():
            out[name].append([start, start + per_part[part]])
            start += per_part[part]
    return out


def _book(rank: int, world: int, node_counts=None) -> RangePartitionBook:
    nodes = _homogeneous_map(node_counts or NODE_COUNTS[world])
    edges = _homogeneous_map(EDGE_COUNTS[world])
    return RangePartitionBook(rank, world, nodes,
                              {":".join(c): r for c, r in edges.items()},
                              {t: i for i, t in enumerate(NTYPES)},
                              {":".join(c): i for i, c in enumerate(ETYPES)})


def _policies(book: RangePartitionBook) -> dict:
    """``{type: policy}`` of every node type and every canonical edge type."""
    return {**{t: NodePartitionPolicy(book, t) for t in NTYPES},
            **{c: EdgePartitionPolicy(book, c) for c in ETYPES}}


def _count(kind) -> int:
    return sum((NODE_COUNTS if isinstance(kind, str) else EDGE_COUNTS)[1][kind])


def _typewise_range(kind, world: int, part: int) -> list[int]:
    """``[start, end)`` of the type-wise ids of ``kind`` that ``part`` owns, counted
    from the layout table (not from the book)."""
    per_part = (NODE_COUNTS if isinstance(kind, str) else EDGE_COUNTS)[world][kind]
    return [sum(per_part[:part]), sum(per_part[:part + 1])]


def _full(kind) -> torch.Tensor:
    seed = (NTYPES + ETYPES).index(kind)
    return torch.randn(_count(kind), WIDTH, generator=torch.Generator().manual_seed(seed))


def _requests(rank: int, world: int, step: int, kind) -> torch.Tensor:
    """Random type-wise ids with duplicates; the last rank asks for nothing."""
    if rank == world - 1 and world > 1:
        return torch.zeros(0, dtype=torch.int64)
    gen = torch.Generator().manual_seed(100 * step + 10 * rank + (NTYPES + ETYPES).index(kind))
    return torch.randint(0, _count(kind), (2 * _count(kind),), generator=gen)


def _values(rank: int, step: int, ids: torch.Tensor) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + 10 * step + rank)
    return torch.randn(ids.numel(), WIDTH, generator=gen)


# -- training plan and its dense reference ---------------------------------------------
TABLES = {"emb_author": "author", "emb_paper": "paper", "emb_venue": "venue",
          "emb_cites": CITES}        # SparseAdam on the node types, SparseAdagrad on cites


def _w0(kind) -> torch.Tensor:
    return torch.randn(_count(kind), DIM, generator=torch.Generator().manual_seed(
        50 + (NTYPES + ETYPES).index(kind)))


def _plan(world: int, steps: int, seed: int) -> list:
    """``plan[step][rank][table]``: two lookups ``(ids, coef)``; the loss is ``sum(rows *
    coef)``, so ``coef`` is the gradient of the rows. Ids repeat within and across ranks;
    rank 1 asks for nothing in its second lookups and nothing at all in step 1."""
    gen = torch.Generator().manual_seed(seed)
    plan = []
    for step in range(steps):
        plan.append([])
        for rank in range(world):
            calls = {}
            for table, kind in TABLES.items():
                calls[table] = []
                for call in range(2):
                    size = 0 if rank == 1 and (call == 1 or step == 1) else 5
                    calls[table].append((torch.randint(0, _count(kind), (size,),
                                                       generator=gen),
                                         torch.randn(size, DIM, generator=gen)))
            plan[-1].append(calls)
    return plan


def _dense(plans: list) -> dict:
    """The optimizers' maths on whole tables, indexed by type-wise id: every touched row
    is updated once with the mean of its gradients."""
    out = {}
    for table, kind in TABLES.items():
        num = _count(kind)
        weight = _w0(kind)
        step, mem, power = torch.zeros(num), torch.zeros(num, DIM), torch.zeros(num, DIM)
        total = torch.zeros(num, DIM)
        for by_rank in (by_rank for plan in plans for by_rank in plan):
            grad, touched = mean_gradient(
                [call for calls in by_rank for call in calls[table]], num, DIM)
            if kind == CITES:
                weight, total = adagrad(weight, total, grad, touched)
            else:
                weight, step, mem, power = adam(weight, step, mem, power, grad, touched)
        out[f"w_{table}"] = weight
        out.update({f"{table}_sum": total} if kind == CITES else
                   {f"{table}_step": step, f"{table}_mem": mem, f"{table}_power": power})
    return out


def _embeddings(book: RangePartitionBook):
    policies = _policies(book)
    embs = {table: DistEmbedding(_count(kind), DIM, table, part_policy=policies[kind],
                                 init_func=lambda shape, dtype, ids, k=kind: _w0(k)[ids])
            for table, kind in TABLES.items()}
    adam = SparseAdam([embs[t] for t in TABLES if TABLES[t] != CITES], **ADAM)
    return embs, [adam, SparseAdagrad([embs["emb_cites"]], **ADAGRAD)]


def _train(embs: dict, optimizers: list, plan: list, rank: int) -> None:
    for by_rank in plan:
        loss = sum((embs[table](ids) * coef).sum()
                   for table, calls in by_rank[rank].items() for ids, coef in calls)
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()


def _snapshot(embs: dict, optimizers: list) -> dict:
    out = {f"w_{table}": emb.weight[0:emb.num_embeddings] for table, emb in embs.items()}
    for optimizer in optimizers:
        for per_emb in optimizer.state.values():
            out.update({t.tensor_name: t[0:len(t)] for t in per_emb.values()})
    return out


# -- what each world size runs ----------------------------------------------------------
def _tensor_scenarios(rank: int, world: int, book: RangePartitionBook) -> dict:
    out = {"ranges": {kind: p.ranges.tolist() for kind, p in _policies(book).items()}}
    for kind, policy in _policies(book).items():
        full = _full(kind)
        x = DistTensor((_count(kind), WIDTH), torch.float32, "x", part_policy=policy,
                       init_func=lambda shape, dtype, ids, full=full: full[ids])
        given = DistTensor((_count(kind),), torch.int64, "given", part_policy=policy,
                           init_func=lambda shape, dtype, ids: ids.clone())
        asked = _requests(rank, world, 0, kind)
        pulled = x[asked]
        written = _requests(rank, world, 1, kind)
        x[written] = _values(rank, 1, written)
        after_write = x[0:len(x)]
        added = _requests(rank, world, 2, kind)
        x.scatter_add(added, _values(rank, 2, added))
        out[kind] = {"name": x.name, "pulled": (asked, pulled), "after_write": after_write,
                     "after_add": x[0:len(x)], "local": x.local_partition.clone(),
                     "given": given.local_partition.clone()}
    mask = DistTensor((_count("author"),), torch.bool, "train_mask",
                      part_policy=NodePartitionPolicy(book, "author"),
                      init_func=lambda shape, dtype, ids: ids % 3 != 1)
    out["split"] = node_split(mask, ntype="author")
    return out


def _run(rank: int, world: int, path, load_from: int) -> dict:
    """Tensor scenarios; train, snapshot and save; then, in a fresh store, load the
    checkpoint of ``load_from`` ranks, snapshot, and train on."""
    if world == 2:                         # rank 1 brings other types, same ranges
        other = _book(rank, world, OTHER_NODE_COUNTS if rank == 1 else None)
        out = {"agreement": outcome(lambda: KVStore(other))}
    else:
        out = {}
    book = _book(rank, world)
    init_kvstore(book)
    out["tensors"] = _tensor_scenarios(rank, world, book)

    embs, optimizers = _embeddings(book)
    _train(embs, optimizers, _plan(world, 3, seed=world), rank)
    out["trained"] = _snapshot(embs, optimizers)
    save_dist_tensors(path / f"w{world}" / "weights",
                      {e.weight.name: e.weight for e in embs.values()})
    for i, optimizer in enumerate(optimizers):
        optimizer.save(path / f"w{world}" / f"optim{i}")

    init_kvstore(book)                     # fresh tensors of the same names
    embs, optimizers = _embeddings(book)
    for emb in embs.values():
        emb.weight.local_partition.zero_()
    load_dist_tensors(path / f"w{load_from}" / "weights",
                      {e.weight.name: e.weight for e in embs.values()})
    for i, optimizer in enumerate(optimizers):
        optimizer.load(path / f"w{load_from}" / f"optim{i}")
    out["loaded"] = _snapshot(embs, optimizers)
    _train(embs, optimizers, _plan(world, 2, seed=10 + world), rank)
    out["resumed"] = _snapshot(embs, optimizers)
    return out


LOAD_FROM = {1: 1, 2: 1, 3: 2}            # world 1 reloads its own; the others re-shard


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("hetero")
    results = {1: [_run(0, 1, path, LOAD_FROM[1])]}
    for world in WORLDS[1:]:
        results[world] = spawn(_run, world, path, LOAD_FROM[world], timeout=120)
    return results


# -- policies ---------------------------------------------------------------------------
@pytest.mark.parametrize("world", WORLDS)
def test_policy_ranges_are_the_type_wise_ids_each_partition_owns(world):
    for kind, policy in _policies(_book(0, world)).items():
        assert policy.ranges.dtype == torch.int64
        assert policy.ranges.tolist() == [_typewise_range(kind, world, p)
                                          for p in range(world)]


def test_policy_ranges_of_the_default_types_are_the_homogeneous_ranges():
    book = _book(1, 3)
    assert torch.equal(NodePartitionPolicy(book).ranges, book.node_ranges)
    assert torch.equal(EdgePartitionPolicy(book).ranges, book.edge_ranges)


def test_a_store_has_one_policy_per_node_type_and_per_canonical_edge_type():
    store = KVStore(_book(0, 1))
    assert list(store.all_possible_part_policy) == [
        "node~author", "node~paper", "node~venue", "edge~author:writes:paper",
        "edge~paper:cites:paper", "edge~paper:in:venue"]


def test_find_policy_picks_the_one_type_of_that_size():
    store = KVStore(_book(0, 1))
    assert store.find_policy(7).policy_str == "node~author"
    assert store.find_policy(12).policy_str == "edge~author:writes:paper"
    init_kvstore(_book(0, 1))
    assert DistTensor((4, 2), torch.float32, "inferred").name == "node~venue:inferred"


def test_find_policy_names_every_policy_of_an_ambiguous_size():
    with pytest.raises(ValueError, match=r"shape\[0\] = 9 is the size of each of the "
                       r"partition policies \['node~paper', 'edge~paper:cites:paper'\].*"
                       r"pass part_policy"):
        KVStore(_book(0, 1)).find_policy(9)


def test_find_policy_lists_the_sizes_when_no_type_has_that_size():
    with pytest.raises(ValueError, match=r"shape\[0\] = 8 is the size of none of the "
                       r"partition policies \(node~author: 7, node~paper: 9, "
                       r"node~venue: 4, edge~author:writes:paper: 12, "
                       r"edge~paper:cites:paper: 9, edge~paper:in:venue: 5\)"):
        KVStore(_book(0, 1)).find_policy(8)


def test_books_with_equal_homogeneous_ranges_but_other_types_are_other_partitionings():
    ours, theirs = _book(1, 2), _book(1, 2, OTHER_NODE_COUNTS)
    assert torch.equal(ours.node_ranges, theirs.node_ranges)
    assert torch.equal(ours.edge_ranges, theirs.edge_ranges)
    assert not same_partitioning(ours, theirs)
    assert same_partitioning(ours, _book(1, 2))


def test_ranks_creating_a_store_over_books_of_other_types_all_get_a_value_error(runs):
    for kind, message in (result["agreement"] for result in runs[2]):
        assert kind == "ValueError"
        assert "creating a KVStore: the ranks asked for different things" in message


# -- DistTensor of one type ---------------------------------------------------------------
@pytest.mark.parametrize("world", WORLDS)
def test_a_types_tensor_is_named_after_its_policy(runs, world):
    for result in runs[world]:
        assert [result["tensors"][kind]["name"] for kind in NTYPES + ETYPES] == [
            "node~author:x", "node~paper:x", "node~venue:x",
            "edge~author:writes:paper:x", "edge~paper:cites:paper:x",
            "edge~paper:in:venue:x"]


@pytest.mark.parametrize("world", WORLDS)
def test_init_func_receives_the_type_wise_ids_the_rank_owns(runs, world):
    for rank, result in enumerate(runs[world]):
        for kind in NTYPES + ETYPES:
            start, end = _typewise_range(kind, world, rank)
            assert torch.equal(result["tensors"][kind]["given"], torch.arange(start, end))


@pytest.mark.parametrize("world", WORLDS)
def test_pull_by_type_wise_id_returns_the_types_rows(runs, world):
    for result in runs[world]:
        for kind in NTYPES + ETYPES:
            ids, rows = result["tensors"][kind]["pulled"]
            assert torch.equal(rows, _full(kind)[ids])


def _expected_rows(world: int, kind) -> tuple[torch.Tensor, torch.Tensor]:
    """Dense rows after the writes (last in rank, then position order) and after the
    additions."""
    written = _full(kind)
    for rank in range(world):
        ids = _requests(rank, world, 1, kind)
        for i, row in zip(ids.tolist(), _values(rank, 1, ids)):
            written[i] = row
    added = written.clone()
    for rank in range(world):
        ids = _requests(rank, world, 2, kind)
        added.index_add_(0, ids, _values(rank, 2, ids))
    return written, added


@pytest.mark.parametrize("world", WORLDS)
def test_writes_and_scatter_add_by_type_wise_id_match_a_dense_tensor(runs, world):
    for kind in NTYPES + ETYPES:
        written, added = _expected_rows(world, kind)
        for result in runs[world]:
            assert torch.equal(result["tensors"][kind]["after_write"], written)
            torch.testing.assert_close(result["tensors"][kind]["after_add"], added, **TOL)


@pytest.mark.parametrize("world", WORLDS)
def test_each_rank_stores_the_rows_of_the_type_wise_ids_it_owns(runs, world):
    for kind in NTYPES + ETYPES:
        _, added = _expected_rows(world, kind)
        for rank, result in enumerate(runs[world]):
            start, end = _typewise_range(kind, world, rank)
            torch.testing.assert_close(result["tensors"][kind]["local"], added[start:end],
                                       **TOL)


@pytest.mark.parametrize("world", WORLDS)
def test_node_split_of_a_types_dist_tensor_mask_covers_it_once(runs, world):
    shares = torch.cat([result["tensors"]["split"] for result in runs[world]])
    assert torch.equal(shares.sort().values, torch.tensor([0, 2, 3, 5, 6]))


# -- DistEmbedding of one type and the sparse optimizers -----------------------------------
@pytest.mark.parametrize("world", WORLDS)
def test_sparse_adam_and_adagrad_on_per_type_embeddings_match_the_dense_maths(runs, world):
    expected = _dense([_plan(world, 3, seed=world)])
    for result in runs[world]:
        assert sorted(result["trained"]) == sorted(expected)
        for key, value in expected.items():
            torch.testing.assert_close(result["trained"][key], value, **TOL)


@pytest.mark.parametrize("world", WORLDS)
def test_saved_weights_and_state_load_into_fresh_tensors_of_any_world_size(runs, world):
    saved = runs[LOAD_FROM[world]][0]["trained"]
    for result in runs[world]:
        for key, value in saved.items():
            assert torch.equal(result["loaded"][key], value), key


@pytest.mark.parametrize("world", WORLDS)
def test_training_resumed_after_loading_matches_the_dense_maths(runs, world):
    source = LOAD_FROM[world]
    expected = _dense([_plan(source, 3, seed=source), _plan(world, 2, seed=10 + world)])
    for result in runs[world]:
        for key, value in expected.items():
            torch.testing.assert_close(result["resumed"][key], value, **TOL)


# -- node_split / edge_split by type -------------------------------------------------------
def _mask(count: int, seed: int) -> torch.Tensor:
    return torch.rand(count, generator=torch.Generator().manual_seed(seed)) < 0.6


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("force_even", [True, False])
def test_node_split_of_a_type_returns_each_masked_type_wise_id_once(world, force_even):
    for seed, ntype in enumerate(NTYPES):
        mask = _mask(_count(ntype), seed)
        shares = [node_split(mask, _book(0, world), ntype, rank=r, force_even=force_even)
                  for r in range(world)]
        assert torch.equal(torch.cat(shares).sort().values, mask.nonzero().squeeze(1))
        if force_even:
            counts = [s.numel() for s in shares]
            assert max(counts) - min(counts) <= 1
        else:
            for rank, share in enumerate(shares):
                start, end = _typewise_range(ntype, world, rank)
                assert torch.equal(share, mask[start:end].nonzero().squeeze(1) + start)


def test_node_split_gives_a_rank_whose_partition_has_no_node_of_the_type_an_even_share():
    mask = torch.ones(_count("venue"), dtype=torch.bool)
    shares = [node_split(mask, _book(0, 3), "venue", rank=r) for r in range(3)]
    assert shares[1].numel() > 0 and [s.numel() for s in shares] == [2, 1, 1]
    assert node_split(mask, _book(0, 3), "venue", rank=1, force_even=False).numel() == 0


@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("etype", ["cites", "paper:cites:paper", CITES])
def test_edge_split_of_a_type_returns_each_masked_type_wise_id_once(world, etype):
    mask = _mask(_count(CITES), 7)
    shares = [edge_split(mask, _book(0, world), etype, rank=r, force_even=False)
              for r in range(world)]
    for rank, share in enumerate(shares):
        start, end = _typewise_range(CITES, world, rank)
        assert torch.equal(share, mask[start:end].nonzero().squeeze(1) + start)


def test_the_default_types_on_a_heterogeneous_book_split_homogeneous_ids():
    book = _book(0, 3)
    share = node_split(torch.ones(20, dtype=torch.bool), book, rank=2, force_even=False)
    assert torch.equal(share, torch.arange(*book.node_ranges[2].tolist()))
    share = edge_split(torch.ones(26, dtype=torch.bool), book, rank=1, force_even=False)
    assert torch.equal(share, torch.arange(*book.edge_ranges[1].tolist()))


def test_splitting_by_an_unknown_type_names_the_known_ones():
    with pytest.raises(ValueError, match="unknown node type 'user'.*'author', 'paper'"):
        node_split(torch.ones(7, dtype=torch.bool), _book(0, 2), "user", rank=0)
    with pytest.raises(ValueError, match="unknown edge type 'likes'"):
        edge_split(torch.ones(9, dtype=torch.bool), _book(0, 2), "likes", rank=0)


def test_a_mask_of_the_wrong_length_names_the_type_and_its_count():
    with pytest.raises(ValueError, match="the mask has 9 entries but node type 'author' "
                       "has 7 nodes"):
        node_split(torch.ones(9, dtype=torch.bool), _book(0, 2), "author", rank=0)
    with pytest.raises(ValueError, match="the mask has 7 entries but edge type "
                       "'paper:cites:paper' has 9 edges"):
        edge_split(torch.ones(7, dtype=torch.bool), _book(0, 2), "cites", rank=0)
