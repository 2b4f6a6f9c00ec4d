"""How a search compares points and reads its winner: the seeds (initialisations) and the data
order that choose, and the held-out runs that read the winner on initialisations *and* data
orders that no selection saw."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch_mars.train.study.engine import RunId


class Needs(Exception):
    """Raised inside a replay where a decision needs runs that have not finished;
    ``prunable``: they are trials' runs (scored to compare points, never a finalist's,
    a peer's or a held-out read), which a study that prunes may stop early."""

    def __init__(self, runs: list[RunId], prunable: bool = False) -> None:
        super().__init__(f"{len(runs)} runs needed")
        self.runs = runs
        self.prunable = prunable


def need(results: Mapping[RunId, float], wanted: Sequence[RunId], prunable: bool = False) -> None:
    """Raise :class:`Needs` with the runs of ``wanted`` that have not finished."""
    missing = [run for run in dict.fromkeys(wanted) if run not in results]
    if missing:
        raise Needs(missing, prunable)


def badness(value: float) -> float:
    """A final metric as a search ranks it (lower is better): a diverged run (NaN) is worst."""
    return math.inf if math.isnan(value) else value


def _distinct(name: str, values: Sequence[int]) -> None:
    if len(set(values)) != len(values):
        raise ValueError(f"{name} {list(values)}: a seed is named twice")
    if any(v < 0 for v in values):
        raise ValueError(f"{name} {list(values)}: seeds are >= 0")


