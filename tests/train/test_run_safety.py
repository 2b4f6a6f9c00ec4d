"""Nothing read from disk runs code, and a run is never lost (issue #14): a crafted checkpoint
that points DCP outside its run folder and a malicious CIFAR batch are refused without running
anything; starting over a run folder with a checkpoint needs --overwrite; a second process on
the same folder gets an error naming the first; a damaged checkpoint fails its content hash;
resume appends metrics after cutting them back to the checkpoint; non-finite gradients or
parameters stop the run before a checkpoint is written."""

from __future__ import annotations

import dataclasses
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
import torch

from harness_helpers import synthetic_corpus, tiny_config
from torch_mars.data.corpus import DataFormatError
from torch_mars.data.images import read_cifar
from torch_mars.train import Trainer
from torch_mars.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from torch_mars.train.metrics import read_metrics
from torch_mars.train.run_record import RunFolderBusy, run_folder_lock

CORPUS = synthetic_corpus()


def train(config):
    return Trainer(config, CORPUS).train()


def test_a_checkpoint_naming_a_shard_folder_outside_the_run_is_refused(tmp_path):
    config = tiny_config(tmp_path / "run", stop_after=2)
    train(config)
    path = tmp_path / "run" / "checkpoint.pt"
    payload = torch.load(path, weights_only=True)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "run" / "checkpoint-step9").symlink_to(tmp_path / "elsewhere")
    for name in ("/etc", "../elsewhere", "checkpoint-step2/../../elsewhere", "checkpoint-step9"):
        crafted = {k: v for k, v in payload.items() if k not in ("format", "sha256")}
        save_checkpoint(path, {**crafted, "sharded_dir": name})
        with pytest.raises(CheckpointError, match="shard folder"):
            train(dataclasses.replace(config, resume=True, stop_after=None, fsdp=True))


