"""OGB and Reddit loaders on small seeded fixtures written in each project's own layout.

Each fixture is written by ``tests/ogb_layout.py`` into a temporary folder: the same
files OGB's readers and DGL's ``RedditDataset`` read. Loaded graphs must equal what was
written (counts, features, labels, splits, edges after the documented clean-up).
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ogb_layout as layout
from sarlite import cli
from sarlite.data import load_graph, read_ogbn_mag
from sarlite.data.edges import graph_from_keys
from sarlite.data.reading import npz_array
from sarlite.data.synthetic_hetero import REVERSE

N, F, C, E = 60, 6, 5, 400
MASKS = ("train_mask", "val_mask", "test_mask")


def _node_data(seed=1):
    return layout.random_node_data(N, F, C, seed=seed)


def _stored_edges(seed=2) -> np.ndarray:
    """Directed edges with duplicates, reverse pairs and self-loops, as raw files have."""
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, N, (E, 2))
    edges[:5, 1] = edges[:5, 0]                                   # self-loops
    return np.concatenate([edges, edges[:20], edges[20:30, ::-1]])  # duplicates, reverses


def _edge_set(src, dst) -> set:
    return set(zip(np.asarray(src).tolist(), np.asarray(dst).tolist()))


def _expected(edges: np.ndarray, symmetric: bool) -> set:
    pairs = _edge_set(edges[:, 0], edges[:, 1])
    if symmetric:
        pairs |= {(v, u) for u, v in pairs}
    return {(u, v) for u, v in pairs if u != v}


def _graph_edges(g) -> set:
    return _edge_set(*(t.numpy() for t in g.edges()))


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """One folder holding every layout (plus DGL-cache and nested Reddit copies)."""
    out = tmp_path_factory.mktemp("datasets")
    feat, label, splits = _node_data()
    edges = _stored_edges()
    layout.write_ogbn_csv(out / "ogbn_arxiv", edges, feat, label, splits, "time")
    layout.write_ogbn_csv(out / "ogbn_products", edges, feat, label, splits,
                          "sales_ranking")
    layout.write_ogbn_binary(out / "ogbn_papers100M", edges, feat, _papers_labels(label),
                             splits)
    layout.write_reddit(out / "reddit", feat, label, _node_types(), edges[:, 0], edges[:, 1])
    _write_mag(out / "ogbn_mag")
    return out


def _papers_labels(label: np.ndarray) -> np.ndarray:
    values = label.astype(np.float32)
    values[::4] = np.nan                      # unlabelled nodes, as in papers100M
    return values


def _node_types() -> np.ndarray:
    return np.random.default_rng(3).integers(1, 4, N)


_MAG_NODES = {"author": 30, "field_of_study": 7, "institution": 4, "paper": N}
_MAG_RELATIONS = [("author", "affiliated_with", "institution"),
                  ("author", "writes", "paper"), ("paper", "cites", "paper"),
                  ("paper", "has_topic", "field_of_study")]


def _mag_edges() -> dict:
    rng = np.random.default_rng(4)
    return {(s, r, d): np.stack([rng.integers(0, _MAG_NODES[s], 40),
                                 rng.integers(0, _MAG_NODES[d], 40)], 1)
            for s, r, d in _MAG_RELATIONS}


def _write_mag(folder: Path) -> None:
    feat, label, splits = _node_data()
    layout.write_ogbn_mag(folder, _MAG_NODES, _mag_edges(), feat,
                          np.arange(N) % 10 + 2010, label, splits)


def _copy(root: Path, name: str, tmp_path: Path) -> Path:
    shutil.copytree(root / name, tmp_path / name)
    return tmp_path


# ------------------------------------------------------------------ what is read

@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products", "reddit"])
def test_counts_features_and_labels_equal_what_was_written(root, name):
    feat, label, _ = _node_data()
    g = load_graph(name, root)
    assert g.num_nodes() == N and g.idtype == torch.int64
    assert g.ndata["feat"].dtype == torch.float32
    assert np.allclose(g.ndata["feat"].numpy(), feat, rtol=1e-5, atol=1e-6)
    assert torch.equal(g.ndata["label"], torch.from_numpy(label))


@pytest.mark.parametrize("name", ["ogbn-arxiv", "ogbn-products", "ogbn-papers100M"])
def test_ogb_masks_are_the_split_files(root, name):
    _, _, splits = _node_data()
    g = load_graph(name, root)
    labelled = ~np.isnan(_papers_labels(np.zeros(N))) if name == "ogbn-papers100M" \
        else np.ones(N, dtype=bool)
    for key, part in zip(MASKS, layout.SPLITS):
        expected = np.zeros(N, dtype=bool)
        expected[splits[part]] = True
        assert np.array_equal(g.ndata[key].numpy(), expected & labelled)


def test_arxiv_gets_reverse_edges_merged_without_self_loops(root):
    g = load_graph("ogbn-arxiv", root)
    assert _graph_edges(g) == _expected(_stored_edges(), symmetric=True)


def test_arxiv_reverse_edges_false_keeps_the_stored_directions(root):
    g = load_graph("ogbn-arxiv", root, reverse_edges=False)
    assert _graph_edges(g) == _expected(_stored_edges(), symmetric=False)


def test_edges_come_sorted_by_source_then_destination(root):
    src, dst = load_graph("ogbn-arxiv", root).edges()
    key = src * N + dst
    assert torch.equal(key, torch.sort(key).values)


def test_products_adds_the_inverse_of_each_stored_edge_as_ogb_does(root):
    g = load_graph("ogbn-products", root)
    assert _graph_edges(g) == _expected(_stored_edges(), symmetric=True)


def test_papers100m_gets_reverse_edges_like_arxiv(root):
    g = load_graph("ogbn-papers100M", root)
    assert _graph_edges(g) == _expected(_stored_edges(), symmetric=True)


def test_papers100m_unlabelled_nodes_get_label_zero_and_no_mask(root):
    g = load_graph("ogbn-papers100M", root)
    unlabelled = np.isnan(_papers_labels(np.zeros(N)))
    assert (g.ndata["label"].numpy()[unlabelled] == 0).all()
    for key in MASKS:
        assert not g.ndata[key].numpy()[unlabelled].any()
    _, label, _ = _node_data()
    assert np.array_equal(g.ndata["label"].numpy()[~unlabelled], label[~unlabelled])


def test_papers100m_uncompressed_npz_members_are_memory_mapped(root):
    array = npz_array(root / "ogbn_papers100M" / "raw" / "data.npz", "node_feat")
    assert isinstance(array, np.memmap)
    assert np.array_equal(array, _node_data()[0])


def test_papers100m_compressed_npz_reads_the_same(root, tmp_path):
    feat, label, splits = _node_data()
    layout.write_ogbn_binary(tmp_path / "ogbn_papers100M", _stored_edges(), feat,
                             _papers_labels(label), splits, compressed=True)
    a, b = load_graph("ogbn-papers100M", tmp_path), load_graph("ogbn-papers100M", root)
    assert _graph_edges(a) == _graph_edges(b)
    for key in ("feat", "label", *MASKS):
        assert torch.equal(a.ndata[key], b.ndata[key])


def test_papers100m_folder_keeps_ogb_case(root, tmp_path):
    shutil.copytree(root / "ogbn_papers100M", tmp_path / "ogbn_papers100m")
    with pytest.raises(FileNotFoundError, match="ogbn_papers100M"):
        load_graph("ogbn-papers100M", tmp_path)


def test_dataset_folder_itself_may_be_the_data_dir(root):
    g = load_graph("ogbn-arxiv", root / "ogbn_arxiv")
    assert g.num_nodes() == N


def test_reddit_masks_follow_node_types_in_file_order(root):
    g = load_graph("reddit", root)
    types = _node_types()
    for key, t in zip(MASKS, (1, 2, 3)):
        assert np.array_equal(g.ndata[key].numpy(), types == t)


def test_reddit_edges_are_the_symmetric_simple_graph_of_the_coo(root):
    g = load_graph("reddit", root)
    assert _graph_edges(g) == _expected(_stored_edges(), symmetric=True)


@pytest.mark.parametrize("where", ["folder", "parent/reddit", "parent/reddit_<hash>"])
def test_reddit_is_found_in_its_folder_a_reddit_subfolder_or_dgls_cache(root, tmp_path,
                                                                        where):
    target = {"folder": tmp_path, "parent/reddit": tmp_path / "reddit",
              "parent/reddit_<hash>": tmp_path / "reddit_0a1b2c3d"}[where]
    shutil.copytree(root / "reddit", target, dirs_exist_ok=True)
    assert load_graph("reddit", tmp_path).num_nodes() == N


def test_ogbn_mag_reads_as_a_heterograph_with_paper_features_labels_and_splits(root):
    g = read_ogbn_mag(root)
    feat, label, splits = _node_data()
    assert sorted(g.canonical_etypes) == sorted(_MAG_RELATIONS)
    assert {t: g.num_nodes(t) for t in g.ntypes} == _MAG_NODES
    for triplet, pairs in _mag_edges().items():
        src, dst = g.edges(etype=triplet)
        assert np.array_equal(np.stack([src.numpy(), dst.numpy()], 1), pairs)
    paper = g.nodes["paper"].data
    assert np.allclose(paper["feat"].numpy(), feat, rtol=1e-5, atol=1e-6)
    assert torch.equal(paper["label"], torch.from_numpy(label))
    assert torch.equal(paper["year"], torch.from_numpy(np.arange(N) % 10 + 2010))
    assert np.array_equal(np.flatnonzero(paper["train_mask"].numpy()), splits["train"])


def _stored_simple(pairs: np.ndarray) -> np.ndarray:
    """A relation's stored pairs without duplicates, sorted by (src, dst)."""
    return np.unique(pairs, axis=0)