@dataclass(frozen=True)
class Selection:
    """``seeds`` choose, on the data order ``data_seed``; the ``finalists`` best points of a
    search are then read on ``final_seeds`` too (on ``data_seed``, or with
    ``final_data_seeds`` the i-th final seed on the i-th of those data orders), and the best
    mean over all those runs wins: a second look that a point which ranked first on three
    seeds, or on one data order, by luck does not survive; the winner is read on every pair
    of ``heldout`` seeds and ``heldout_data_seeds`` (new initialisations and new data
    orders), or, with ``pairs``, on independent pairs: each ``(seed, data order)`` its own
    seed and its own order, none shared with another pair or with the selection (the verdict's
    design, docs/harness.md: a paired t on n - 1 degrees of freedom). With ``peer_winners``
    each search's winner is its best-known setting: every peer's winner (a study's optimizer
    with its dimensions but for gamma) moved onto its space is read on its choosing runs too,
    and the best mean over them all wins (the strongest known opponent, docs/harness.md). With
    ``stable_winners`` a candidate with a diverged run among its choosing runs (not finite, or
    more than :data:`~.pairs.DIVERGED_ABOVE_MEDIAN` above their median) ranks after every one
    without: a setting that fails one run in a few is no recommendation, whatever its mean.
    ``pairs_read`` names the optimizers that read only the first ``n`` of the ``pairs``
    (``(optimizer, n)``; every other reads them all): a second look trains only the two sides of
    the comparisons it looks at again (docs/harness.md)."""

    seeds: tuple[int, ...] = (0, 1, 2)
    heldout: tuple[int, ...] = (3, 4, 5)
    data_seed: int = 0
    heldout_data_seeds: tuple[int, ...] = (1, 2)
    finalists: int = 0
    final_seeds: tuple[int, ...] = ()
    final_data_seeds: tuple[int, ...] = ()
    pairs: tuple[tuple[int, int], ...] = ()
    peer_winners: bool = False
    stable_winners: bool = False
    pairs_read: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("selection needs at least one seed")
        if self.pairs:
            self._check_pairs()
        self._check_pairs_read()
        _distinct("--seeds", self.seeds)
        _distinct("--heldout-seeds", self.heldout)
        _distinct("--heldout-data-seeds", self.heldout_data_seeds)
        if set(self.seeds) & set(self.heldout):
            raise ValueError(
                f"held-out seeds {self.heldout} must differ from selection seeds {self.seeds}"
            )
        if self.data_seed in self.heldout_data_seeds:
            raise ValueError(
                f"held-out data seeds {self.heldout_data_seeds} must differ from the selection's "
                f"data seed {self.data_seed}"
            )
        _distinct("--final-seeds", self.final_seeds)
        if self.finalists < 0:
            raise ValueError(f"--finalists must be >= 0, got {self.finalists}")
        if bool(self.finalists) != bool(self.final_seeds):
            raise ValueError(
                f"--finalists {self.finalists} with --final-seeds {list(self.final_seeds)}: "
                "finalists need final seeds to be read on, and final seeds need finalists"
            )
        if set(self.final_seeds) & (set(self.seeds) | set(self.heldout)):
            raise ValueError(
                f"final seeds {self.final_seeds} must differ from selection seeds {self.seeds} "
                f"and held-out seeds {self.heldout}"
            )
        if self.final_data_seeds and len(self.final_data_seeds) != len(self.final_seeds):
            raise ValueError(
                f"--final-data-seeds {list(self.final_data_seeds)}: one data order per final "
                f"seed {list(self.final_seeds)}"
            )
        if any(d < 0 for d in self.final_data_seeds):
            raise ValueError(f"--final-data-seeds {list(self.final_data_seeds)}: orders are >= 0")
        if set(self.final_data_seeds) & set(self.heldout_data_seeds):
            raise ValueError(
                f"final data seeds {self.final_data_seeds} must differ from the held-out data "
                f"seeds {self.heldout_data_seeds}"
            )

    def _check_pairs(self) -> None:
        """Independent pairs: each its own seed and data order, none the selection's."""
        if self.heldout or self.heldout_data_seeds:
            raise ValueError(
                "pairs replace the crossed held-out seeds and data orders: give no "
                f"heldout seeds ({list(self.heldout)}) or data orders "
                f"({list(self.heldout_data_seeds)}) beside them"
            )
        seeds = [s for s, _ in self.pairs]
        orders = [o for _, o in self.pairs]
        _distinct("pairs' seeds", seeds)
        _distinct("pairs' data orders", orders)
        chosen = set(self.seeds) | set(self.final_seeds)
        if chosen & set(seeds):
            raise ValueError(
                f"pairs' seeds {sorted(chosen & set(seeds))} are selection or final seeds: a "
                "pair is unseen by selection"
            )
        orders_chosen = {self.data_seed, *self.final_data_seeds}
        if orders_chosen & set(orders):
            raise ValueError(
                f"pairs' data orders {sorted(orders_chosen & set(orders))} are the selection's "
                "or the finalists': a pair is unseen by selection"
            )

    def _check_pairs_read(self) -> None:
        names = [name for name, _ in self.pairs_read]
        if len(set(names)) != len(names):
            raise ValueError(f"--pairs-read {list(self.pairs_read)}: an optimizer is named twice")
        for name, count in self.pairs_read:
            if not 2 <= count <= len(self.pairs):
                raise ValueError(
                    f"--pairs-read {name}={count}: an optimizer reads 2 to {len(self.pairs)} of "
                    "the --pairs (their first n; a paired t needs two)"
                )

    @property
    def read_seeds(self) -> tuple[int, ...]:
        """The seeds the winners are read on: the held-out seeds, or the pairs'."""
        return tuple(s for s, _ in self.pairs) if self.pairs else self.heldout

    def heldout_text(self) -> str:
        """How the winners are read, in the words of every report."""
        if self.pairs:
            fewer = "".join(f"; {name} their first {n}" for name, n in self.pairs_read)
            return f"{len(self.pairs)} independent pairs (seed:order {self.pairs_text()}{fewer})"
        return f"{list(self.heldout)} x data orders {list(self.heldout_data_seeds)}"

    def pairs_text(self) -> str:
        return " ".join(f"{s}:{o}" for s, o in self.pairs)

    @property
    def choosing_seeds(self) -> tuple[int, ...]:
        """Every seed a winner is chosen on: the selection's, then the finalists'."""
        return self.seeds + self.final_seeds

    def selection_pairs(self) -> list[tuple[int, int]]:
        """The ``(seed, data seed)`` runs every trial is scored on."""
        return [(s, self.data_seed) for s in self.seeds]

    def final_pairs(self) -> list[tuple[int, int]]:
        """The finalists' extra ``(seed, data seed)`` runs."""
        orders = self.final_data_seeds or (self.data_seed,) * len(self.final_seeds)
        return list(zip(self.final_seeds, orders, strict=True))

    def choosing_pairs(self) -> list[tuple[int, int]]:
        """Every ``(seed, data seed)`` run a winner is chosen on: the selection's, then the
        finalists'."""
        return self.selection_pairs() + self.final_pairs()

    def final_orders_text(self) -> str:
        """Where the finalists read other data orders than the selection's, which (the words
        every report and announcement uses); empty where they read the selection's."""
        if not self.final_data_seeds:
            return ""
        return f" (finalists' seeds on data orders {','.join(map(str, self.final_data_seeds))})"

    def record(self) -> dict[str, Any]:
        """The selection as a study stores it (:meth:`of_record` reads it back); without
        ``final_data_seeds`` where the finalists read the selection's data order, so that the
        record of a study run before that field existed is the record it has now."""
        record = dataclasses.asdict(self)
        if not self.final_data_seeds:
            del record["final_data_seeds"]
        if not self.pairs:
            del record["pairs"]
        if not self.peer_winners:
            del record["peer_winners"]
        if not self.stable_winners:
            del record["stable_winners"]
        if not self.pairs_read:
            del record["pairs_read"]
        return record

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> Selection:
        """The selection a study's stored record describes (fields it lacks take the field
        defaults, the protocol of the studies that lacked them; ``screen_top``, a field of an
        earlier search, is dropped)."""
        fields = {f.name for f in dataclasses.fields(cls)}
        values = {
            k: tuple(v) if isinstance(v, list) else v for k, v in record.items() if k in fields
        }
        for name in ("pairs", "pairs_read"):
            if name in values:
                values[name] = tuple(tuple(p) for p in values[name])
        return cls(**values)

    def heldout_pairs(self, optimizer: str | None = None) -> list[tuple[int, int]]:
        """The held-out ``(seed, data seed)`` pairs ``optimizer``'s winner is read on (None:
        every pair any optimizer reads): the independent ``pairs`` (its first n where
        ``pairs_read`` names it), or every held-out seed crossed with every held-out data
        order, data orders outer."""
        if self.pairs:
            return list(self.pairs[: dict(self.pairs_read).get(optimizer, len(self.pairs))])
        return [(s, d) for d in self.heldout_data_seeds for s in self.heldout]

    def need_heldout(
        self,
        results: Mapping[RunId, float],
        run_of: Callable[..., RunId],
        point: Any,
        optimizer: str,
    ) -> None:
        need(results, [run_of(point, s, d) for s, d in self.heldout_pairs(optimizer)])