class _RunsCode:
    """A pickle that runs ``touch MARKER`` when unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _checkpoint_naming_a_crafted_dcp_folder(tmp_path, folder_name, metadata_link=False):
    """A finished single-file run whose checkpoint (re-hashed, as anyone can) names a shard
    folder holding a `.metadata` that runs code when unpickled."""
    config = tiny_config(tmp_path / "run", stop_after=2)
    train(config)
    path = tmp_path / "run" / "checkpoint.pt"
    payload = torch.load(path, weights_only=True)
    crafted = {k: v for k, v in payload.items() if k not in ("format", "sha256", "model")}
    save_checkpoint(path, {**crafted, "sharded_dir": folder_name})
    folder = tmp_path / "run" / folder_name
    folder.mkdir()
    marker = tmp_path / "ran"
    evil = pickle.dumps(_RunsCode(marker))
    if metadata_link:
        (tmp_path / "outside.metadata").write_bytes(evil)
        (folder / ".metadata").symlink_to(tmp_path / "outside.metadata")
    else:
        (folder / ".metadata").write_bytes(evil)
    return dataclasses.replace(config, resume=True, stop_after=None), marker


@pytest.mark.parametrize(
    ("folder_name", "metadata_link"),
    [("checkpoint-step2", False), ("checkpoint-step2", True), ("checkpoint-step\u0662", False)],
    ids=["a real folder", "a .metadata linked out of the run", "a non-ASCII digit"],
)
def test_a_plain_resume_never_unpickles_a_distributed_checkpoint(
    tmp_path, folder_name, metadata_link
):
    """Issue #35: a plain `--resume` followed a checkpoint's shard folder, and DCP unpickled its
    `.metadata`: code ran. Now a plain resume refuses a DCP checkpoint before reading it."""
    config, marker = _checkpoint_naming_a_crafted_dcp_folder(tmp_path, folder_name, metadata_link)
    with pytest.raises(CheckpointError, match="resume it with --fsdp"):
        train(config)
    assert not marker.exists()


@pytest.mark.parametrize(
    ("folder_name", "metadata_link", "refusal"),
    [
        ("checkpoint-step2", False, "not a DCP checkpoint"),
        ("checkpoint-step2", True, "must hold no links"),
        ("checkpoint-step\u0662", False, "expected checkpoint-stepN"),
    ],
    ids=["a real folder", "a .metadata linked out of the run", "a non-ASCII digit"],
)
def test_a_resume_with_fsdp_reads_dcp_metadata_without_running_code(
    tmp_path, folder_name, metadata_link, refusal
):
    config, marker = _checkpoint_naming_a_crafted_dcp_folder(tmp_path, folder_name, metadata_link)
    with pytest.raises(CheckpointError, match=refusal):
        train(dataclasses.replace(config, fsdp=True))
    assert not marker.exists()


def test_a_malicious_cifar_batch_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"

    class Exploit:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    with (tmp_path / "batches.meta").open("wb") as handle:
        pickle.dump({"label_names": ["a", "b"]}, handle)
    with (tmp_path / "data_batch_1").open("wb") as handle:
        pickle.dump({"data": Exploit(), "labels": [0]}, handle)
    with pytest.raises(DataFormatError, match=r"refused (posix|os)\.system"):
        read_cifar(tmp_path, "train")
    assert not marker.exists()


def test_a_genuine_cifar_batch_still_loads(tmp_path):
    with (tmp_path / "batches.meta").open("wb") as handle:
        pickle.dump({"label_names": ["a", "b"]}, handle)
    data = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    for name in [f"data_batch_{i}" for i in range(1, 6)]:
        with (tmp_path / name).open("wb") as handle:
            pickle.dump({"data": data, "labels": [0, 1], "filenames": ["x", "y"]}, handle)
    assert len(read_cifar(tmp_path, "train")) == 10


def test_starting_over_a_run_with_a_checkpoint_needs_overwrite(tmp_path):
    config = tiny_config(tmp_path, stop_after=2)
    train(config)
    rows = read_metrics(tmp_path)
    with pytest.raises(CheckpointError, match="--resume to continue it, or --overwrite"):
        train(config)
    assert read_metrics(tmp_path) == rows
    result = train(dataclasses.replace(config, overwrite=True, stop_after=None))
    assert result.steps == 8 and len(read_metrics(tmp_path)) == 8


def test_a_fresh_train_refuses_a_finished_run_without_a_checkpoint(tmp_path):
    """Issue #35: the old sweep deleted every finished point's checkpoint, and a `train` into
    such a folder then replaced its metrics and summary silently. Both runs are real
    processes."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(bytes(synthetic_corpus().train) + bytes(synthetic_corpus().val))
    run = tmp_path / "run"
    args = [sys.executable, "-m", "torch_mars.cli", "train", "--model", "tiny", "--steps", "6"]
    args += ["--batch-size", "4", "--block-size", "16", "--eval-interval", "3"]
    args += ["--eval-batches", "2", "--quiet", "--data", str(corpus), "--run-dir", str(run)]
    first = subprocess.run(args, capture_output=True, text=True)
    assert first.returncode == 0, first.stderr[-2000:]
    (run / "checkpoint.pt").unlink(missing_ok=True)
    kept = {p.name: p.read_bytes() for p in run.iterdir() if p.name != ".lock"}
    second = subprocess.run([*args[:6], "--steps", "2", *args[8:]], capture_output=True, text=True)
    assert second.returncode == 2
    assert second.stderr.count("\n") == 1 and "holds an earlier run (" in second.stderr
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.name != ".lock"} == kept