def _pairs(g, etype) -> np.ndarray:
    src, dst = g.edges(etype=etype)
    return np.stack([src.numpy(), dst.numpy()], 1)


def test_ogbn_mag_loads_for_training_with_a_reverse_relation_for_each_stored_one(root):
    g = load_graph("ogbn-mag", root)
    reverse = {(d, REVERSE[r], s): (s, r, d) for s, r, d in _MAG_RELATIONS}
    assert ("paper", "cited_by", "paper") in reverse
    assert sorted(g.canonical_etypes) == sorted([*_MAG_RELATIONS, *reverse])
    assert {t: g.num_nodes(t) for t in g.ntypes} == _MAG_NODES and g.idtype == torch.int64
    stored = _mag_edges()
    assert any(len(_stored_simple(p)) < len(p) for p in stored.values())   # duplicates
    for triplet in _MAG_RELATIONS:
        assert np.array_equal(_pairs(g, triplet), _stored_simple(stored[triplet]))
    cites = _pairs(g, ("paper", "cites", "paper"))
    assert (cites[:, 0] == cites[:, 1]).any()       # self-citations stay, as in ToSimple
    for triplet, forward in reverse.items():      # the same edges, ends swapped, in order
        assert np.array_equal(_pairs(g, triplet), _pairs(g, forward)[:, ::-1])