def protocol_selection(
    seeds: Sequence[int] | None = None,
    heldout: Sequence[int] | None = None,
    data_seed: int = 0,
    heldout_data_seeds: Sequence[int] | None = None,
    finalists: int | None = None,
    final_seeds: Sequence[int] | None = None,
    final_data_seeds: Sequence[int] = (),
    pairs: Sequence[tuple[int, int]] = (),
    peer_winners: bool | None = None,
    stable_winners: bool | None = None,
    pairs_read: Sequence[tuple[str, int]] = (),
) -> Selection:
    """:data:`PROTOCOL` with what a caller gave in place of its defaults. Without
    ``final_seeds`` the finalists are read on as many seeds as the protocol's, the smallest
    that neither choose nor are held out (1 2 by default; 2 3 beside ``seeds=(0,)`` and
    ``heldout=(1,)``), and none with ``finalists=0``. With ``pairs`` (independent
    ``(seed, data order)`` pairs) the crossed held-out seeds and data orders are none;
    ``peer_winners`` (None: the protocol's) reads each search's peers' winners on its space;
    ``stable_winners`` (None: the protocol's) ranks a candidate with a diverged run last;
    ``pairs_read`` (``(optimizer, n)``) the optimizers that read only the first n pairs."""
    pairs = tuple((int(s), int(o)) for s, o in pairs)
    if pairs:
        if heldout or heldout_data_seeds:
            raise ValueError(
                "pairs replace the held-out seeds and data orders: give one or the other"
            )
        heldout, heldout_data_seeds = (), ()
    seeds = PROTOCOL.seeds if seeds is None else tuple(seeds)
    heldout = PROTOCOL.heldout if heldout is None else tuple(heldout)
    finalists = PROTOCOL.finalists if finalists is None else finalists
    if final_seeds is None:
        taken = set(seeds) | set(heldout)
        free = (s for s in range(len(taken) + len(PROTOCOL.final_seeds) + 1) if s not in taken)
        final_seeds = tuple(next(free) for _ in PROTOCOL.final_seeds) if finalists else ()
    return Selection(
        seeds=seeds,
        heldout=heldout,
        data_seed=data_seed,
        heldout_data_seeds=PROTOCOL.heldout_data_seeds
        if heldout_data_seeds is None
        else tuple(heldout_data_seeds),
        finalists=finalists,
        final_seeds=tuple(final_seeds),
        final_data_seeds=tuple(final_data_seeds),
        pairs=pairs,
        peer_winners=PROTOCOL.peer_winners if peer_winners is None else peer_winners,
        stable_winners=PROTOCOL.stable_winners if stable_winners is None else stable_winners,
        pairs_read=tuple((str(name), int(n)) for name, n in pairs_read),
    )


# The protocol of ``torch-mars tune`` and ``torch_mars.tune`` unless told, declared once: one
# selection seed a trial (the noise is paid where it decides), each search's 4 best points
# re-read on two more seeds, each winner read on 4 seeds x 3 data orders, 12 crossed pairs no
# selection saw; each winner the best-known setting of its search and its peers' winners, a
# candidate with a diverged run on its choosing runs ranked last. (The
# field defaults above are the protocol of the studies before it, which
# a stored record that lacks a field was run under.)
PROTOCOL = Selection(
    seeds=(0,),
    heldout=(3, 4, 5, 6),
    heldout_data_seeds=(1, 2, 3),
    finalists=4,
    final_seeds=(1, 2),
    peer_winners=True,
    stable_winners=True,
)