def test_a_second_process_on_a_run_folder_is_told_who_holds_it(tmp_path):
    """The holder keeps the lock until the test kills it (it blocks on its stdin), and
    ``wait()`` returns only once the process is gone, with its lock: nothing here depends on
    how fast the machine is."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path;"
            "from torch_mars.train.run_record import run_folder_lock\n"
            f"with run_folder_lock(Path({str(tmp_path)!r})):\n"
            "    print('locked', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunFolderBusy, match=f"in use by process {holder.pid}"):
            train(tiny_config(tmp_path))
    finally:
        holder.kill()
        holder.wait()
    with run_folder_lock(tmp_path):  # the dead holder's lock is gone
        pass


def test_a_damaged_checkpoint_fails_its_content_hash(tmp_path):
    train(tiny_config(tmp_path, stop_after=2))
    path = tmp_path / "checkpoint.pt"
    identity = torch.load(path, weights_only=True)["identity"]
    data = bytearray(path.read_bytes())
    # Flip one byte inside a tensor's storage (the zip stores tensors uncompressed).
    weights = torch.load(path, weights_only=True)["model"]["wte.weight"]
    needle = weights.reshape(-1)[:4].numpy().tobytes()
    offset = bytes(data).index(needle)
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="does not match its hash"):
        load_checkpoint(path, identity)


def test_resume_appends_after_cutting_metrics_back_to_the_checkpoint(tmp_path):
    config = tiny_config(tmp_path, checkpoint_interval=2)
    train(dataclasses.replace(config, stop_after=5))
    with (tmp_path / "metrics.jsonl").open("a") as handle:
        handle.write('{"step": 6, "trai')  # a row cut short by a kill
    inode = (tmp_path / "metrics.jsonl").stat().st_ino
    train(dataclasses.replace(config, resume=True))
    rows = read_metrics(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert (tmp_path / "metrics.jsonl").stat().st_ino != inode  # replaced, never truncated


@pytest.mark.parametrize("what", ["gradient", "parameter"])
def test_non_finite_state_stops_the_run_before_a_checkpoint(tmp_path, what):
    """A NaN gradient entry whose loss is finite, or a parameter that turns infinite in the step
    right before a checkpoint: the run stops and the last good checkpoint stays."""
    config = tiny_config(tmp_path, checkpoint_interval=2)
    train(dataclasses.replace(config, stop_after=2))
    good = (tmp_path / "checkpoint.pt").read_bytes()
    trainer = Trainer(dataclasses.replace(config, resume=True), CORPUS)
    weight = trainer.model.wte.weight
    if what == "gradient":
        weight.register_hook(lambda grad: grad.index_fill(0, torch.tensor([0]), float("nan")))
    else:
        step = trainer.optimizer.step
        calls = []

        def step_then_poison(*args, **kwargs):
            result = step(*args, **kwargs)
            calls.append(1)
            if len(calls) == 2:  # step 4, which ends in a checkpoint
                with torch.no_grad():
                    weight[0, 0] = float("inf")
            return result

        trainer.optimizer.step = step_then_poison
    message = "gradient norm is nan at step 3" if what == "gradient" else "after step 4"
    with pytest.raises(FloatingPointError, match=message):
        trainer.train()
    assert (tmp_path / "checkpoint.pt").read_bytes() == good


def test_resume_checks_the_data_itself_not_its_path(tmp_path):
    from torch_mars.data import load_corpus

    corpus = synthetic_corpus()
    (tmp_path / "a.txt").write_bytes(bytes(corpus.train) + bytes(corpus.val))
    (tmp_path / "moved").mkdir()
    (tmp_path / "moved" / "a.txt").write_bytes((tmp_path / "a.txt").read_bytes())
    config = tiny_config(tmp_path / "run", data=str(tmp_path / "a.txt"), stop_after=2)
    Trainer(config).train()
    moved = dataclasses.replace(
        config, data=str(tmp_path / "moved" / "a.txt"), resume=True, stop_after=None
    )
    assert Trainer(moved).train().steps == 8
    changed = bytearray((tmp_path / "a.txt").read_bytes())
    changed[5] ^= 1
    (tmp_path / "a.txt").write_bytes(bytes(changed))
    assert (
        load_corpus(str(tmp_path / "a.txt")).fingerprint()
        != load_corpus(str(tmp_path / "moved" / "a.txt")).fingerprint()
    )
    again = dataclasses.replace(config, resume=True, stop_after=None, steps=8)
    with pytest.raises(CheckpointError, match="data_fingerprint"):
        Trainer(again).train()


def test_meta_json_dtype_is_honoured_and_checked(tmp_path):
    import json

    from torch_mars.data import DataFormatError as ShardError
    from torch_mars.data import TokenShards

    ids = np.arange(70_000, 70_100, dtype="<u4")
    for split in ("train", "val"):
        ids.tofile(tmp_path / f"{split}.bin")
    meta = {"vocab_size": 70_100, "dtype": "uint32", "tokens": {"train": 100, "val": 100}}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    shards = TokenShards(tmp_path)
    assert shards.train.dtype == np.dtype("<u4") and int(shards.train[0]) == 70_000
    for bad, message in (
        ({**meta, "dtype": "int8"}, "dtype 'int8'"),
        ({**meta, "dtype": "uint16"}, "vocab_size 70100"),
        ({**meta, "tokens": {"train": -1}}, "whole token counts"),
    ):
        (tmp_path / "meta.json").write_text(json.dumps(bad))
        with pytest.raises(ShardError, match=message):
            TokenShards(tmp_path)


def test_a_test_split_is_labelled_by_class_name(tmp_path):
    from PIL import Image

    from torch_mars.train.vision import load_vision_data

    for split, names in (("train", ("cat", "dog", "eel")), ("test", ("dog", "eel"))):
        for name in names:
            (tmp_path / split / name).mkdir(parents=True)
            Image.new("L", (4, 4), 10).save(tmp_path / split / name / "0.png")
    train, test = load_vision_data(f"folder:{tmp_path}")
    assert train.classes == ("cat", "dog", "eel")
    assert test.labels.tolist() == [1, 2]  # by name, not by position in the test folder
    (tmp_path / "test" / "fox").mkdir()
    Image.new("L", (4, 4), 10).save(tmp_path / "test" / "fox" / "0.png")
    with pytest.raises(DataFormatError, match=r"class folders \['fox'\]"):
        load_vision_data(f"folder:{tmp_path}")


def test_the_process_group_gets_the_configured_timeout(monkeypatch):
    import datetime

    from torch_mars.train import runtime

    seen: dict = {}
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(runtime.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(runtime.dist, "init_process_group", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setattr(runtime.dist, "get_rank", lambda: 0)
    monkeypatch.setattr(runtime.dist, "get_world_size", lambda: 2)
    runtime.init_processes("cpu", 7.0)
    assert seen["timeout"] == datetime.timedelta(seconds=7) and seen["backend"] == "gloo"


def _barrier_with_timeout(rank: int, init_file: str, out_file: str, failed) -> None:
    import datetime

    import torch.distributed as dist

    dist.init_process_group(
        "gloo",
        init_method=f"file://{init_file}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=1),
    )
    if rank == 1:
        failed.wait()  # a stuck partner: it never joins the barrier, and stays until rank 0 failed
    else:
        try:
            dist.barrier()
        except RuntimeError as error:
            with open(out_file, "w") as handle:
                handle.write(str(error))
        failed.set()
    dist.destroy_process_group()


def test_a_stuck_partner_times_out_with_the_message_the_trainer_translates(tmp_path):
    """Rank 1 never joins rank 0's barrier, so the barrier can only time out, and rank 1 leaves
    only after it has: the outcome does not depend on which rank is faster."""
    import torch.multiprocessing as mp

    out = tmp_path / "error.txt"
    failed = mp.get_context("spawn").Event()
    mp.spawn(_barrier_with_timeout, args=(str(tmp_path / "init"), str(out), failed), nprocs=2)
    assert "timed out" in out.read_text().lower()


CRAFTED = {
    "step 0": lambda p: {**p, "step": 0},
    "step 10**12": lambda p: {**p, "step": 10**12},
    "step a string": lambda p: {**p, "step": "2"},
    "step a bool": lambda p: {**p, "step": True},
    "no progress": lambda p: {k: v for k, v in p.items() if k != "progress"},
    "progress of strings": lambda p: {**p, "progress": dict.fromkeys(p["progress"], "x")},
    "no rng": lambda p: {k: v for k, v in p.items() if k != "rng"},
    "rng of floats": lambda p: {**p, "rng": {**p["rng"], "torch": p["rng"]["torch"].float()}},
    "a short python rng": lambda p: {**p, "rng": {**p["rng"], "python": [1, 2]}},
    "no model": lambda p: {k: v for k, v in p.items() if k != "model"},
    "optimizer a list": lambda p: {**p, "optimizer": [1]},
    "model of other shapes": lambda p: {
        **p,
        "model": {k: torch.zeros(1) for k in p["model"]},
    },
    "identity a list": lambda p: {**p, "identity": [1]},
}


@pytest.mark.parametrize("case", CRAFTED, ids=list(CRAFTED))
def test_a_rehashed_checkpoint_with_bad_fields_is_refused_in_one_error(tmp_path, case):
    """Issue #35: a valid hash with missing or mistyped fields ended in tracebacks. The hash is
    a checksum anyone can recompute, so every field a resume reads is checked."""
    config = tiny_config(tmp_path / "run", stop_after=2)
    train(config)
    path = tmp_path / "run" / "checkpoint.pt"
    payload = torch.load(path, weights_only=True)
    kept = {k: v for k, v in payload.items() if k not in ("format", "sha256")}
    save_checkpoint(path, CRAFTED[case](kept))
    with pytest.raises(CheckpointError, match=str(path)):
        train(dataclasses.replace(config, resume=True, stop_after=None))
