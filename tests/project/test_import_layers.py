"""The package's layers point one way. Read from the source (every ``import``, also those inside
functions): the import graph of torch_mars's modules has no cycle; the settings table
(``optim/settings.py``) imports nothing of torch_mars, the step's data
(``optim/step_types.py``) only that, and its maths (``optim/step_math.py``) only the data;
``kernels/`` and ``distributed/`` import only these leaves of ``optim/``; and
``optim/``, with everything it reaches, never reaches the
harness, the models, the data, the benchmarks or the CLI. The checker itself is shown to find a
cycle and a forbidden edge, so these tests can fail."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "torch_mars"
SETTINGS = "torch_mars.optim.settings"
DATA = "torch_mars.optim.step_types"
MATHS = "torch_mars.optim.step_math"
LEAVES = (SETTINGS, DATA, MATHS)
HARNESS_LAYERS = ("train", "models", "data", "bench", "cli")
STUDY = "torch_mars.train.study"
STORE = "torch_mars.train.study.store"


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the torch_mars modules it imports (``from pkg import name`` counts as
    ``pkg.name`` when that is a module, else ``pkg``)."""
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    child = f"{node.module}.{alias.name}"
                    targets.add(child if child in modules else node.module)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a list of nodes, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer(module: str) -> str:
    """The node of a module in the layer graph: its subpackage, with the optim leaves apart
    and the study engine (``train/study/``) a layer of its own above the harness."""
    if module in LEAVES:
        return "optim leaves"
    if module.startswith(STUDY):
        return "train.study"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "torch_mars"


def layer_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Subpackage -> the subpackages it imports; the package root (the public facade, which
    imports what it re-exports) is left out."""
    layers: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "torch_mars":
            continue
        source = layer(module)
        layers.setdefault(source, set()).update(
            layer(t) for t in targets if layer(t) not in (source, "torch_mars")
        )
    return layers


def reachable(graph: dict[str, set[str]], starts: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(starts)
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += graph.get(node, ())
    return seen


GRAPH = import_graph()


def test_the_module_graph_and_the_layer_graph_have_no_cycle():
    assert find_cycle(GRAPH) is None
    assert find_cycle(layer_graph(GRAPH)) is None


def test_the_step_data_and_maths_are_leaves_and_the_only_optim_modules_below_optim():
    assert GRAPH[SETTINGS] == set()
    assert GRAPH[DATA] == {SETTINGS}
    assert GRAPH[MATHS] == {DATA}
    for module, targets in GRAPH.items():
        if module.startswith(("torch_mars.kernels", "torch_mars.distributed")):
            reaching_optim = {t for t in targets if t.startswith("torch_mars.optim")}
            assert reaching_optim <= set(LEAVES), (module, reaching_optim)


def test_optim_never_reaches_the_harness_models_data_bench_or_cli():
    optim_modules = [m for m in GRAPH if m.startswith("torch_mars.optim")]
    reached = reachable(GRAPH, optim_modules)
    forbidden = {m for m in reached if layer(m) in HARNESS_LAYERS}
    assert not forbidden
    assert any(m.startswith("torch_mars.kernels") for m in reached)
    assert any(m.startswith("torch_mars.distributed") for m in reached)


def test_the_study_engine_is_a_layer_above_the_harness_it_runs():
    layers = layer_graph(GRAPH)
    assert "train" in layers["train.study"]
    assert "train.study" not in layers["train"]


def private_optuna_attributes(path: Path) -> list[str]:
    """``obj._name`` in a module that imports optuna, on anything but ``self`` or ``cls``:
    where such a module reaches into Optuna's private API."""
    tree = ast.parse(path.read_text())
    imports_optuna = any(
        (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "optuna" for a in n.names))
        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "optuna")
        for n in ast.walk(tree)
    )
    if not imports_optuna:
        return []
    return [
        f"{path.name}:{node.lineno} .{node.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
    ]


def test_no_module_but_the_store_touches_optunas_private_attributes(tmp_path):
    store = PACKAGE / "train" / "study" / "store.py"
    assert private_optuna_attributes(store)  # the adapter does, so the check can see it
    found = [
        hit
        for path in PACKAGE.rglob("*.py")
        if path != store
        for hit in private_optuna_attributes(path)
    ]
    assert not found
    sample = tmp_path / "reach.py"
    sample.write_text("import optuna\nstudy = optuna.load_study()\nstudy._storage\n")
    assert private_optuna_attributes(sample) == ["reach.py:3 ._storage"]


def test_the_checker_finds_a_cycle_and_a_reverse_edge(tmp_path):
    package = tmp_path / "torch_mars"
    for folder, text in {
        "optim": "from torch_mars.kernels import fast\n",
        "kernels": "from torch_mars.optim import mars\n",
    }.items():
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
        (package / folder / ("mars.py" if folder == "optim" else "fast.py")).write_text(text)
    graph = import_graph(package)
    assert find_cycle(graph) == [
        "torch_mars.kernels.fast",
        "torch_mars.optim.mars",
        "torch_mars.kernels.fast",
    ]
    assert find_cycle(layer_graph(graph)) == ["kernels", "optim", "kernels"]
    assert graph["torch_mars.kernels.fast"] == {"torch_mars.optim.mars"}  # not a leaf


PLAIN_STEP = """
import json, sys, torch
from torch_mars import MARS
files = set()
def profile(frame, event, arg):
    if event == "call" and "torch_mars" in frame.f_code.co_filename:
        files.add(frame.f_code.co_filename.split("torch_mars/", 1)[1])
model = torch.nn.Linear(4, 3)
opt = MARS(model.parameters(), lr=1e-2, foreach=False)
model(torch.randn(8, 4)).pow(2).mean().backward()
sys.setprofile(profile)
opt.step()
sys.setprofile(None)
print(json.dumps({"files": sorted(files), "distributed": "torch_mars.distributed" in sys.modules}))
"""


def test_a_plain_cpu_step_reads_seven_optim_files_and_no_distributed_code():
    """docs/algorithm.md's reading path: MARS.step -> _plan (the group's step plan) ->
    _step_group -> functional.mars_step -> mars_step_single_tensor -> adam_rule_, in mars.py,
    step_plan.py, functional.py and single_tensor.py, with the settings' checks (settings.py),
    the step's data (step_types.py) and maths (step_math.py); torch_mars.distributed is never
    imported."""
    import json
    import subprocess
    import sys

    completed = subprocess.run(
        [sys.executable, "-c", PLAIN_STEP], capture_output=True, text=True, check=True
    )
    seen = json.loads(completed.stdout)
    assert seen["files"] == [
        "optim/functional.py",
        "optim/mars.py",
        "optim/settings.py",
        "optim/single_tensor.py",
        "optim/step_math.py",
        "optim/step_plan.py",
        "optim/step_types.py",
    ]
    assert seen["distributed"] is False
