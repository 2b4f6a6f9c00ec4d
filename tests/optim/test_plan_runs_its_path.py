"""The step path a group's plan records is the kernel that runs, for every setting of the
settings table, each device kind and each sharding of FSDP2 parameters (row shards, any other
layout): nothing below the plan picks another path (the Triton
kernels once sent three settings and strided tensors to the compiled kernel on their own, so
a plan said "triton" while the compiled kernel ran). The kernels are stubbed: which one is
entered is what is checked; the parity tests check what each computes."""

from __future__ import annotations

import pytest
import torch

import torch_mars.kernels.compiled_step as compiled_step
import torch_mars.kernels.triton_step as triton_step
import torch_mars.optim.functional as functional
import torch_mars.optim.step_plan as step_plan
from torch_mars import MARS
from torch_mars.optim.settings import SETTINGS
from torch_mars.optim.step_types import MarsHyperparams

pytest.importorskip("triton")


def _gates(tensors, hp) -> list[torch.Tensor] | None:
    skip = getattr(hp, "skip_nonfinite", False)
    return [p.new_ones(()) for p in tensors.params] if skip else None


@pytest.fixture
def entered(monkeypatch):
    """Stub the lowest function of each path; record (rule, path) for each one entered."""
    calls: list[tuple[str, str]] = []

    def single_mars(tensors, hp, store_last_grad):
        calls.append(("mars", "single_tensor"))
        return _gates(tensors, hp)

    def foreach_mars(tensors, hp, store_last_grad, whole):
        calls.append(("mars", "foreach"))
        return _gates(tensors, hp)

    def foreach_one_buffer(tensors, hp, whole):
        calls.append(("mars", "foreach"))
        return list(tensors.exp_avgs), _gates(tensors, hp)

    def triton_launch(tensors, hp, scale, rules, *, is_mars, skip_nonfinite=False, **flags):
        calls.append(("mars" if is_mars else "adamw", "triton"))
        return [p.new_ones(()) for p in tensors.params] if skip_nonfinite else None

    def compiled_run(tensors, hp, scale, rule_of, store_last_grad, inv_grad_scale):
        calls.append(("mars" if isinstance(hp, MarsHyperparams) else "adamw", "compiled"))
        return _gates(tensors, hp)

    monkeypatch.setattr(functional, "mars_step_single_tensor", single_mars)
    monkeypatch.setattr(functional, "mars_elementwise_foreach", foreach_mars)
    monkeypatch.setattr(functional, "one_buffer_momenta_foreach", foreach_one_buffer)
    monkeypatch.setattr(
        functional,
        "adamw_step_single_tensor",
        lambda t, hp: calls.append(("adamw", "single_tensor")),
    )
    monkeypatch.setattr(
        functional, "adamw_step_foreach", lambda t, hp: calls.append(("adamw", "foreach"))
    )
    monkeypatch.setattr(triton_step, "_launch_groups", triton_launch)
    monkeypatch.setattr(compiled_step, "_run", compiled_run)
    return calls


def _variants() -> list[tuple[str, dict]]:
    """Each setting of the table at its variant value (with what it needs to be valid), every
    rule, and non-contiguous parameters."""
    cases = [("defaults", {})]
    for setting in SETTINGS:
        if setting.variant is not None:
            cases.append((f"{setting.name}={setting.variant!r}", {setting.name: setting.variant}))
    cases += [
        ("second_moment=gradient", {"second_moment": "gradient"}),
        ("one_buffer", {"one_buffer": True, "clip": False, "mars_type": "mars-lion"}),
        ("one_buffer-shampoo", {"one_buffer": True, "clip": False, "mars_type": "mars-shampoo"}),
        ("state_dtype=bf16", {"state_dtype": torch.bfloat16}),
        ("strided", {"strided": True}),
    ]
    for rule in ("mars-lion", "mars-shampoo", "mars-m"):
        cases.append((rule, {"mars_type": rule}))
    return cases


DEVICE_KINDS = ("cpu", "cuda")
FLAGS = ({}, {"fused": True}, {"foreach": True}, {"foreach": False})