def test_ogbn_mag_paper_data_is_what_the_trainer_uses_plus_year(root):
    g, raw = load_graph("ogbn-mag", root), read_ogbn_mag(root)
    paper = g.nodes["paper"].data
    assert set(paper) == {"feat", "year", "label", *MASKS}
    assert paper["feat"].dtype == torch.float32 and paper["label"].dtype == torch.int64
    assert all(paper[k].dtype == torch.bool for k in MASKS)
    for key in paper:
        assert torch.equal(paper[key], raw.nodes["paper"].data[key])
    assert all(not g.nodes[t].data for t in g.ntypes if t != "paper")


def test_ogbn_mag_reverse_edges_false_keeps_the_stored_relations_only(root):
    g = load_graph("ogbn-mag", root, reverse_edges=False)
    assert sorted(g.canonical_etypes) == sorted(_MAG_RELATIONS)
    for triplet, pairs in _mag_edges().items():
        assert np.array_equal(_pairs(g, triplet), _stored_simple(pairs))
    assert sorted(load_graph("ogbn-mag", root, reverse_edges=True).canonical_etypes) == \
        sorted(load_graph("ogbn-mag", root).canonical_etypes)


# ------------------------------------------------------------------ refusals and errors

def test_ogbn_mag_label_out_of_range_is_an_error_naming_the_file(root, tmp_path):
    _copy(root, "ogbn_mag", tmp_path)
    _, label, _ = _node_data()
    layout.write_csv(tmp_path / "ogbn_mag" / "raw" / "node-label" / "paper" /
                     "node-label.csv.gz", np.where(np.arange(N) == 3, 349, label))
    with pytest.raises(ValueError, match=r"node-label\.csv\.gz: labels must lie in "
                                         r"\[0, 349\)"):
        load_graph("ogbn-mag", tmp_path)


