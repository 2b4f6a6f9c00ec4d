"""MARS on FSDP2 (``fully_shard``) parameters. Two gloo processes, spawned here, each on half of
the global batch, match one process on the whole batch after 10 steps for every rule and for the
exact mode. The model has first dimensions that do not divide by the world size, a weight and a
bias whose shard is empty on rank 1, and a 4-D conv weight (routed by its logical ``ndim``).
MARS-Shampoo also matches on weights split along dimension 1, with float32 and bf16 state. A
tensor whose corrected gradient has norm > 1 overall but <= 1 on each shard is clipped as a
whole. The sharded path pays a fixed number of collectives per step however many tensors it
updates, where plain ``DTensor`` ops pay one per tensor."""

from __future__ import annotations

import math

import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import (
    DTensor,
    Replicate,
    Shard,
    distribute_tensor,
    init_device_mesh,
)
from torch.distributed.tensor.debug import CommDebugMode

from distributed_helpers import RULE_CASES, run_on_two_processes
from problems import mse_step
from torch_mars import MARS, MarsHyperparams, StepTensors, mars_step

STEPS = 10
GLOBAL_BATCH = 8
CASES = RULE_CASES


class ConvThenMLP(torch.nn.Module):
    """A 4-D conv weight (3, 1, 2, 2); linear layers with 9, 9, 3 and 1 rows, the last one empty
    on rank 1 (its weight and its bias); a LayerNorm of 9."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 3, kernel_size=2)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(12, 9),
            torch.nn.Tanh(),
            torch.nn.LayerNorm(9),
            torch.nn.Linear(9, 3),
            torch.nn.Tanh(),
            torch.nn.Linear(3, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(torch.tanh(self.conv(x)).flatten(1))


def make_model(world: int, shard: bool | None = None) -> torch.nn.Module:
    """The model, ``fully_shard``-ed per layer and at the root when ``shard`` (default: on more
    than one process)."""
    torch.manual_seed(0)
    model = ConvThenMLP()
    if shard is None:
        shard = world > 1
    if shard:
        fully_shard(model.conv)
        for layer in model.mlp:
            if any(True for _ in layer.parameters()):
                fully_shard(layer)
        fully_shard(model)
    return model


def full(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.full_tensor() if isinstance(tensor, DTensor) else tensor).detach().clone()


def train(mars_type: str, is_approx: bool, rank: int, world: int) -> list[torch.Tensor]:
    model = make_model(world)
    # foreach=False: the single process runs the per-tensor reference loop.
    opt = MARS(model.parameters(), lr=0.02, mars_type=mars_type, is_approx=is_approx, foreach=False)
    generator = torch.Generator().manual_seed(1)
    share = GLOBAL_BATCH // world
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 1, 3, 3, generator=generator)[rank * share :][:share]
        y = torch.randn(GLOBAL_BATCH, 1, generator=generator)[rank * share :][:share]
        mse_step(opt, model, x, y, is_approx)
    return [full(p) for p in model.parameters()]


def clipped_momentum(world: int) -> torch.Tensor:
    """MARS-Lion's momentum after one step on a (4, 3) weight whose gradient has norm 0.9 on
    each of two row shards and 0.9 * sqrt(2) > 1 in all: a whole-tensor clip scales it, a
    per-shard clip would not."""
    grad = torch.full((4, 3), 0.9 / math.sqrt(6))
    weight = torch.zeros(4, 3)
    if world > 1:
        mesh = init_device_mesh("cpu", (world,))
        weight = distribute_tensor(weight, mesh, [Shard(0)])
        grad = distribute_tensor(grad, mesh, [Shard(0)])
    param = torch.nn.Parameter(weight)
    param.grad = grad
    opt = MARS([param], lr=0.1, betas=(0.5, 0.99), mars_type="mars-lion")
    opt.step()
    return full(opt.state[param]["exp_avg"])


def sharded_params(count: int, world: int) -> list[torch.nn.Parameter]:
    """``count`` row-sharded (5, 4) weights with gradients."""
    mesh = init_device_mesh("cpu", (world,))
    params = []
    for index in range(count):
        generator = torch.Generator().manual_seed(index)
        param = torch.nn.Parameter(
            distribute_tensor(torch.randn(5, 4, generator=generator), mesh, [Shard(0)])
        )
        param.grad = distribute_tensor(torch.randn(5, 4, generator=generator), mesh, [Shard(0)])
        params.append(param)
    return params


def collectives_per_step(mars_type: str, count: int, world: int) -> int:
    """Collectives in the second step of ``MARS`` on ``count`` sharded weights."""
    params = sharded_params(count, world)
    opt = MARS(params, lr=0.01, mars_type=mars_type)
    opt.step()
    with CommDebugMode() as comm:
        opt.step()
    return comm.get_total_counts()


def dtensor_ops_collectives(count: int, world: int) -> int:
    """Collectives of one MARS-AdamW step run by plain ``DTensor`` ops (the per-tensor loop)."""
    params = sharded_params(count, world)
    tensors = StepTensors(
        params=[p.detach() for p in params],
        grads=[p.grad for p in params],
        exp_avgs=[torch.zeros_like(p) for p in params],
        exp_avg_sqs=[torch.zeros_like(p) for p in params],
        steps=[1] * count,
        last_grads=[torch.zeros_like(p) for p in params],
    )
    hp = MarsHyperparams(lr=0.01, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0)
    with CommDebugMode() as comm:
        mars_step(tensors, hp, store_last_grad=True, implementation="single_tensor")
    return comm.get_total_counts()


def shampoo_on_columns(
    world: int, state_dtype: torch.dtype | None = None, **options
) -> list[torch.Tensor]:
    """MARS-Shampoo, 3 steps, on weights split along dimension 1 (FSDP2's ``shard_placement_fn``
    can choose it): (4, 5) splits 3 + 2 columns, (3, 1) leaves rank 1 an empty shard."""
    mesh = init_device_mesh("cpu", (world,)) if world > 1 else None
    params = []
    for index, shape in enumerate([(4, 5), (3, 1), (6, 3)]):
        generator = torch.Generator().manual_seed(index)
        weight = torch.randn(shape, generator=generator)
        params.append(
            torch.nn.Parameter(
                weight if mesh is None else distribute_tensor(weight, mesh, [Shard(1)])
            )
        )
    options = {"mars_type": "mars-shampoo", **options}
    opt = MARS(params, lr=0.05, state_dtype=state_dtype, **options)
    for step in range(3):
        for index, param in enumerate(params):
            generator = torch.Generator().manual_seed(100 * step + index)
            grad = torch.randn(param.shape, generator=generator)
            param.grad = grad if mesh is None else distribute_tensor(grad, mesh, [Shard(1)])
        opt.step()
    return [full(p) for p in params]


def misplaced_gradient_error(world: int) -> str:
    """The error of a step whose gradient is replicated while its parameter is row-sharded; the
    step must leave no state behind."""
    mesh = init_device_mesh("cpu", (world,))
    param = torch.nn.Parameter(distribute_tensor(torch.zeros(4, 3), mesh, [Shard(0)]))
    param.grad = distribute_tensor(torch.ones(4, 3), mesh, [Replicate()])
    opt = MARS([param])
    try:
        opt.step()
    except ValueError as error:
        return str(error) if not opt.state else "state was created"
    return "no error"


def scaled_fused_steps(world: int, scale: float) -> list[torch.Tensor]:
    """Two fused MARS-AdamW steps on row-sharded tensors (a matrix and a 1-D tensor) whose
    gradients carry a GradScaler's ``scale``, handed over as ``torch.amp.GradScaler`` does (the
    optimizer's ``grad_scale`` and ``found_inf``). The unscaled gradients have norms below 1,
    so a scale left in would change the clip and the trajectory."""
    mesh = init_device_mesh("cpu", (world,))
    shapes = [(5, 4), (3,)]
    params = [
        torch.nn.Parameter(distribute_tensor(torch.ones(shape), mesh, [Shard(0)]))
        for shape in shapes
    ]
    opt = MARS(params, lr=0.05, fused=True)
    opt.grad_scale = torch.tensor(scale)
    opt.found_inf = torch.tensor(0.0)
    for step, size in enumerate((0.02, 0.1)):
        for index, param in enumerate(params):
            generator = torch.Generator().manual_seed(10 * step + index)
            grad = size * scale * torch.randn(shapes[index], generator=generator)
            param.grad = distribute_tensor(grad, mesh, [Shard(0)])
        opt.step()
    return [full(p) for p in params]


def nonfinite_skips(world: int, placement) -> dict[str, tuple[bool, bool, list[int]]]:
    """Per rule: two weights distributed with ``placement``, the second step's gradient of the
    first holding a NaN in its last row (rank 1's shard under ``Shard(0)``). Returns whether the
    first kept its value, whether the second moved, and the skip counts."""
    mesh = init_device_mesh("cpu", (world,))
    results = {}
    for mars_type in ("mars-adamw", "mars-lion", "mars-shampoo", "mars-m"):
        generator = torch.Generator().manual_seed(0)
        params = [
            torch.nn.Parameter(
                distribute_tensor(torch.randn(5, 4, generator=generator), mesh, [placement])
            )
            for _ in range(2)
        ]
        opt = MARS(params, lr=0.05, mars_type=mars_type, gamma=0.3)
        for step in range(2):
            before = [full(p).clone() for p in params]
            for index, param in enumerate(params):
                grad = torch.randn(5, 4, generator=generator)
                if step == 1 and index == 0:
                    grad[4, 1] = math.nan
                param.grad = distribute_tensor(grad, mesh, [placement])
            opt.step()
        results[mars_type] = (
            torch.equal(full(params[0]), before[0]),
            not torch.equal(full(params[1]), before[1]),
            [int(opt.state[p]["nonfinite_skips"]) for p in params],
        )
    return results


ONE_BUFFER = {"mars_type": "mars-m", "clip": False, "one_buffer": True}


def run_everything(rank: int, world: int) -> dict:
    results: dict = {case: train(*case, rank, world) for case in CASES}
    results["clip"] = clipped_momentum(world)
    results["columns"] = shampoo_on_columns(world)
    results["columns, bf16 state"] = shampoo_on_columns(world, torch.bfloat16)
    results["columns, one buffer"] = shampoo_on_columns(world, **ONE_BUFFER)
    for rule in ("mars-shampoo", "mars-adamw", "mars-lion"):
        results["columns, cautious", rule] = shampoo_on_columns(
            world, mars_type=rule, cautious=True
        )
    results["misplaced"] = misplaced_gradient_error(world)
    results["scaled"] = [scaled_fused_steps(world, scale) for scale in (1.0, 1024.0)]
    for mars_type in ("mars-adamw", "mars-lion", "mars-shampoo"):
        results[mars_type, "collectives"] = [
            collectives_per_step(mars_type, count, world) for count in (1, 2, 8)
        ]
    results["dtensor ops collectives"] = [dtensor_ops_collectives(n, world) for n in (1, 8)]
    results["nonfinite, row shards"] = nonfinite_skips(world, Shard(0))
    results["nonfinite, dtensor ops"] = nonfinite_skips(world, Replicate())
    return results


def test_fsdp2_on_two_processes(tmp_path):
    sharded = run_on_two_processes(run_everything, tmp_path)

    for case in CASES:
        for single, two in zip(train(*case, rank=0, world=1), sharded[case], strict=True):
            torch.testing.assert_close(
                two, single, rtol=1e-5, atol=1e-6, msg=lambda m, c=case: f"{c}: {m}"
            )

    for single, two in zip(shampoo_on_columns(1), sharded["columns"], strict=True):
        torch.testing.assert_close(two, single, rtol=1e-5, atol=1e-6)
    # Cautious masks take the kept fraction of the whole tensor (one more all_reduce).
    for rule in ("mars-shampoo", "mars-adamw", "mars-lion"):
        single = shampoo_on_columns(1, mars_type=rule, cautious=True)
        for one, two in zip(single, sharded["columns, cautious", rule], strict=True):
            torch.testing.assert_close(two, one, rtol=1e-5, atol=1e-6)
    single_one_buffer = shampoo_on_columns(1, **ONE_BUFFER)
    for single, two in zip(single_one_buffer, sharded["columns, one buffer"], strict=True):
        torch.testing.assert_close(two, single, rtol=1e-5, atol=1e-6)
    single_bf16 = shampoo_on_columns(1, torch.bfloat16)
    for single, two in zip(single_bf16, sharded["columns, bf16 state"], strict=True):
        torch.testing.assert_close(two, single, rtol=1e-5, atol=1e-6)

    assert "must be sharded like it" in sharded["misplaced"]
    unscaled, scaled = sharded["scaled"]
    for a, b in zip(unscaled, scaled, strict=True):
        torch.testing.assert_close(b, a)

    total_norm = 0.9 * math.sqrt(2)  # each shard's norm is 0.9, below the clip threshold
    expected = torch.full((4, 3), 0.5 * (0.9 / math.sqrt(6)) / total_norm)
    torch.testing.assert_close(clipped_momentum(1), expected)
    torch.testing.assert_close(sharded["clip"], expected)

    # One all_reduce of the squared norms; MARS-Shampoo adds the gather to and the scatter from
    # the owner ranks. The same for 1, 2 or 8 tensors.
    assert sharded["mars-adamw", "collectives"] == [1, 1, 1]
    assert sharded["mars-lion", "collectives"] == [1, 1, 1]
    assert sharded["mars-shampoo", "collectives"] == [3, 3, 3]
    # Plain DTensor ops: at least one collective per tensor.
    one, eight = sharded["dtensor ops collectives"]
    assert eight >= 8 and eight > one

    # A NaN in one rank's shard skips the whole tensor on every rank, on both sharded paths.
    for case in ("nonfinite, row shards", "nonfinite, dtensor ops"):
        for mars_type, outcome in sharded[case].items():
            assert outcome == (True, True, [1, 0]), (case, mars_type, outcome)


def test_a_one_rank_mesh_matches_one_process_without_collectives(tmp_path):
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1
    )
    try:
        for mars_type in ("mars-adamw", "mars-shampoo"):
            assert collectives_per_step(mars_type, count=3, world=1) == 0
            sharded = make_model(world=1, shard=True)
            plain = make_model(world=1)
            opt_sharded = MARS(sharded.parameters(), lr=0.02, mars_type=mars_type)
            opt_plain = MARS(plain.parameters(), lr=0.02, mars_type=mars_type, foreach=True)
            x, y = torch.randn(4, 1, 3, 3), torch.randn(4, 1)
            for model, opt in ((sharded, opt_sharded), (plain, opt_plain)):
                for _ in range(3):
                    opt.zero_grad()
                    torch.nn.functional.mse_loss(model(x), y).backward()
                    opt.step()
            for a, b in zip(plain.parameters(), sharded.parameters(), strict=True):
                torch.testing.assert_close(full(b), a.detach())
    finally:
        torch.distributed.destroy_process_group()