@pytest.mark.parametrize("device_kind", DEVICE_KINDS)
@pytest.mark.parametrize("case", _variants(), ids=lambda case: case[0])
def test_the_recorded_path_is_the_kernel_that_runs(monkeypatch, entered, device_kind, case):
    _, settings = case
    settings = dict(settings)
    strided = settings.pop("strided", False)
    if device_kind == "cuda":
        # CPU tensors stand in for CUDA ones: the fused kernels of CUDA are Triton's
        # (interpreted), and Triton imports.
        monkeypatch.setattr(functional, "fused_backend", lambda tensors: "triton")
        monkeypatch.setattr(step_plan, "TRITON_AVAILABLE", True)
    for flags in FLAGS:
        torch.manual_seed(0)
        weight = torch.randn(4, 6).t() if strided else torch.randn(6, 4)
        assert weight.is_contiguous() is not strided
        params = [weight.requires_grad_(), torch.randn(4, requires_grad=True)]
        try:
            opt = MARS(params, lr=0.01, **settings, **flags)
        except ValueError:
            continue  # a combination the settings refuse (e.g. amsgrad with one_buffer)

        def closure(params=params) -> torch.Tensor:
            for p in params:
                p.grad = torch.ones_like(p)
            return torch.zeros(())

        closure()
        entered.clear()
        opt.step(closure)  # the exact mode needs one; the approximate mode calls it once
        plan = opt._plans[0]
        expected = set()
        if plan.mars:
            expected.add(("mars", plan.mars_path))
        if plan.adamw:
            expected.add(("adamw", plan.adamw_path))
        assert set(entered) == expected, (flags, plan.path)
        if strided and flags.get("fused"):
            assert plan.path == "compiled"


def test_a_call_that_names_triton_for_what_it_cannot_run_is_refused():
    from torch_mars.optim.step_types import StepTensors

    def step_tensors(p: torch.Tensor) -> StepTensors:
        buffers = [[torch.zeros_like(p)] for _ in range(3)]
        return StepTensors([p], *buffers, steps=[1], last_grads=[torch.zeros_like(p)])

    hp = MarsHyperparams(lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0)
    with pytest.raises(ValueError, match="non-contiguous"):
        functional.mars_step(
            step_tensors(torch.zeros(4, 6).t()), hp, store_last_grad=True, implementation="triton"
        )
    tensors = step_tensors(torch.zeros(6, 4))
    cautious = MarsHyperparams(
        lr=0.1, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.0, cautious=True
    )
    with pytest.raises(ValueError, match="cautious"):
        functional.mars_step(tensors, cautious, store_last_grad=True, implementation="triton")


class _OnCuda:
    """A parameter as the plan sees one on a CUDA device (no device needed): its device kind,
    its layout, its gradient."""

    is_cuda = True
    grad = None

    def __init__(self, contiguous: bool) -> None:
        self._contiguous = contiguous

    def is_contiguous(self) -> bool:
        return self._contiguous


@pytest.mark.parametrize(("contiguous", "fused"), [(True, True), (False, False)])
def test_the_default_takes_the_fused_kernels_only_where_triton_runs_the_tensors(
    monkeypatch, contiguous, fused
):
    """Neither flag set, on CUDA: the Triton kernels where they run the tensors themselves; a
    non-contiguous parameter, which the fused path would send to the compiled kernel (compiled
    on the first step), stays on foreach, as an unsupported setting does: the default and the
    fused path read one rule."""
    monkeypatch.setattr(step_plan, "TRITON_AVAILABLE", True)
    group = MARS([torch.zeros(2, 2, requires_grad=True)]).param_groups[0]
    params = [_OnCuda(contiguous)]
    assert step_plan.default_fused(group, params) is fused
    assert functional.fused_path(params, group.__getitem__) == ("triton" if fused else "compiled")


@pytest.fixture
def one_process_group(tmp_path):
    """A gloo process group of one (this process): ``DTensor``s on a 1-D CPU mesh."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        yield init_device_mesh("cpu", (1,))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(
    ("layout", "mars_path"), [("row shards", "foreach"), ("replicated", "single_tensor")]
)
def test_a_sharded_groups_plan_names_the_kernels_its_step_enters(
    entered, one_process_group, layout, mars_path
):
    """FSDP2 row shards take the multi-tensor MARS kernel on their local shards and the group's
    own path for the AdamW tensors; any other layout the per-tensor loop on ``DTensor`` ops for
    both: the plan says which, and the step enters that."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    placement = Shard(0) if layout == "row shards" else Replicate()
    params = []
    for shape in ((6, 4), (4,)):
        param = torch.nn.Parameter(
            distribute_tensor(torch.randn(shape), one_process_group, [placement])
        )
        param.grad = distribute_tensor(torch.ones(shape), one_process_group, [placement])
        params.append(param)
    opt = MARS(params, lr=0.01)
    opt.step()
    plan = opt._plans[0]
    assert plan.sharding is not None and plan.mars_path == mars_path
    assert plan.adamw_path == (plan.path if layout == "row shards" else "single_tensor")
    assert set(entered) == {("mars", plan.mars_path), ("adamw", plan.adamw_path)}