@pytest.mark.parametrize("name", ["ogbn-products", "reddit", "cora", "synthetic"])
def test_reverse_edges_is_refused_where_it_does_not_apply(root, name):
    with pytest.raises(ValueError, match="reverse_edges applies to"):
        load_graph(name, root, reverse_edges=False)


def test_missing_release_file_names_it_and_the_layout(root, tmp_path):
    _copy(root, "ogbn_arxiv", tmp_path)
    (tmp_path / "ogbn_arxiv" / "RELEASE_v1.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"RELEASE_v1\.txt.*expected layout"):
        load_graph("ogbn-arxiv", tmp_path)


def test_missing_split_folder_names_it_and_the_layout(root, tmp_path):
    _copy(root, "ogbn_products", tmp_path)
    shutil.rmtree(tmp_path / "ogbn_products" / "split" / "sales_ranking")
    with pytest.raises(FileNotFoundError, match=r"split folder.*sales_ranking.*expected"):
        load_graph("ogbn-products", tmp_path)


def test_missing_dataset_folder_names_the_layout(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"ogbn_arxiv.*raw/\{edge"):
        load_graph("ogbn-arxiv", tmp_path)


def test_truncated_csv_gz_is_one_error_naming_the_file(root, tmp_path):
    _copy(root, "ogbn_arxiv", tmp_path)
    path = tmp_path / "ogbn_arxiv" / "raw" / "node-feat.csv.gz"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(ValueError, match=r"malformed dataset file .*node-feat\.csv\.gz"):
        load_graph("ogbn-arxiv", tmp_path)


def test_npz_missing_key_is_one_error_naming_the_file_and_key(root, tmp_path):
    _copy(root, "ogbn_papers100M", tmp_path)
    path = tmp_path / "ogbn_papers100M" / "raw" / "data.npz"
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if k != "node_feat"}
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=r"data\.npz: missing array 'node_feat'"):
        load_graph("ogbn-papers100M", tmp_path)


def test_edge_count_that_disagrees_with_num_edge_list_is_an_error(root, tmp_path):
    _copy(root, "ogbn_arxiv", tmp_path)
    layout.write_csv(tmp_path / "ogbn_arxiv" / "raw" / "num-edge-list.csv.gz",
                     np.array([E + 1000]))
    with pytest.raises(ValueError, match=r"edge\.csv\.gz.*rows, but num-edge-list"):
        load_graph("ogbn-arxiv", tmp_path)


def test_node_id_out_of_range_is_an_error_naming_the_file(root, tmp_path):
    _copy(root, "ogbn_arxiv", tmp_path)
    layout.write_csv(tmp_path / "ogbn_arxiv" / "raw" / "edge.csv.gz",
                     np.concatenate([_stored_edges()[:-1], [[0, N]]]))
    with pytest.raises(ValueError, match=r"edge\.csv\.gz: node ids must lie in \[0, 60\)"):
        load_graph("ogbn-arxiv", tmp_path)


def test_file_that_is_not_gzip_is_one_error_naming_it(root, tmp_path):
    _copy(root, "ogbn_arxiv", tmp_path)
    (tmp_path / "ogbn_arxiv" / "split" / "time" / "valid.csv.gz").write_text("1\n2\n")
    with pytest.raises(ValueError, match=r"valid\.csv\.gz"):
        load_graph("ogbn-arxiv", tmp_path)


def test_missing_reddit_files_name_the_places_searched(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"reddit_data\.npz.*reddit_<8 hex digits>"):
        load_graph("reddit", tmp_path)


def test_two_reddit_copies_are_an_error_asking_to_name_one(root, tmp_path):
    for name in ("reddit", "reddit_0a1b2c3d"):
        shutil.copytree(root / "reddit", tmp_path / name)
    with pytest.raises(ValueError, match="several folders"):
        load_graph("reddit", tmp_path)


