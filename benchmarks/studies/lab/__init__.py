"""The project's research code shared by the scripts of ``benchmarks/studies/``: the fight
map's points and protocol (:mod:`.fight_map`), its reports (:mod:`.map_report`), the campaigns
(:mod:`.campaigns`) and the ablations' flags (:mod:`.ablation`). It imports the library; the
library never imports it. A script run from this folder imports it as ``lab``; the tests put
this folder on the path (``tests/conftest.py``)."""
