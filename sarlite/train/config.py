"""The training configuration: a YAML file, validated, with command-line overrides.

Every field has a default and a description; ``sarlite train --help`` prints them all.
Unknown keys are errors that name the key; wrong types are errors that name the field.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..core.budget import parse_bytes
from ..core.options import ENGINE_FIELDS, EngineOptions
from ..data import DATA_DIR_LAYOUT, DATASETS, SYNTHETIC_DATASETS, layout


class ConfigError(ValueError):
    """A configuration file or override that cannot be used; the message says why."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class DatasetConfig(_Section):
    name: str = Field("synthetic", description="dataset: " + ", ".join(DATASETS))
    data_dir: Optional[str] = Field(None, description="directory of the real datasets "
                                    "(required for them; only those used need be there): "
                                    + DATA_DIR_LAYOUT)
    split: int = Field(0, ge=0, le=9, description="fixed split of a heterophilous dataset")
    reverse_edges: Optional[bool] = Field(
        None, description="ogbn-arxiv / ogbn-papers100M: add reverse edges; ogbn-mag: add "
        "a reverse relation for each stored one (null or true, the literature's setting), "
        "or keep the stored directions (false)")
    num_nodes: int = Field(10_000, ge=2, description="synthetic: number of nodes")
    avg_degree: float = Field(10.0, gt=0, description="synthetic: average in-degree")
    num_classes: int = Field(8, ge=2, description="synthetic: number of classes; a real "
                             "dataset: when set, the classes its labels must be in (unset: "
                             "the largest label + 1)")
    feat_dim: int = Field(64, ge=1, description="synthetic: feature width")
    seed: int = Field(0, description="seed of the synthetic graph / random split")
    row_normalize: bool = Field(False, description="scale each node's features to sum to "
                                "1 (the usual preprocessing of Planetoid bag-of-words)")
    self_loops: bool = Field(False, description="add one self-loop per node (GCN's A + I "
                             "renormalisation)")

    @model_validator(mode="after")
    def _known(self):
        key = self.name.lower()
        if key not in DATASETS:
            raise ValueError(f"unknown dataset {self.name!r}; choose one of "
                             f"{', '.join(DATASETS)}")
        if key not in SYNTHETIC_DATASETS and not self.data_dir:
            raise ValueError(f"dataset {self.name!r} is read from disk: set dataset.data_dir "
                             f"to the directory holding {layout(key)}")
        return self


class PartitionConfig(_Section):
    method: Literal["metis", "random"] = Field("metis", description="node assignment")
    objective: Literal["cut", "vol"] = Field("cut", description="METIS objective")
    balance_train: bool = Field(False, description="also balance training nodes")
    balance_edges: bool = Field(False, description="also balance owned edges")
    metis_max_edges: Union[Literal["auto"], Annotated[int, Field(ge=1)], None] = Field(
        "auto", description="the most undirected edges METIS reads; a bigger graph gives it "
        "a seeded uniform sample ('auto': max(2^24, 8 x nodes); null: every edge)")
    cache_dir: str = Field("out/partitions", description="where partitions are kept and "
                           "reused while dataset and partition settings stay the same")
    verify: Literal["auto", "full"] = Field(
        "auto", description="checks of the partition files before training: sizes, and "
        "checksums of files changed since their last check (auto), or every checksum (full)")


class ModelConfig(_Section):
    type: Literal["gcn", "sage", "gat", "gin", "sgc", "appnp", "mlp", "rgcn"] = Field(
        "gcn", description="architecture built from dgl.nn layers (mlp: no graph; rgcn: "
        "heterogeneous datasets, a weight per relation)")
    layers: int = Field(2, ge=1, description="number of layers (sgc/appnp: propagation hops)")
    hidden: int = Field(16, ge=1, description="hidden width (per head for gat)")
    heads: int = Field(8, ge=1, description="gat: attention heads in hidden layers")
    dropout: float = Field(0.5, ge=0, lt=1, description="dropout on layer inputs")
    batch_norm: bool = Field(False, description="DistributedBatchNorm1d after hidden layers")
    residual: bool = Field(False, description="residual connections where widths match")
    label_only: bool = Field(False, description="compute only what labelled nodes need "
                             "(construct_mfgs); sar/sa modes")


