"""Partitions are byte-compatible with DGL 2.x in both directions."""
import dgl
import torch

import sarlite
from conftest import random_graph


def test_dgl_load_partition_reads_sarlite_partitions(tmp_path):
    g = random_graph()
    orig_nids, orig_eids = sarlite.partition_graph(g, "g", 3, tmp_path, return_mapping=True)
    for p in range(3):
        graph, nfeat, efeat, book, name, ntypes, etypes = \
            dgl.distributed.load_partition(str(tmp_path / "g.json"), p)
        ours = sarlite.load_partition(tmp_path / "g.json", p)
        assert name == "g" and ntypes == ["_N"] and etypes == [("_N", "_E", "_N")]
        assert book.metadata() == ours[3].metadata()
        assert torch.equal(graph.ndata[dgl.NID], ours[0].ndata[dgl.NID])
        assert torch.equal(graph.edata[dgl.EID], ours[0].edata[dgl.EID])
        assert graph.ndata["inner_node"].dtype == torch.uint8
        lo, hi = ours[3].node_ranges[p].tolist()
        elo, ehi = ours[3].edge_ranges[p].tolist()
        assert torch.equal(nfeat["_N/feat"], g.ndata["feat"][orig_nids[lo:hi]])
        assert torch.equal(efeat["_N:_E:_N/w"], g.edata["w"][orig_eids[elo:ehi]])
        owned = torch.arange(lo, hi)
        assert torch.equal(book.nid2partid(owned), torch.full_like(owned, p))


def test_sarlite_reads_dgl_partitions_with_the_same_book_and_features(tmp_path):
    g = random_graph()
    orig_nids, orig_eids = dgl.distributed.partition_graph(
        g, "g", 3, str(tmp_path), part_method="metis", return_mapping=True)
    for p in range(3):
        theirs = dgl.distributed.load_partition(str(tmp_path / "g.json"), p)
        graph, nfeat, efeat, book, name, ntypes, etypes = \
            sarlite.load_partition(tmp_path / "g.json", p)
        assert (name, ntypes, etypes) == ("g", ["_N"], [("_N", "_E", "_N")])
        assert book.metadata() == theirs[3].metadata()
        ids = torch.arange(g.num_nodes())
        assert torch.equal(book.nid2partid(ids), theirs[3].nid2partid(ids))
        assert torch.equal(graph.ndata[dgl.NID], theirs[0].ndata[dgl.NID])
        lo, hi = book.node_ranges[p].tolist()
        elo, ehi = book.edge_ranges[p].tolist()
        assert torch.equal(nfeat["_N/feat"], g.ndata["feat"][orig_nids[lo:hi]])
        assert torch.equal(efeat["_N:_E:_N/w"], g.edata["w"][orig_eids[elo:ehi]])
