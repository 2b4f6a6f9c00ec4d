"""The study engine of ``torch-mars tune`` and ``torch-mars sweep``, laid out as Optuna lays
out its own: the store (:mod:`.store`, the one adapter to Optuna's storages), the engine
(:mod:`.engine`: claims, workers, a study's identity), the searches side by side (the joint
lr-profiled search :mod:`.profiled`, the coordinate descent :mod:`.descent`, the plain grid
:mod:`.grid_search`), the declared space (:mod:`.space`), the grid syntax (:mod:`.grid`), the
verdicts (:mod:`.verdict`: paired intervals, Holm) and tuning curves (:mod:`.curves`), and the
two commands reduced to their plan and report (:mod:`.tune`, :mod:`.sweep`).
"""

# A user's training function is a task: registered whenever the engine is imported, so that a
# worker joining an objective study knows it.
import torch_mars.train.study.objective  # noqa: F401
