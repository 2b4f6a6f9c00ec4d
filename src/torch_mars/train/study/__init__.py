"""The study engine of ``torch-mars tune`` and ``torch-mars sweep``, laid out as Optuna lays
out its own: the store (:mod:`.store`, the one adapter to Optuna's storages), the engine
(:mod:`.engine`: a study's spec, identity and opening; :mod:`.workers`: claims, runs, local
workers; :mod:`.reuse`: runs taken from other studies; :mod:`.pruning`), the searches side by
side (the surface search :mod:`.surface`, one class with its designs as options, tune's default;
the lr-profiled search :mod:`.profiled`; the plain grid :mod:`.grid_search`), the seeds and
protocol (:mod:`.selection`), the declared space (:mod:`.space`), the grid syntax
(:mod:`.grid`), the verdicts (:mod:`.verdict`: paired intervals and the four words; the second
look :mod:`.two_stage`; one machine a pair :mod:`.pairs`) over a declared family
(:mod:`.family`, read across a campaign's studies by :mod:`.family_reads`), tuning curves
(:mod:`.curves`), tune's plan (:mod:`.tune`), what a study found (:mod:`.outcomes`) and its
report (:mod:`.tune_report`: ``summary.md`` by :mod:`.report_text`, ``tune.png`` by
:mod:`.report_plot`, ``tune.json`` by :mod:`.tune_record`), sweep's plan and report
(:mod:`.sweep`), a training function as a task (:mod:`.objective`), and the one door of a tune
study (:mod:`.run`). The project's research (campaigns, the fight map, ablations) is not here:
it is the lab package of ``benchmarks/studies/``, which imports this one.
"""

# A user's training function is a task: registered whenever the engine is imported, so that a
# worker joining an objective study knows it.
import torch_mars.train.study.objective  # noqa: F401
