"""node_split / edge_split: DGL's semantics, even shares that stay local where they can."""
import numpy as np
import pytest
import torch

import sarlite
from conftest import random_graph
from sarlite import RangePartitionBook
from sarlite.sampling.split import edge_split, node_split

NODE_MAP = [[0, 40], [40, 40], [40, 55], [55, 100]]     # part 1 owns no node
EDGE_MAP = [[0, 10], [10, 30], [30, 31], [31, 60]]


def _book(part: int = 0) -> RangePartitionBook:
    return RangePartitionBook(part, 4, NODE_MAP, EDGE_MAP)


def _shares(mask, split=node_split, **kwargs) -> list[torch.Tensor]:
    return [split(mask, _book(), rank=r, **kwargs) for r in range(4)]


def _owner(ids: torch.Tensor, ranges) -> torch.Tensor:
    ends = torch.tensor([hi for _, hi in ranges])
    return torch.searchsorted(ends, ids, right=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_even_split_gives_equal_counts_and_covers_the_mask_once(seed):
    mask = torch.rand(100, generator=torch.Generator().manual_seed(seed)) < 0.37
    shares = _shares(mask)
    counts = [s.numel() for s in shares]
    assert max(counts) - min(counts) <= 1
    union = torch.cat(shares)
    assert union.unique().numel() == union.numel()                     # no duplicates
    assert torch.equal(union.sort().values, mask.nonzero().squeeze(1))  # exactly the mask


def test_even_split_keeps_the_most_owned_ids_any_even_split_can():
    mask = torch.zeros(100, dtype=torch.bool)
    mask[:30] = True           # part 0 owns 30 masked ids, part 2 owns 0, part 3 owns 10
    mask[60:70] = True
    shares = _shares(mask)
    assert [s.numel() for s in shares] == [10, 10, 10, 10]
    local = [int((_owner(s, NODE_MAP) == r).sum()) for r, s in enumerate(shares)]
    # an even share holds at most min(owned, 10) owned ids: 10 + 0 + 0 + 10
    assert local == [10, 0, 0, 10]
    assert torch.equal(shares[0], torch.arange(10))                    # lowest owned first


def test_even_split_of_a_mask_balanced_by_the_partitioner_is_almost_all_local(tmp_path):
    g = random_graph(num_nodes=400, num_edges=2000, seed=3)
    orig, _ = sarlite.partition_graph(g, "g", 3, tmp_path, balance_ntypes=
                                      g.ndata["train_mask"].long(), return_mapping=True)
    book, *_ = sarlite.load_partition_book(str(tmp_path / "g.json"), 0)
    mask = g.ndata["train_mask"][orig]                                 # new ids
    shares = [node_split(mask, book, rank=r) for r in range(3)]
    local = sum(int((book.nid2partid(s) == r).sum()) for r, s in enumerate(shares))
    assert local >= 0.95 * int(mask.sum())


def test_uneven_split_returns_the_owned_masked_ids():
    mask = torch.rand(100, generator=torch.Generator().manual_seed(4)) < 0.5
    for r, share in enumerate(_shares(mask, force_even=False)):
        lo, hi = NODE_MAP[r]
        assert torch.equal(share, mask[lo:hi].nonzero().squeeze(1) + lo)


@pytest.mark.parametrize("force_even", [True, False])
def test_an_empty_mask_gives_every_rank_no_ids(force_even):
    for share in _shares(np.zeros(100, dtype=bool), force_even=force_even):
        assert share.dtype == torch.int64 and share.numel() == 0


def test_edge_split_splits_edge_ids_by_the_edge_map():
    mask = torch.ones(60, dtype=torch.uint8)
    shares = _shares(mask, split=edge_split)
    assert [s.numel() for s in shares] == [15, 15, 15, 15]
    assert torch.equal(torch.cat(shares).sort().values, torch.arange(60))
    local = [int((_owner(s, EDGE_MAP) == r).sum()) for r, s in enumerate(shares)]
    assert local == [10, 15, 1, 15]


def test_bad_masks_and_ranks_are_rejected_with_the_reason():
    with pytest.raises(ValueError, match="mask has 99 entries but the graph has 100 nodes"):
        node_split(torch.ones(99, dtype=torch.bool), _book(), rank=0)
    with pytest.raises(ValueError, match="mask has 100 entries but the graph has 60 edges"):
        edge_split(torch.ones(100, dtype=torch.bool), _book(), rank=0)
    with pytest.raises(TypeError, match="boolean"):
        node_split(torch.ones(100), _book(), rank=0)
    with pytest.raises(ValueError, match="needs a partition_book"):
        node_split(torch.ones(100, dtype=torch.bool))
    with pytest.raises(ValueError, match="rank 4 is out of range"):
        node_split(torch.ones(100, dtype=torch.bool), _book(), rank=4)
