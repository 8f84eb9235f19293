"""DGL-style distributed graph access and sampling over one partition per rank."""
from .dataloader import DistNeighborSampler, DistNodeDataLoader
from .dist_graph import DistGraph
from .neighbor import in_subgraph, sample_neighbors
from .split import edge_split, node_split

__all__ = ["DistGraph", "DistNeighborSampler", "DistNodeDataLoader", "edge_split",
           "in_subgraph", "node_split", "sample_neighbors"]
