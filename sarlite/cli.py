"""The ``sarlite`` command line: ``sarlite partition``, ``sarlite train`` and ``sarlite run``.

Each subcommand lives in a ``_<name>`` function that receives parsed arguments; errors the
user can fix (bad paths, unknown datasets, bad sizes) are printed as one line and exit 2.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from . import data
from .partition import partition_graph, partition_report


def _add_dataset_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "dataset", "a real dataset read from --data-dir, or a synthetic one built from the "
        "size options")
    group.add_argument("--dataset", default="synthetic",
                       help=f"dataset name, one of: {', '.join(data.DATASETS)} "
                            "(default: synthetic, the embedded homophilous generator)")
    group.add_argument("--data-dir", default=None,
                       help="directory of the real datasets (only those used need be there): "
                            f"{data.DATA_DIR_LAYOUT}")
    group.add_argument("--split", type=int, default=0,
                       help="which fixed split of a heterophilous dataset (0-9)")
    group.add_argument("--reverse-edges", action=argparse.BooleanOptionalAction,
                       default=None,
                       help="ogbn-arxiv / ogbn-papers100M (stored directed): add the reverse "
                            "of every edge (default, the literature's setting) or keep the "
                            "stored directions (--no-reverse-edges); ogbn-mag: add a reverse "
                            "relation for each stored one (default: rev_writes, cited_by, "
                            "...) or keep the 4 stored relations")
    group.add_argument("--num-nodes", type=int, default=10_000,
                       help="synthetic: number of nodes (default 10000)")
    group.add_argument("--avg-degree", type=float, default=10.0,
                       help="synthetic: average in-degree (default 10)")
    group.add_argument("--num-classes", type=int, default=8,
                       help="synthetic: number of classes (default 8)")
    group.add_argument("--feat-dim", type=int, default=64,
                       help="synthetic: feature width (default 64)")
    group.add_argument("--seed", type=int, default=0,
                       help="seed of the synthetic graph, the random split and the "
                            "partitioner (default 0)")


def _edge_budget(text: str):
    """``--metis-max-edges``: ``auto``, ``all`` (None) or a positive integer."""
    if text in ("auto", "all"):
        return None if text == "all" else text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto', 'all' or a positive integer, "
                                         f"got {text!r}")
    return value


def load_dataset_from_args(args: argparse.Namespace):
    """The graph named by the dataset options of ``args``."""
    return data.load_graph(args.dataset, args.data_dir, split=args.split, seed=args.seed,
                           reverse_edges=args.reverse_edges, num_nodes=args.num_nodes,
                           avg_degree=args.avg_degree, num_classes=args.num_classes,
                           feat_dim=args.feat_dim)


def _partition(args: argparse.Namespace) -> None:
    start = time.time()
    print(f"loading {args.dataset} ...", flush=True)
    g = load_dataset_from_args(args)
    print(f"  {g.num_nodes()} nodes, {g.num_edges()} edges "
          f"({time.time() - start:.1f}s)", flush=True)
    balance = data.train_classes(g, f"--balance-train: dataset {args.dataset}") \
        if args.balance_train else None
    print(f"partitioning into {args.num_parts} parts with {args.method} ...", flush=True)
    partition_graph(g, args.graph_name or args.dataset.lower(), args.num_parts, args.out,
                    part_method=args.method, balance_ntypes=balance,
                    balance_edges=args.balance_edges, objtype=args.objective,
                    num_hops=args.num_hops, seed=args.seed,
                    metis_max_edges=args.metis_max_edges)
    config = f"{args.out}/{args.graph_name or args.dataset.lower()}.json"
    print(partition_report(config, feat_width=args.report_width))
    print(f"wrote {config} ({time.time() - start:.1f}s)")


def _hosts(args: argparse.Namespace, nproc: int):
    """``(LaunchSpec, network interface or None, "where" text for the launch line)`` from
    the several-machines options (``_add_hosts``)."""
    from .launch import LaunchSpec
    port = args.master_port if args.master_port is not None else \
        (29500 if args.nnodes > 1 else 0)
    spec = LaunchSpec(nproc=nproc, nnodes=args.nnodes, node_rank=args.node_rank,
                      master_addr=args.master_addr, master_port=port)
    if spec.nnodes == 1:
        return spec, None, ""
    from .runtime.launchenv import route_interface
    interface = route_interface(spec.master_addr)
    where = (f" on host {spec.node_rank} of {spec.nnodes} (ranks "
             f"{spec.node_rank * spec.nproc}-{(spec.node_rank + 1) * spec.nproc - 1} of "
             f"{spec.world_size}; master {spec.master_addr}:{spec.master_port}"
             f"{f', interface {interface}' if interface else ''})")
    return spec, interface, where


def _train(args: argparse.Namespace) -> int:
    from .launch import launch
    from .train.config import load_config
    from .train.partitions import check_world_size
    spec, interface, where = _hosts(args, args.nproc)
    cfg = load_config(args.config, args.set)        # fail fast, before starting workers
    check_world_size(cfg, spec.world_size)
    # what the workers will read from the environment they inherit (malformed: fail here)
    settings = _worker_settings(sampled=cfg.train.sampling is not None)
    worker_args = (["--config", args.config] if args.config else []) + \
        (["--set", *args.set] if args.set else [])
    print(f"launching {spec.nproc} workers{where}: python -m sarlite.train "
          f"{' '.join(worker_args)} ({settings.describe()})", flush=True)
    return launch(spec, worker_args, interface)


#: DGL tools/launch.py options that mean nothing without servers, samplers or ssh
_DGL_IGNORED = ("num_samplers", "num_servers", "num_server_threads", "part_config",
                "ip_config", "graph_format", "ssh_port", "ssh_username")


def _script_command(words: list[str]) -> list[str]:
    """The script and its arguments from ``sarlite run``'s positional words: ``script.py
    ARGS``, ``-m module ARGS``, or DGL launch.py's one quoted ``"python3 script.py ARGS"``
    (also unquoted), whose interpreter and its flags are dropped (the workers run this
    Python)."""
    import shlex
    if len(words) == 1 and " " in words[0].strip():
        words = shlex.split(words[0])
    if words and os.path.basename(words[0]).startswith("python"):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] != "-m":
            words = words[1:]                 # -u, -O, -B ...
    return words


def _run(args: argparse.Namespace) -> int:
    from .dropin import check_target
    from .launch import launch
    if args.num_trainers is not None and args.nproc is not None \
            and args.num_trainers != args.nproc:
        raise ValueError(f"--nproc {args.nproc} and DGL's --num_trainers "
                         f"{args.num_trainers} disagree; give one")
    spec, interface, where = _hosts(args, args.nproc or args.num_trainers or 2)
    extra_envs, script = list(args.extra_envs), list(args.script)
    while extra_envs and "=" not in extra_envs[-1]:     # --extra_envs A=1 "python3 x.py"
        script.insert(0, extra_envs.pop())
    command = _script_command(script)
    if args.workspace:
        if not os.path.isdir(args.workspace):
            raise ValueError(f"--workspace {args.workspace!r} is not a directory")
        os.chdir(args.workspace)      # as DGL's launcher: the workers start there
    problem = check_target(command)
    if problem:
        raise ValueError(problem)
    env = dict(os.environ)
    for pair in extra_envs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise ValueError(f"--extra_envs takes NAME=VALUE pairs, got {pair!r}")
        env[name] = value
    if args.num_omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(args.num_omp_threads)
    _worker_settings(sampled=True)           # a malformed SARLITE_* variable fails here
    ignored = [f"--{name}" for name in _DGL_IGNORED if getattr(args, name) is not None]
    note = f" (ignored, no servers or samplers: {', '.join(ignored)})" if ignored else ""
    print(f"launching {spec.nproc} workers{where}: python -m sarlite.run "
          f"{' '.join(command)}{note}", flush=True)
    return launch(spec, command, interface, module="sarlite.run", env=env)


def _worker_settings(sampled: bool):
    """The settings ``sarlite.init`` will take from this environment in ``sarlite
    train``'s workers (:mod:`sarlite.runtime.settings`); the allocator's default is the
    one for mini-batches when ``sampled``.

    Raises ValueError when a ``SARLITE_*`` variable is malformed."""
    from .runtime import allocator, read_settings
    return read_settings(os.environ, mmap_default=allocator.RETAIN if sampled
                         else allocator.DEFAULT_THRESHOLD)


class _ListConfigs(argparse.Action):
    """``--list-configs``: the packaged configs, one line each, then exit (as --help)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from .train.config import PACKAGED, packaged_configs
        names = packaged_configs()
        width = max(map(len, names))
        print(f"packaged configs ({PACKAGED}); use one with --config NAME:")
        for name, about in names.items():
            print(f"  {name:<{width}}  {about}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sarlite",
        description="Exact full-graph GNN training across torchrun workers. "
                    "Run 'sarlite <command> --help' for each command's options.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    part = commands.add_parser(
        "partition", help="partition a dataset into DGL-format partitions and report",
        description="Partition a dataset (METIS or random) into --num-parts parts in DGL "
                    "2.x's on-disk format and print the partition report: owned nodes, "
                    "owned edges and halo nodes per part, the edge cut, the balance of each "
                    "quantity and the exact-training traffic bound per layer.")
    _add_dataset_args(part)
    part.add_argument("--num-parts", type=int, required=True,
                      help="number of partitions (= torchrun workers that will load them)")
    part.add_argument("--out", required=True, help="output directory")
    part.add_argument("--graph-name", default=None,
                      help="name of the partition JSON (default: the dataset name)")
    part.add_argument("--method", choices=("metis", "random"), default="metis",
                      help="node assignment (default metis)")
    part.add_argument("--objective", choices=("cut", "vol"), default="cut",
                      help="METIS objective: edge cut or communication volume (default cut)")
    part.add_argument("--balance-train", action="store_true",
                      help="also balance training nodes across parts")
    part.add_argument("--balance-edges", action="store_true",
                      help="also balance owned edges across parts")
    part.add_argument("--metis-max-edges", type=_edge_budget, default="auto",
                      help="the most undirected edges METIS reads; a bigger graph gives it a "
                           "seeded uniform sample (less memory, a slightly larger cut). "
                           "'auto' (default): max(2^24, 8 x nodes); 'all': every edge")
    part.add_argument("--num-hops", type=int, default=1,
                      help="hops of halo nodes stored with each part (default 1)")
    part.add_argument("--report-width", type=int, default=None,
                      help="feature width for the traffic bound (default: the width of "
                           "the 'feat' node field)")
    part.set_defaults(run=_partition)

    from .train.config import fields_help
    train = commands.add_parser(
        "train", help="train a GNN on N local torchrun workers from a YAML config",
        description="Train a GNN on the whole graph with --nproc workers on this machine "
                    "(one partition each), or on --nnodes machines: run the same command "
                    "on each with its --node-rank and the address of node 0 as "
                    "--master-addr. The workers are torchrun-style (the same as torchrun "
                    "--nproc_per_node=N -m sarlite.train --config X [--set ...]); they "
                    "stop together, on a failure or a signal, and no partitions need a "
                    "shared filesystem.",
        epilog=fields_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--config", default=None,
                       help="a packaged config by name (demo, cora_gcn, ...: see "
                            "--list-configs) or the path of a YAML file; defaults for "
                            "every field not given")
    train.add_argument("--list-configs", action=_ListConfigs,
                       help="print the packaged configs' names and what each trains, "
                            "then exit")
    train.add_argument("--nproc", type=int, default=2,
                       help="workers on this machine (default 2); partitions = workers on "
                            "all machines")
    _add_hosts(train)
    train.add_argument("--set", nargs="+", action="extend", default=[], metavar="SECTION.KEY=VALUE",
                       help="override config fields, e.g. --set model.hidden=128")
    train.set_defaults(run=_train)
    _add_run_parser(commands)
    return parser