def test_loading_never_prompts_or_touches_the_network(root, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the loader tried to prompt or connect")
    monkeypatch.setattr("builtins.input", refuse)
    monkeypatch.setattr("socket.socket.connect", refuse)
    for name in ("ogbn-arxiv", "ogbn-products", "ogbn-papers100M", "ogbn-mag", "reddit"):
        load_graph(name, root)
    read_ogbn_mag(root)


# ------------------------------------------------------------------ edge clean-up

@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 22])
def test_edge_clean_up_is_the_same_for_any_chunk_size(chunk):
    rng = np.random.default_rng(5)
    keys = rng.integers(0, 20, 300) * 20 + rng.integers(0, 20, 300)
    expected = np.unique(keys)
    expected = expected[expected % 21 != 0]
    g = graph_from_keys(keys.copy(), 20, chunk=chunk)
    src, dst = g.edges()
    assert np.array_equal(src.numpy() * 20 + dst.numpy(), expected)


# ------------------------------------------------------------------ the command line

def test_sarlite_partition_on_an_ogbn_arxiv_folder_writes_a_valid_dgl_partition(root,
                                                                                 tmp_path):
    import dgl
    out = tmp_path / "parts"
    assert cli.main(["partition", "--dataset", "ogbn-arxiv", "--data-dir", str(root),
                     "--num-parts", "2", "--out", str(out)]) == 0
    graph, nfeat, _, book, name, ntypes, etypes = dgl.distributed.load_partition(
        str(out / "ogbn-arxiv.json"), 0)
    assert name == "ogbn-arxiv" and book.num_partitions() == 2
    assert set(nfeat) == {f"_N/{k}" for k in ("feat", "label", *MASKS)}
    total = sum(dgl.distributed.load_partition(str(out / "ogbn-arxiv.json"), p)[0]
                .ndata["inner_node"].sum().item() for p in range(2))
    assert total == N


# ------------------------------------------------------------------ against OGB's readers

@pytest.fixture()
def ogb_raw(monkeypatch):
    """OGB's raw readers, where ``ogb`` is importable; these tests skip otherwise.

    ``ogb`` is not a dependency, not even for tests: once installed, ``import dgl`` imports
    it (``dgl.data.lrgb``) and it starts a network version check in every process. Run
    these tests with it on the side:
    ``pip install --no-deps --target /tmp/ogbside ogb==1.3.6 six`` and
    ``PYTHONPATH=/tmp/ogbside pytest tests/test_ogb_reddit_loaders.py -k ogb``.
    """
    monkeypatch.setitem(sys.modules, "outdated", None)    # no version-check thread
    return pytest.importorskip("ogb.io.read_graph_raw", reason="ogb is not installed (a "
                               "side check; see the ogb_raw fixture)")


def test_csv_fixture_reads_the_same_with_ogbs_own_reader(root, ogb_raw):
    ref = ogb_raw.read_csv_graph_raw(str(root / "ogbn_products" / "raw"),
                                     add_inverse_edge=True)[0]
    g = load_graph("ogbn-products", root)
    assert ref["num_nodes"] == g.num_nodes()
    assert np.array_equal(ref["node_feat"], g.ndata["feat"].numpy())
    assert _expected(ref["edge_index"].T, symmetric=False) == _graph_edges(g)


def test_binary_fixture_reads_the_same_with_ogbs_own_reader(root, ogb_raw):
    ref = ogb_raw.read_binary_graph_raw(str(root / "ogbn_papers100M" / "raw"))[0]
    g = load_graph("ogbn-papers100M", root, reverse_edges=False)
    assert ref["num_nodes"] == g.num_nodes()
    assert np.array_equal(ref["node_feat"], g.ndata["feat"].numpy())
    assert _expected(ref["edge_index"].T, symmetric=False) == _graph_edges(g)


def test_heterograph_fixture_reads_the_same_with_ogbs_own_reader(root, ogb_raw):
    raw = str(root / "ogbn_mag" / "raw")
    ref = ogb_raw.read_csv_heterograph_raw(raw, additional_node_files=["node_year"],
                                           additional_edge_files=["edge_reltype"])[0]
    labels = ogb_raw.read_node_label_hetero(raw)
    g = read_ogbn_mag(root)
    assert ref["num_nodes_dict"] == {t: g.num_nodes(t) for t in g.ntypes}
    for triplet, index in ref["edge_index_dict"].items():
        assert np.array_equal(index, torch.stack(g.edges(etype=triplet)).numpy())
    assert np.array_equal(ref["node_feat_dict"]["paper"], g.nodes["paper"].data["feat"])
    assert np.array_equal(labels["paper"][:, 0], g.nodes["paper"].data["label"].numpy())

