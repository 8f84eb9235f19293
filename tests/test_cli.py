"""`sarlite partition` end to end, as a user runs it."""
import subprocess
import sys

import pytest

from sarlite import cli
from sarlite.train import load_config
from sarlite.train.__main__ import parser as train_parser
from sarlite.train.config import PACKAGED


def test_partition_command_writes_partitions_and_prints_the_report(tmp_path, capsys):
    assert cli.main(["partition", "--num-nodes", "2000", "--num-parts", "2",
                     "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "edge cut" in out and "balance (max/mean)" in out
    assert (tmp_path / "synthetic.json").is_file()
    assert (tmp_path / "part1" / "graph.dgl").is_file()


def test_real_dataset_without_data_dir_is_one_clear_error(tmp_path, capsys):
    assert cli.main(["partition", "--dataset", "cora", "--num-parts", "2",
                     "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--data-dir" in err and "Traceback" not in err
    assert "planetoid/cora/ind.cora." in err and "shared/" not in err


@pytest.mark.parametrize("command", [[], ["partition"], ["train"], ["run"]])
def test_help_speaks_of_the_users_folders_not_the_checkouts(capsys, command):
    with pytest.raises(SystemExit):
        cli.main([*command, "--help"])
    text = capsys.readouterr().out
    assert not [word for word in ("shared/", "tests/", "benchmarks/") if word in text]


def test_unknown_dataset_is_one_clear_error(tmp_path, capsys):
    assert cli.main(["partition", "--dataset", "imagenet", "--num-parts", "2",
                     "--out", str(tmp_path)]) == 2
    assert "unknown dataset 'imagenet'" in capsys.readouterr().err


def test_cora_partitions_from_data_dir(tmp_path, data_dir, capsys):
    assert cli.main(["partition", "--dataset", "cora", "--data-dir", str(data_dir),
                     "--num-parts", "3", "--balance-train", "--out", str(tmp_path)]) == 0
    assert "cora (2708 nodes, 10556 edges, 3 parts, metis)" in capsys.readouterr().out


def test_balance_train_on_a_heterograph_evens_its_labelled_types_training_nodes(tmp_path,
                                                                                 capsys):
    assert cli.main(["partition", "--dataset", "mag_like", "--num-nodes", "300",
                     "--num-parts", "2", "--balance-train", "--out", str(tmp_path)]) == 0
    assert "train 1.000" in capsys.readouterr().out


def _command(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sarlite.cli", *argv], capture_output=True,
                          text=True, timeout=120)


def test_help_explains_the_partition_options():
    result = _command("partition", "--help")
    assert result.returncode == 0
    for option in ("--dataset", "--data-dir", "--num-parts", "--method", "--objective",
                   "--balance-train", "--balance-edges", "--num-nodes"):
        assert option in result.stdout


def test_the_command_ends_with_its_status_and_all_it_printed_into_a_pipe(tmp_path):
    # the command leaves without Python's teardown (cli.entry): nothing printed is lost
    done = _command("partition", "--num-nodes", "2000", "--num-parts", "2", "--out",
                    str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith(f"wrote {tmp_path}")
    failed = _command("partition", "--dataset", "imagenet", "--num-parts", "2", "--out",
                      str(tmp_path))
    assert failed.returncode == 2
    assert failed.stderr.splitlines()[-1].startswith("sarlite partition: error: unknown "
                                                    "dataset 'imagenet'")


@pytest.mark.parametrize("argv", [[], ["partition"]])
def test_missing_arguments_exit_with_usage(argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize("parse", [
    lambda argv: cli.build_parser().parse_args(["train", *argv]),
    lambda argv: train_parser().parse_args(argv)],
    ids=["sarlite train", "python -m sarlite.train"])
def test_repeated_set_options_all_apply(parse):
    args = parse(["--set", "model.hidden=8", "--set", "train.epochs=2", "optim.lr=0.1"])
    assert args.set == ["model.hidden=8", "train.epochs=2", "optim.lr=0.1"]


def test_metis_max_edges_caps_what_metis_reads_and_logs_it(tmp_path, caplog):
    assert cli.main(["partition", "--num-nodes", "2000", "--num-parts", "2",
                     "--metis-max-edges", "1000", "--out", str(tmp_path)]) == 0
    assert "METIS reads a seeded uniform sample of" in caplog.text


@pytest.mark.parametrize("value", ["0", "many"])
def test_metis_max_edges_must_be_auto_all_or_a_positive_integer(tmp_path, value, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["partition", "--num-parts", "2", "--metis-max-edges", value,
                  "--out", str(tmp_path)])
    assert exc.value.code == 2
    assert "expected 'auto', 'all' or a positive integer" in capsys.readouterr().err


# -- sarlite train --config: packaged names and paths ----------------------------------

def test_list_configs_prints_every_packaged_config_and_exits(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--list-configs"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    names = [line.split()[0] for line in out.splitlines()[1:]]
    assert names == sorted(p.stem for p in PACKAGED.glob("*.yaml")) and "demo" in names
    assert "The demo: the embedded synthetic graph" in out


def test_a_packaged_name_and_a_path_to_the_same_file_give_the_same_config(tmp_path):
    own = tmp_path / "mine.yaml"
    own.write_text((PACKAGED / "demo.yaml").read_text())
    assert load_config("demo") == load_config(str(own))


def test_unknown_config_name_is_one_clear_error_listing_the_packaged_ones(capsys):
    assert cli.main(["train", "--config", "demoo"]) == 2
    err = capsys.readouterr().err
    assert "no packaged config named 'demoo'" in err and "demo, " in err
    assert "./demoo.yaml" in err and "Traceback" not in err


def test_a_missing_config_file_is_one_clear_error(tmp_path, capsys):
    assert cli.main(["train", "--config", str(tmp_path / "absent.yaml")]) == 2
    assert "absent.yaml does not exist" in capsys.readouterr().err


def test_a_missing_file_named_like_a_packaged_config_names_the_packaged_one(tmp_path,
                                                                            capsys):
    assert cli.main(["train", "--config", str(tmp_path / "configs" / "demo.yaml")]) == 2
    assert "a packaged config has that name: --config demo" in capsys.readouterr().err


def test_a_malformed_setting_fails_before_any_worker_starts(monkeypatch, capsys):
    monkeypatch.setenv("SARLITE_HEARTBEAT_TIMEOUT", "soon")
    assert cli.main(["train", "--config", "demo"]) == 2
    out, err = capsys.readouterr()
    assert "launching" not in out
    assert err.strip() == ("sarlite train: error: SARLITE_HEARTBEAT_TIMEOUT must be a "
                           "non-negative number of seconds, got 'soon'")
