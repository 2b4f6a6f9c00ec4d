"""The study engine of ``torch-mars tune`` and ``torch-mars sweep``, laid out as Optuna lays
out its own: the store (:mod:`.store`, the one adapter to Optuna's storages), the engine
(:mod:`.engine`: claims, workers, a study's identity), the searches side by side (the surface
search :mod:`.surface`, tune's default; the lr-profiled search :mod:`.profiled`; the plain grid
:mod:`.grid_search`), the seeds and protocol (:mod:`.selection`), the declared space
(:mod:`.space`), the grid syntax (:mod:`.grid`), the verdicts (:mod:`.verdict`: paired and
crossed intervals, Holm) over a declared family (:mod:`.family`), tuning curves
(:mod:`.curves`), tune's plan (:mod:`.tune`) and its report (:mod:`.tune_report`), sweep's plan
and report (:mod:`.sweep`), the one door of a tune study (:mod:`.run`), the campaigns and their
verdicts (:mod:`.campaign`), and what the study scripts share: the fight map's protocol
(:mod:`.fight_map`), a map's reports (:mod:`.map_report`) and ablation sweeps' flags
(:mod:`.ablation`).
"""

# A user's training function is a task: registered whenever the engine is imported, so that a
# worker joining an objective study knows it.
import torch_mars.train.study.objective  # noqa: F401