def _add_hosts(parser: argparse.ArgumentParser) -> None:
    hosts = parser.add_argument_group(
        "several machines", "run the same command on every machine; only --node-rank "
        "differs. The network interface that routes to --master-addr is used unless "
        "GLOO_SOCKET_IFNAME is set")
    hosts.add_argument("--nnodes", type=int, default=1, help="number of machines (default 1)")
    hosts.add_argument("--node-rank", type=int, default=0,
                       help="this machine's index in [0, nnodes) (default 0); node 0 hosts "
                            "rank 0 and the rendezvous (and sarlite train's outputs)")
    hosts.add_argument("--master-addr", default="127.0.0.1",
                       help="address of node 0, reachable from every machine (default "
                            "127.0.0.1)")
    hosts.add_argument("--master-port", type=int, default=None,
                       help="free TCP port on node 0 (default: any free port with one "
                            "machine, 29500 with several)")


def _add_run_parser(commands) -> None:
    run = commands.add_parser(
        "run", help="run an unmodified DGL distributed training script on N workers",
        usage="sarlite run [--nproc N] [options] SCRIPT [ARGS...]",
        description="Run a DGL distributed training script (written for DGL's "
                    "tools/launch.py) with no edit: in each worker, every import of "
                    "dgl.distributed (and dgl.dataloading's distributed loaders), in the "
                    "script and the modules it imports, is sarlite's; the rest of dgl is "
                    "DGL's own. The same as 'torchrun --nproc_per_node N -m sarlite.run "
                    "SCRIPT ARGS'. Partition into as many parts as there are workers "
                    "(sarlite partition, sarlite.partition_graph or DGL's partition_graph). "
                    "Options go before SCRIPT; everything after it is the script's.",
        epilog="DGL's launcher form also works: sarlite run --num_trainers 2 --ip_config "
               "ip_config.txt --part_config data/g.json \"python3 train_dist.py "
               "--graph_name g ...\"")
    run.add_argument("--nproc", type=int, default=None,
                     help="workers on this machine (default 2, or DGL's --num_trainers); "
                          "one partition per worker on all machines")
    _add_hosts(run)
    dgl = run.add_argument_group(
        "DGL launch.py options", "accepted so that DGL's launch lines work: --num_trainers "
        "is --nproc, --workspace is the workers' working directory, --num_omp_threads "
        "sets OMP_NUM_THREADS, --extra_envs adds NAME=VALUE variables; the others "
        "(servers, samplers, ssh, --ip_config, --part_config, --graph_format) mean "
        "nothing here and are ignored (the script reads its own --part_config)")
    dgl.add_argument("--num_trainers", type=int, default=None, help=argparse.SUPPRESS)
    dgl.add_argument("--workspace", default=None, help=argparse.SUPPRESS)
    dgl.add_argument("--num_omp_threads", type=int, default=None, help=argparse.SUPPRESS)
    dgl.add_argument("--extra_envs", nargs="+", default=[], help=argparse.SUPPRESS)
    for name in _DGL_IGNORED:
        dgl.add_argument(f"--{name}", default=None, help=argparse.SUPPRESS)
    run.add_argument("script", nargs=argparse.REMAINDER, metavar="SCRIPT [ARGS...]",
                     help="the script (or -m module) and its arguments")
    run.set_defaults(run=_run)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="  %(message)s", stream=sys.stdout)
    logging.getLogger("sarlite").setLevel(logging.INFO)   # progress of long steps
    try:
        return args.run(args) or 0
    except (ValueError, OSError, NotImplementedError) as err:
        print(f"sarlite {args.command}: error: {err}", file=sys.stderr)
        return 2


def entry() -> None:
    """The ``sarlite`` command (and ``python -m sarlite.cli``): :func:`main`, then leave
    as the training workers do, without Python's finalization
    (:func:`sarlite.runtime.health.exit_now` flushes what was printed first). With torch
    and DGL loaded, that teardown takes 1.5-2 s after the command's work is done (the
    launcher's workers have ended; partitions and outputs are written and closed) and
    does nothing the command needs. An exception other than ``SystemExit`` with a number
    leaves the usual way, with its traceback."""
    try:
        code = main()
    except SystemExit as stop:
        if not isinstance(stop.code, (int, type(None))):
            raise
        code = stop.code or 0
    from .runtime.health import exit_now
    exit_now(code)


if __name__ == "__main__":
    entry()
