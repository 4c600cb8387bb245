"""The Dagster config is derived from the core settings dataclasses: every setting is defined (default,
validation, description) once, in its dataclass, and shows up in the launchpad unchanged."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import pydantic
import pytest

from resources.config_schema import LIBRARY_DEFAULT_NOTE, arg_descriptions, config_class
from spark_jobs.graph import GraphConfig


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
