"""The evaluation split of the nightly run: temporal per-user hold-out, deep-funnel targets, cold items.

* **Cold start.** A seeded ``cold_item_fraction`` of the items (entities with any event up to the run date)
  is chosen by the rank of ``xxhash64(seed, entity_id)``, so the choice depends only on the seed and the item
  set, never on partitioning. Every event on a cold item is withheld from training; the entities and relations
  of those items stay, so a model can still place them from content and catalogue structure.
* **Temporal hold-out.** Per user, the remaining events are ordered by time (ties: funnel stage, entity, event
  id) and the last ``floor(n * holdout_fraction)`` of them are held out; everything before trains.
* **Deep-funnel targets.** A target is a (user, item) pair whose held-out events reach the target stage (the
  deepest funnel stage by default, e.g. ``conversion``) and that the user never touched in training (rankers
  exclude training items, so such a pair could never be hit). When fewer than ``min_target_users`` users have a
  target at that stage the split falls back one stage shallower, and says so in :attr:`EvaluationSplit.note`.
  Cold targets are the pairs reaching the same stage on cold items (any time: their events never train).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from hir_pipeline.contracts import DEFAULT_FUNNEL, EVENT_DATE_COLUMN

WARM, COLD = "warm", "cold"


@dataclass(frozen=True)
class SplitConfig:
    """How the evaluation split is drawn.

    Args:
        holdout_fraction: share of each user's (warm-item) events held out, the latest ones.
        cold_item_fraction: share of items whose events are all withheld from training.
        funnel: event types, shallow to deep (``contracts.DEFAULT_FUNNEL``); the pipeline uses the graph's.
        target_stage: funnel stage a target must reach; ``None`` = the deepest stage of ``funnel``.
        min_target_users: fewest users with a warm target at a stage before falling back one stage shallower.
        seed: seed of the cold-item choice.
    """

    holdout_fraction: float = 0.2
    cold_item_fraction: float = 0.1
    funnel: tuple[str, ...] = DEFAULT_FUNNEL
    target_stage: str | None = None
    min_target_users: int = 50
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError("holdout_fraction must be in (0, 1)")
        if not 0.0 <= self.cold_item_fraction < 1.0:
            raise ValueError("cold_item_fraction must be in [0, 1)")
        if self.target_stage is not None and self.target_stage not in self.funnel:
            raise ValueError(f"target_stage {self.target_stage!r} is not in the funnel {self.funnel}")

    @property
    def deepest(self) -> str:
        return self.target_stage or self.funnel[-1]


@dataclass
class EvaluationSplit:
    """Args:
    train_events: the events a model may train on (same columns as the input events).
    targets: ``user_id, entity_id, split`` (``warm`` | ``cold``): distinct target pairs.
    cold_items: ``entity_id`` of every cold item.
    target_stage: the funnel stage targets reach.
    note: how the target stage was chosen (mentions a fallback when there was one).
    users_per_stage: users with a warm target at each stage (the fallback's evidence).
    """

    train_events: DataFrame
    targets: DataFrame
    cold_items: DataFrame
    target_stage: str
    note: str
    users_per_stage: dict[str, int] = field(default_factory=dict)


def _stage(funnel: tuple[str, ...]):
    """1-based funnel position of ``event_type`` (0 when unknown)."""
    return F.coalesce(F.array_position(F.array(*[F.lit(s) for s in funnel]), F.col("event_type")).cast("int"),
                      F.lit(0))


def choose_cold_items(events: DataFrame, fraction: float, seed: int) -> DataFrame:
    """``entity_id`` of the ``ceil(fraction * n_items)`` items with the smallest ``xxhash64(seed, entity_id)``.

    Args:
        events: events (their distinct ``entity_id`` are the items).
        fraction: share of items to choose.
        seed: seed of the hash.
    """
    items = events.select("entity_id").distinct()
    ranked = items.select("entity_id", F.xxhash64(F.lit(seed), F.col("entity_id")).alias("_h"),
                          F.count(F.lit(1)).over(Window.partitionBy()).alias("_n"))
    # one global window over the distinct items: a few million short strings at most
    ranked = ranked.withColumn("_r", F.row_number().over(Window.orderBy("_h", "entity_id")))
    return ranked.where(F.col("_r") <= F.ceil(F.col("_n") * F.lit(float(fraction)))).select("entity_id")


def split_events(events: DataFrame, run_date: dt.date, config: SplitConfig | None = None) -> EvaluationSplit:
    """Split the events up to ``run_date`` into training events and held-out warm / cold targets.

    Args:
        events: bronze events (``user_id, entity_id, event_type, event_ts``, optionally ``event_date`` and
            ``event_id``).
        run_date: events after this date are ignored.
        config: split settings.

    Returns:
        An :class:`EvaluationSplit`; computing the target-stage fallback runs one small Spark job.
    """
    c = config or SplitConfig()
    day = F.col(EVENT_DATE_COLUMN) if EVENT_DATE_COLUMN in events.columns else F.to_date("event_ts")
    ev = events.where(day <= F.lit(run_date)).withColumn("_stage", _stage(c.funnel)).where(F.col("_stage") > 0)
    cold = choose_cold_items(ev, c.cold_item_fraction, c.seed).persist()
    warm_ev = ev.join(F.broadcast(cold), "entity_id", "left_anti")

    tie = F.col("event_id") if "event_id" in events.columns else F.lit(None).cast("string")
    by_user = Window.partitionBy("user_id")
    ordered = Window.partitionBy("user_id").orderBy("event_ts", "_stage", "entity_id", tie)
    marked = warm_ev.select(
        "*",
        F.row_number().over(ordered).alias("_rank"),
        F.count(F.lit(1)).over(by_user).alias("_n"),
    ).withColumn("_held", F.col("_rank") > F.col("_n") - F.floor(F.col("_n") * F.lit(float(c.holdout_fraction))))
    marked = marked.persist()
    train = marked.where(~F.col("_held")).drop("_stage", "_rank", "_n", "_held")

    train_pairs = train.select("user_id", "entity_id").distinct()
    held_pairs = (marked.where("_held").groupBy("user_id", "entity_id").agg(F.max("_stage").alias("_deepest"))
                  .join(train_pairs, ["user_id", "entity_id"], "left_anti").persist())
    user_deepest = held_pairs.groupBy("user_id").agg(F.max("_deepest").alias("_d"))
    per_stage = {int(r["_d"]): int(r["count"]) for r in user_deepest.groupBy("_d").count().collect()}
    users_per_stage = {s: sum(n for d, n in per_stage.items() if d >= i + 1) for i, s in enumerate(c.funnel)}

    wanted = c.funnel.index(c.deepest) + 1
    stage = wanted
    while stage > 1 and users_per_stage[c.funnel[stage - 1]] < c.min_target_users:
        stage -= 1
    name = c.funnel[stage - 1]
    if stage == wanted:
        note = f"targets: {name} ({users_per_stage[name]} users with a held-out {name})"
    else:
        note = (f"only {users_per_stage[c.deepest]} users have a held-out {c.deepest} (< {c.min_target_users}); "
                f"fell back to {name} ({users_per_stage[name]} users)")

    warm_t = held_pairs.where(F.col("_deepest") >= stage).select("user_id", "entity_id", F.lit(WARM).alias("split"))
    cold_t = (ev.join(F.broadcast(cold), "entity_id").where(F.col("_stage") >= stage)
              .select("user_id", "entity_id").distinct().select("user_id", "entity_id", F.lit(COLD).alias("split")))
    return EvaluationSplit(train, warm_t.unionByName(cold_t), cold, name, note, users_per_stage)