class EngineConfig(_Section):
    """The ``engine`` section: :class:`~sarlite.core.options.EngineOptions` in YAML (same
    names, checked by it; :meth:`options` is what reaches the graphs), plus the training
    application's ``memory_budget``."""

    mode: Literal["sar", "sa", "one-shot"] = Field("sar", description="SAR engine mode")
    pipeline_depth: int = Field(1, description="shards fetched ahead")
    max_collective_rows: Optional[int] = Field(
        None, description="rows per peer in one collective call; larger exchanges are "
        "split (null: no bound)")
    max_rows_per_step: Union[Annotated[int, Field(ge=1)], Literal["auto", "whole"],
                             None] = Field(
        "auto", description="rows of a remote shard fetched, used and freed at once "
        "(forward, rematerialized backward, gradients); bounds transient memory by the "
        "chunk, not the cut; exact (auto: whole shards on a good cut, steps of a third "
        "of the fewest rows a worker holds on a bad one, a twelfth for calls other than "
        "copy_u + sum/mean; whole or null: a whole shard per ring round)")
    halo_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="type halo rows and their gradients travel in; bfloat16 / "
        "float16 halve the bytes but are no longer exact (float32: exact)")
    kernels: Literal["auto", "dgl", "torch"] = Field(
        "auto", description="message-passing kernels of each shard: dgl (DGL's), torch "
        "(sarlite's, torch operations on any device; pip's DGL has no CUDA kernels); both "
        "exact (auto: dgl on CPU, torch elsewhere)")
    memory_budget: Union[Annotated[int, Field(ge=1)], str, None] = Field(
        None, description="the most resident memory each worker may hold while training "
        "(bytes, or a size such as '3GiB'): each layer then runs one-shot where the "
        "estimate fits and sar with fewer rows per step where not, measured by one "
        "calibration pass; exact; full-batch training (null: engine.mode)")

    def options(self) -> EngineOptions:
        """The engine settings of this section, as the graphs take them."""
        return EngineOptions(**{name: getattr(self, name) for name in ENGINE_FIELDS})

    @model_validator(mode="after")
    def _checked(self):
        self.options()                      # EngineOptions' checks, the only ones
        if self.memory_budget is None:
            return self
        parse_bytes(self.memory_budget)
        chosen = [f"engine.mode={self.mode}"] if self.mode != "sar" else []
        if self.max_rows_per_step != "auto":
            chosen.append(f"engine.max_rows_per_step={self.max_rows_per_step}")
        if chosen:
            raise ValueError(f"engine.memory_budget chooses each layer's mode and rows per "
                             f"step: leave {' and '.join(chosen)} unset (mode sar)")
        return self


class OptimConfig(_Section):
    name: Literal["adam", "adamw", "sgd"] = Field("adam", description="optimizer")
    lr: float = Field(0.01, gt=0, description="learning rate")
    weight_decay: float = Field(5e-4, ge=0, description="weight decay")


class SamplingConfig(_Section):
    fanouts: list[int] = Field(description="neighbours sampled per node for each layer, "
                               "input layer first (-1: all); one entry per model layer")
    batch_size: int = Field(ge=1, description="seed (training) nodes per rank and step")

    @model_validator(mode="after")
    def _fanouts(self):
        if not self.fanouts or any(f < -1 or f == 0 for f in self.fanouts):
            raise ValueError(f"fanouts must be a non-empty list of positive integers (or "
                             f"-1 for all neighbours), got {self.fanouts}")
        return self


class TrainConfig(_Section):
    epochs: int = Field(200, ge=1, description="training epochs")
    eval_every: int = Field(1, ge=1, description="evaluate every k epochs")
    seed: int = Field(0, description="seed of parameters and dropout")
    out_dir: str = Field("out/run", description="metrics.jsonl, summary.json, curves.png, "
                         "checkpoints")
    checkpoint_every: int = Field(0, ge=0, description="save a checkpoint every k epochs "
                                  "(0: never)")
    resume: bool = Field(False, description="continue from the latest checkpoint in out_dir")
    overwrite: bool = Field(False, description="start over in an out_dir holding an earlier "
                            "run: its checkpoint, metrics.jsonl, summary.json and curves.png "
                            "are moved into out_dir/.previous-<time>-<pid>/, removed once this "
                            "run writes its first checkpoint (or ends), and moved back if it "
                            "stops before (without it a fresh run refuses an out_dir holding "
                            "a checkpoint)")
    allow_nonfinite: bool = Field(False, description="train on through inf/nan in the input "
                                  "features, the loss or a gradient (false: stop with an "
                                  "error naming the first)")
    ignore_label: Optional[int] = Field(
        None, description="a label value that marks unlabelled nodes (e.g. -1): rows holding "
        "it leave the loss, its divisor and the accuracies, also inside split masks (null: "
        "every row of a split mask must hold a class; rows in no mask may hold anything)")
    sampling: Optional[SamplingConfig] = Field(
        None, description="mini-batch training on sampled neighbourhoods, {fanouts, "
        "batch_size}; evaluation stays one exact full-graph pass (null: full-batch)")

    @model_validator(mode="after")
    def _resume_or_overwrite(self):
        if self.resume and self.overwrite:
            raise ValueError("train.resume continues the run in out_dir and train.overwrite "
                             "discards it: set one of them")
        return self


