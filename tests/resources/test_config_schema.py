"""The Dagster config is derived from the core settings dataclasses: every setting is defined (default,
validation, description) once, in its dataclass, and shows up in the launchpad unchanged."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Literal, get_args, get_origin

import dagster as dg
import pydantic
import pytest

from assets.content_embeddings import ContentEmbeddingConfig
from assets.evaluation import EvaluationConfig
from assets.ingestion import IngestionConfig
from assets.maintenance import MaintenanceConfig
from assets.model import TrainingConfig
from assets.publish import PublishConfig
from hir_pipeline.content_embeddings.config import EmbeddingConfig, FusionConfig
from hir_pipeline.definitions import MAINTENANCE_JOB, NIGHTLY_JOB, defs
from hir_pipeline.evaluation.baselines import ALSConfig, LightGCNConfig
from hir_pipeline.evaluation.runner import EvaluationSettings
from hir_pipeline.model.config import ModelConfig, TrainConfig
from hir_pipeline.publish.stable_ids import MatchConfig
from hir_pipeline.retrieval import HierarchicalSettings
from hir_pipeline.training.output_checks import OutputCheckConfig
from resources import GraphSettingsResource, ModelSettingsResource, SourceResource
from resources.config_schema import LIBRARY_DEFAULT_NOTE, DerivedConfig, arg_descriptions, config_class
from spark_jobs.evaluation.split import SplitConfig
from spark_jobs.graph import GraphConfig
from spark_jobs.ingestion.labels import IngestConfig
from spark_jobs.ingestion.sources.spec import SourceSpec
from spark_jobs.maintenance import MaintenanceSettings
from spark_jobs.publish import PublishSettings

#: Every core dataclass behind a Dagster config class: (Dagster class, path of the section holding it, the dataclass,
#: the fields deliberately left out because they are read from one other place). Written out here, not read from
#: the classes, so that dropping a setting from Dagster config fails this test.
DERIVED = [
    (GraphSettingsResource, (), GraphConfig, set()),
    (ModelSettingsResource, ("model",), ModelConfig, {"content_dim", "num_node_types", "degree_buckets", "max_dist"}),
    (ModelSettingsResource, ("train",), TrainConfig, {"checkpoint_dir", "resume", "keep_checkpoints"}),
    (EvaluationConfig, (), EvaluationSettings, set()),
    (EvaluationConfig, ("als",), ALSConfig, {"k", "seed"}),
    (EvaluationConfig, ("lightgcn",), LightGCNConfig, {"seed"}),
    (EvaluationConfig, ("hierarchical",), HierarchicalSettings, set()),
    (EvaluationConfig, ("split",), SplitConfig, {"funnel"}),
    (ContentEmbeddingConfig, (), EmbeddingConfig, set()),
    (ContentEmbeddingConfig, ("fusion",), FusionConfig, set()),
    (PublishConfig, (), PublishSettings, set()),
    (PublishConfig, ("match",), MatchConfig, set()),
    (IngestionConfig, (), IngestConfig, set()),
    (SourceResource, (), SourceSpec, set()),
    (TrainingConfig, ("output_checks",), OutputCheckConfig, set()),
    (MaintenanceConfig, (), MaintenanceSettings, set()),
]
#: Dagster config classes with no core settings of their own (run behaviour only).
RUN_BEHAVIOUR_ONLY: set[type] = set()


def _section(cls: type, path: tuple[str, ...]) -> type:
    for name in path:
        cls = cls.model_fields[name].annotation
    return cls


def _default(info: pydantic.fields.FieldInfo):
    return info.default_factory() if info.default_factory is not None else info.default


def _as_core(value):
    return tuple(_as_core(v) for v in value) if isinstance(value, list) else value


@pytest.mark.parametrize(("dagster_cls", "path", "core", "excluded"), DERIVED,
                         ids=[f"{d.__name__}{''.join('.' + p for p in path)}" for d, path, _, _ in DERIVED])
def test_every_core_setting_is_in_the_dagster_config_with_its_default_and_description(dagster_cls, path, core,
                                                                                      excluded):
    section = _section(dagster_cls, path)
    assert issubclass(section, DerivedConfig) and section.core_dataclass is core
    core_fields = {f.name: f for f in dataclasses.fields(core)}
    missing = set(core_fields) - excluded - set(section.model_fields)
    assert not missing, f"{core.__name__} settings missing from {dagster_cls.__name__}: {sorted(missing)}"
    assert set(section.core_fields) == set(core_fields) - excluded
    docs = arg_descriptions(core)
    hints = {f.name: f.type for f in dataclasses.fields(core)}
    for name in section.core_fields:
        f, info = core_fields[name], section.model_fields[name]
        assert docs.get(name), f"{core.__name__}.{name} is undocumented"
        assert info.description in (docs[name], f"{docs[name]} {LIBRARY_DEFAULT_NOTE}"), f"{name}: other description"
        default = _default(info)
        if isinstance(default, DerivedConfig):  # a nested section: its defaults are the nested dataclass's
            assert default.to_dataclass() == f.default_factory(), name
        elif name in section.library_defaults:  # a value found at run time (a bundled model's path)
            assert default is None and f.default is dataclasses.MISSING, name
        else:
            assert _as_core(default) == f.default, f"{core.__name__}.{name}: default {default!r} != {f.default!r}"
        if "Literal" in str(hints[name]) and "tuple" not in str(hints[name]):  # offered and checked at launch
            assert get_origin(info.annotation) is Literal or Literal in map(get_origin, get_args(info.annotation))
    # the whole section converts back to the dataclass's defaults
    assert section().to_dataclass() == core()
    # run-behaviour fields declared in the body are documented too
    for name, info in dagster_cls.model_fields.items():
        assert info.description, f"{dagster_cls.__name__}.{name} is undocumented"


def _derived_sections(cls: type, path: tuple[str, ...] = ()) -> set[tuple[type, tuple[str, ...]]]:
    found = set()
    if issubclass(cls, DerivedConfig):
        found.add((cls.core_dataclass, path))
    for name, info in getattr(cls, "model_fields", {}).items():
        for tp in (info.annotation, *get_args(info.annotation)):
            if isinstance(tp, type) and issubclass(tp, dg.Config):
                found |= _derived_sections(tp, (*path, name))
    return found


def test_the_table_above_covers_every_config_class_of_the_pipeline():
    """Every op config and resource of the nightly and maintenance jobs is either listed in :data:`DERIVED` (with
    every core dataclass it holds) or run behaviour only, so the test above checks every derived config class."""
    classes = {type(r) for r in defs.resources.values() if isinstance(r, dg.ConfigurableResource)}
    for job in (defs.resolve_job_def(NIGHTLY_JOB), defs.resolve_job_def(MAINTENANCE_JOB)):
        for node in job.graph.node_dict.values():
            fn = node.definition.compute_fn.decorated_fn
            config = inspect.signature(fn).parameters.get("config")
            if config is not None:
                classes.add(config.annotation)
    listed = {d for d, _, _, _ in DERIVED}
    for cls in classes:
        sections = _derived_sections(cls)
        if cls in listed:
            assert sections == {(c, p) for d, p, c, _ in DERIVED if d is cls}, cls
        else:
            assert not sections, f"{cls.__name__} holds derived settings {sections}: add it to DERIVED"
    assert listed | RUN_BEHAVIOUR_ONLY <= classes


@dataclass(frozen=True)
class _Inner:
    """Inner settings.

    Args:
        depth: how deep.
        seed: a seed.
    """

    depth: int = 2
    seed: int = 0


@dataclass(frozen=True)
class _Settings:
    """Settings of a test.

    Args:
        width: how wide; must be even.
        sizes: one size per level,
            coarsest first.
        mode: ``"fast"`` or ``"exact"`` (see :class:`~somewhere.Mode`).
        mean: a fixed-length triple.
        path: a path found at run time.
        inner: nested settings.
    """

    width: int = 4
    sizes: tuple[int, ...] = (1, 2)
    mode: Literal["fast", "exact"] = "fast"
    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    path: str = field(default_factory=lambda: "/found/at/run/time")
    inner: _Inner = field(default_factory=_Inner)

    def __post_init__(self) -> None:
        if self.width % 2:
            raise ValueError(f"width must be even, got {self.width}")


def test_docstring_args_become_descriptions():
    assert arg_descriptions(_Settings) == {
        "width": "how wide; must be even.",
        "sizes": "one size per level, coarsest first.",
        "mode": '`"fast"` or `"exact"` (see `Mode`).',
        "mean": "a fixed-length triple.",
        "path": "a path found at run time.",
        "inner": "nested settings.",
    }
    assert arg_descriptions(GraphConfig)["seed"].startswith("seed of every sampling decision")


def test_a_derived_config_maps_types_defaults_and_validation_and_converts_back():
    derived = config_class(_Settings, exclude=("inner.seed",))
    fields = derived.model_fields
    assert fields["sizes"].annotation == list[int] and fields["sizes"].default == [1, 2]
    assert fields["mode"].annotation == Literal["fast", "exact"]
    assert fields["path"].default is None and fields["path"].description.endswith(LIBRARY_DEFAULT_NOTE)
    assert set(fields["inner"].annotation.model_fields) == {"depth"}
    assert derived().to_dataclass() == _Settings()
    custom = derived(width=6, sizes=[3], inner={"depth": 5}, path="/p")
    assert custom.to_dataclass() == _Settings(width=6, sizes=(3,), inner=_Inner(depth=5), path="/p")
    assert derived.from_dataclass(custom.to_dataclass()).to_dataclass() == custom.to_dataclass()
    with pytest.raises(pydantic.ValidationError, match="_Settings: width must be even, got 5"):
        derived(width=5)
    with pytest.raises(pydantic.ValidationError, match="mean"):
        derived(mean=[0.1, 0.2])

    class RunConfig(derived):
        """Settings plus how the test runs."""

        verbose: bool = pydantic.Field(False, description="talk more")

    assert RunConfig(verbose=True, width=8).to_dataclass() == _Settings(width=8)  # body fields are not core


def test_a_field_added_to_the_dataclass_appears_without_an_edit():
    @dataclass(frozen=True)
    class Grown(_Settings):
        """Settings of a test, one field more.

        Args:
            width: how wide; must be even.
            sizes: one size per level.
            mode: the mode.
            mean: a triple.
            path: a path.
            inner: nested settings.
            temperature: the new setting.
        """

        temperature: float = 0.5

    derived = config_class(Grown)
    assert derived.model_fields["temperature"].default == 0.5
    assert derived.model_fields["temperature"].description == "the new setting."
    assert derived(temperature=0.1).to_dataclass().temperature == 0.1


def test_an_undocumented_setting_is_refused():
    @dataclass(frozen=True)
    class Undocumented:
        """Args:
        a: documented.
        """

        a: int = 1
        b: int = 2

    with pytest.raises(TypeError, match="Undocumented.b has no description"):
        config_class(Undocumented)


def test_bad_values_fail_at_launch_or_as_the_run_starts_naming_the_field():
    job = defs.resolve_job_def(NIGHTLY_JOB)
    for run_config, name in (
        ({"resources": {"model_settings": {"config": {"model": {"attention_backend": "fast"}}}}}, "attention_backend"),
        ({"resources": {"model_settings": {"config": {"train": {"published_encoder": "ema"}}}}}, "published_encoder"),
        ({"ops": {"content_embeddings": {"config": {"precision": "fp8"}}}}, "precision"),
        ({"resources": {"graph_settings": {"config": {"max_dist": "far"}}}}, "max_dist"),
    ):
        with pytest.raises(dg.DagsterInvalidConfigError, match=name):
            dg.validate_run_config(job, run_config)
    # what only the dataclass can check fails when the config is built, with the dataclass's message
    with pytest.raises(pydantic.ValidationError, match="ModelConfig: hidden_dim must be divisible by num_heads"):
        ModelSettingsResource(model={"hidden_dim": 10, "num_heads": 4})
    with pytest.raises(pydantic.ValidationError, match="unknown baseline 'bpr' in baselines"):
        EvaluationConfig(baselines=["popularity", "bpr"])
    with pytest.raises(pydantic.ValidationError, match="max_dist must be in 1..126"):
        GraphSettingsResource(max_dist=200)


def test_settings_that_must_agree_are_read_from_one_place():
    """The model's max_dist is the graph's; the split's funnel is the graph's; neither is a setting of its own."""
    graph = GraphSettingsResource(max_dist=2, funnel=["view", "buy"], stage_weights=[1.0, 5.0]).graph_config()
    assert ModelSettingsResource().model_config_for(graph).max_dist == 2
    split = EvaluationConfig(split={"target_stage": "buy"}).split.to_dataclass(funnel=graph.funnel)
    assert split.funnel == ("view", "buy") and split.deepest == "buy"
    for cls, name in ((ModelSettingsResource, "max_dist"), (EvaluationConfig, "stage_weights"),
                      (TrainingConfig, "funnel"), (IngestionConfig, "funnel"), (EvaluationConfig, "training")):
        assert name not in cls.model_fields
    assert "max_dist" not in ModelSettingsResource.model_fields["model"].annotation.model_fields
    assert "funnel" not in EvaluationConfig.model_fields["split"].annotation.model_fields
