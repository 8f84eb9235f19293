"""DGL-style distributed graph access and sampling over one partition per rank."""
from .dataloader import DistDataLoader, DistNeighborSampler, DistNodeDataLoader
from .dist_graph import DistGraph
from .edge_dataloader import DistEdgeDataLoader
from .neighbor import in_subgraph, sample_etype_neighbors, sample_neighbors
from .split import edge_split, node_split
from .steps import is_empty_batch, mean_loss

__all__ = ["DistDataLoader", "DistEdgeDataLoader", "DistGraph", "DistNeighborSampler",
           "DistNodeDataLoader", "edge_split", "in_subgraph", "is_empty_batch", "mean_loss",
           "node_split", "sample_etype_neighbors", "sample_neighbors"]