class Config(_Section):
    dataset: DatasetConfig = DatasetConfig()
    partition: PartitionConfig = PartitionConfig()
    model: ModelConfig = ModelConfig()
    engine: EngineConfig = EngineConfig()
    optim: OptimConfig = OptimConfig()
    train: TrainConfig = TrainConfig()

    @model_validator(mode="after")
    def _sampled_model(self):
        sampling, model = self.train.sampling, self.model
        if sampling is None:
            return self
        if model.type in ("mlp", "sgc", "appnp"):
            raise ValueError(f"train.sampling needs a layer-per-block model (gcn, sage, "
                             f"gat, gin), not model.type={model.type!r}")
        if self.engine.memory_budget is not None:
            raise ValueError("engine.memory_budget plans full-graph training; sampled "
                             "training (train.sampling) moves sampled blocks, not halos: "
                             "leave one of them unset")
        if len(sampling.fanouts) != model.layers:
            raise ValueError(f"train.sampling.fanouts has {len(sampling.fanouts)} entries "
                             f"but the model has {model.layers} layers: give one per layer")
        return self

    def digest(self, *sections: str) -> str:
        """Stable hash of the named sections (all when none are named)."""
        data = self.model_dump()
        chosen = {k: data[k] for k in (sections or data)}
        return hashlib.sha256(json.dumps(chosen, sort_keys=True).encode()).hexdigest()[:16]


def _set(tree: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: {key!r} is not a section")
    node[keys[-1]] = value


def _describe(err: ValidationError) -> str:
    lines = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"]) or "config"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown key {where!r}")
        else:
            lines.append(f"{where}: {item['msg']}")
    return "; ".join(lines)


PACKAGED = Path(__file__).resolve().parents[1] / "configs"


def packaged_configs() -> dict[str, str]:
    """The configs shipped inside sarlite: name -> the first sentence of its header comment."""
    names = {}
    for file in sorted(PACKAGED.glob("*.yaml")):
        header = []
        for line in file.read_text().splitlines():
            if not line.startswith("#"):
                break
            header.append(line.lstrip("# ").strip())
        text = " ".join(header)
        cut = text.find(". ")
        names[file.stem] = text[:cut + 1] if cut >= 0 else text
    return names


def config_file(name_or_path: str) -> Path:
    """The YAML file ``--config`` names: a path (it ends in ``.yaml``/``.yml`` or holds a
    path separator) or the name of a packaged config (``demo``; ``--list-configs``).

    Raises
    ------
    ConfigError
        No such file, or no packaged config of that name.
    """
    text = str(name_or_path)
    if text.endswith((".yaml", ".yml")) or "/" in text or "\\" in text:
        file = Path(text).expanduser()
        if not file.is_file():
            packaged = (f"; a packaged config has that name: --config {file.stem}"
                        if (PACKAGED / f"{file.stem}.yaml").is_file() else "")
            raise ConfigError(f"config file {file} does not exist{packaged}")
        return file
    file = PACKAGED / f"{text}.yaml"
    if not file.is_file():
        raise ConfigError(f"no packaged config named {text!r}; packaged: "
                          f"{', '.join(packaged_configs())} (a file is given by its path, "
                          f"e.g. ./{text}.yaml)")
    return file


def load_config(path: str | None, overrides: list[str] = ()) -> Config:
    """Read the config ``path`` names (a YAML file or a packaged name, see
    :func:`config_file`; ``None`` for the defaults) and apply ``key.sub=value`` overrides.

    Override values are parsed as YAML (``model.hidden=64``, ``engine.mode=sa``).

    Raises
    ------
    ConfigError
        Missing or unreadable file, unknown name, bad YAML, unknown key, wrong type or value.
    """
    tree: dict = {}
    if path is not None:
        file = config_file(path)
        try:
            tree = yaml.safe_load(file.read_text()) or {}
        except yaml.YAMLError as err:
            raise ConfigError(f"config file {file} is not valid YAML: {err}") from err
        if not isinstance(tree, dict):
            raise ConfigError(f"config file {file} must hold a mapping of sections")
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r} must look like section.key=value")
        key, raw = item.split("=", 1)
        _set(tree, key.strip(), yaml.safe_load(raw))
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None


def fields_help() -> str:
    """Every config field with its default and description, for ``--help``."""
    lines = ["config fields (YAML sections; override with --set section.key=value):"]
    for section, info in Config.model_fields.items():
        lines.append(f"  {section}:")
        for name, field in info.annotation.model_fields.items():
            lines.append(f"    {name:<16} {field.description} (default: {field.default!r})")
    return "\n".join(lines)
