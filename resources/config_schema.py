"""Dagster config derived from the core settings dataclasses, so that every setting is defined once.

A core dataclass (``ModelConfig``, ``GraphConfig``, ``SplitConfig``, ...) is the only definition of a setting:
its type, its default, its validation (``__post_init__``) and its description (the ``Args:`` section of the
class docstring). :func:`config_class` turns it into a Dagster ``Config`` (or, with ``base``, a
``ConfigurableResource``) with one field per dataclass field, so the launchpad shows every setting with its
description and default, and a field added to the dataclass shows up in Dagster config with no other edit.

How types map: ``tuple[X, ...]`` -> ``list[X]`` (a fixed-length tuple keeps its length); ``X | None`` stays
optional; a ``Literal`` stays a ``Literal`` (the launchpad offers and checks its values at launch); a nested
dataclass becomes a nested config section of its own; a default made by a factory that is not a dataclass (a
bundled model's path, found on the machine that runs) becomes ``None``, meaning "the library default".

:meth:`DerivedConfig.to_dataclass` converts back. The dataclass's own validation runs whenever the config is
built, so a value that passes the launchpad's type checks but not ``__post_init__`` (say ``hidden_dim`` not
divisible by ``num_heads``) fails the run as it starts, before any work, with the dataclass's message.

Settings that only say how an asset runs (threads, time budget, progress interval) are declared in the body of
a subclass; settings shared by several assets live in one resource (``graph_settings``, ``model_settings``).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
from collections.abc import Collection
from typing import Any, ClassVar, Literal, Union, get_args, get_origin, get_type_hints

import dagster as dg
from pydantic import Field, create_model, model_validator

_ARGS_HEADER = "Args:"
_ARG_LINE = re.compile(r"(\w+)(?:\s*\([^)]*\))?:\s*(.*)")
_ROLE = re.compile(r":[\w:]+:`(~?)([^`]+)`")
LIBRARY_DEFAULT_NOTE = "Unset (null): the library default."


def _plain(text: str) -> str:
    """Sphinx markup -> launchpad text: ``:class:`~a.B``` -> ```B```, double backticks -> single."""
    text = _ROLE.sub(lambda m: f"`{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}`", text)
    return text.replace("``", "`")


def arg_descriptions(cls: type) -> dict[str, str]:
    """``{argument: description}`` from the ``Args:`` section of ``cls``'s docstring (Google / PyG style).

    An entry is ``name: text`` at the section's indentation; deeper-indented lines continue it; a line indented
    less than the entries ends the section.

    Args:
        cls: the documented class.
    """
    lines = (cls.__doc__ and inspect.cleandoc(cls.__doc__) or "").splitlines()
    found: dict[str, list[str]] = {}
    if _ARGS_HEADER not in (line.strip() for line in lines):
        return {}
    start = [line.strip() for line in lines].index(_ARGS_HEADER) + 1
    header_indent = len(lines[start - 1]) - len(lines[start - 1].lstrip())
    indent, current = None, None
    for line in lines[start:]:
        if not line.strip():
            continue
        lead = len(line) - len(line.lstrip())
        indent = lead if indent is None else indent
        if lead < indent or (lead <= header_indent and indent > header_indent):
            break
        match = _ARG_LINE.fullmatch(line.strip()) if lead == indent else None
        if match:
            current = match.group(1)
            found[current] = [match.group(2)]
        elif current is not None and lead > indent:
            found[current].append(line.strip())
        else:
            break
    return {name: _plain(" ".join(parts).strip()) for name, parts in found.items()}


def summary(cls: type) -> str:
    """The docstring of ``cls`` before its ``Args:`` section (the config class's description)."""
    text = inspect.cleandoc(cls.__doc__ or "")
    return _plain(text.split(_ARGS_HEADER, 1)[0].strip())


def _split_excludes(exclude: Collection[str]) -> tuple[set[str], dict[str, set[str]]]:
    """``{"a", "b.c"}`` -> ``({"a"}, {"b": {"c"}})``: dotted names exclude fields of a nested dataclass."""
    top: set[str] = set()
    nested: dict[str, set[str]] = {}
    for name in exclude:
        head, _, rest = name.partition(".")
        if rest:
            nested.setdefault(head, set()).add(rest)
        else:
            top.add(head)
    return top, nested


def _to_config_value(value: Any) -> Any:
    """A dataclass value as Dagster config holds it (tuples -> lists)."""
    if isinstance(value, tuple):
        return [_to_config_value(v) for v in value]
    return value


def _to_core_value(value: Any) -> Any:
    """A config value as the dataclass holds it (lists -> tuples, nested sections -> dataclasses)."""
    if isinstance(value, DerivedConfig):
        return value.to_dataclass()
    if isinstance(value, list):
        return tuple(_to_core_value(v) for v in value)
    return value


def _config_type(tp: Any, where: str, nested_exclude: Collection[str], nested_default: Any) -> tuple[Any, dict]:
    """``(Dagster config type, extra pydantic Field arguments)`` of a dataclass field type."""
    origin, args = get_origin(tp), get_args(tp)
    if tp in (int, float, str, bool) or origin is Literal:
        return tp, {}
    if origin in (Union, types.UnionType) and len(args) == 2 and type(None) in args:
        inner, extra = _config_type(next(a for a in args if a is not type(None)), where, nested_exclude, None)
        return inner | None, extra
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        inner, _ = _config_type(args[0], where, (), None)
        # Dagster config has no list of enumerations: a Literal element is checked by the dataclass instead.
        return list[str if get_origin(inner) is Literal else inner], {}
    if origin is tuple and args and len(set(args)) == 1:
        inner, _ = _config_type(args[0], where, (), None)
        return list[inner], {"min_length": len(args), "max_length": len(args)}
    if dataclasses.is_dataclass(tp):
        own_defaults = None if nested_default is None or nested_default == tp() else nested_default
        return config_class(tp, exclude=nested_exclude, defaults=own_defaults), {}
    raise TypeError(f"{where}: no Dagster config type for {tp!r}")


class DerivedConfig:
    """What every class made by :func:`config_class` adds to its Dagster base: the way back to the dataclass.

    Attributes:
        core_dataclass: the dataclass the fields come from.
        core_fields: its fields present in this config (the others take their dataclass defaults or overrides).
        library_defaults: fields whose ``None`` means "the dataclass's own (factory) default".
    """

    core_dataclass: ClassVar[type]
    core_fields: ClassVar[tuple[str, ...]]
    library_defaults: ClassVar[frozenset[str]]

    def to_dataclass(self, **overrides: Any) -> Any:
        """The core dataclass holding this config's values, plus ``overrides`` (e.g. excluded fields).

        Args:
            **overrides: values of dataclass fields that this config does not carry (or replaces).
        """
        values = {}
        for name in self.core_fields:
            value = getattr(self, name)
            if value is None and name in self.library_defaults:
                continue
            values[name] = _to_core_value(value)
        return self.core_dataclass(**{**values, **overrides})

    @classmethod
    def from_dataclass(cls, value: Any, **extra: Any) -> DerivedConfig:
        """This config holding the values of the dataclass instance ``value``.

        Args:
            value: an instance of :attr:`core_dataclass`.
            **extra: values of fields declared in a subclass body (run behaviour).
        """
        fields = cls.model_fields  # type: ignore[attr-defined]
        values = {}
        for name in cls.core_fields:
            item = getattr(value, name)
            annotation = fields[name].annotation
            nested = next((a for a in (annotation, *get_args(annotation)) if isinstance(a, type)
                           and issubclass(a, DerivedConfig)), None)
            values[name] = nested.from_dataclass(item) if nested and item is not None else _to_config_value(item)
        return cls(**values, **extra)  # type: ignore[call-arg]


_CACHE: dict[tuple, type] = {}


def config_class(core: type, *, base: type = dg.Config, exclude: Collection[str] = (), defaults: Any = None,
                 name: str | None = None, validate: bool = True) -> type:
    """A Dagster config class with one documented field per field of the dataclass ``core``.

    Each field keeps the dataclass field's name, its default (tuples as lists) and its description from the
    ``Args:`` section of ``core``'s docstring; a field without one is an error, so every setting is documented.
    Subclass the result to add run-behaviour fields; convert back with :meth:`DerivedConfig.to_dataclass`.

    Args:
        core: the settings dataclass.
        base: ``dg.Config`` (run config of an asset) or ``dg.ConfigurableResource`` (a shared resource).
        exclude: fields left out because the asset sets them from elsewhere (another resource, the data);
            ``"section.field"`` leaves out a field of a nested dataclass.
        defaults: an instance of ``core`` whose values are the defaults (default: ``core()``'s).
        name: class name (default ``<core>Section``).
        validate: build the dataclass whenever the config is built, so its ``__post_init__`` rejects a bad value
            as the run starts; ``False`` when that check needs an excluded field (it then runs when the asset
            builds the dataclass with it).
    """
    key = (core, base, frozenset(exclude), defaults, name, validate)
    if key in _CACHE:
        return _CACHE[key]
    top, nested = _split_excludes(exclude)
    own = {f.name: f for f in dataclasses.fields(core)}
    unknown = (top | set(nested)) - set(own)
    if unknown:
        raise TypeError(f"{core.__name__} has no field(s) {', '.join(sorted(unknown))} to exclude")
    hints = get_type_hints(core)
    docs = arg_descriptions(core)
    definitions: dict[str, tuple[Any, Any]] = {}
    library_defaults = set()
    for name_, f in own.items():
        if name_ in top:
            continue
        where = f"{core.__name__}.{name_}"
        if not docs.get(name_):
            raise TypeError(f"{where} has no description in the Args: section of {core.__name__}'s docstring")
        if f.default is dataclasses.MISSING and not dataclasses.is_dataclass(f.default_factory):
            if f.default_factory is dataclasses.MISSING:
                raise TypeError(f"{where} has no default: a Dagster setting needs one")
            # A value found where the run happens (e.g. a bundled model's path), not a setting: None stands for it.
            tp, extra = _config_type(hints[name_], where, (), None)
            library_defaults.add(name_)
            definitions[name_] = (tp | None, Field(None, description=f"{docs[name_]} {LIBRARY_DEFAULT_NOTE}",
                                                   **extra))
            continue
        default = getattr(defaults, name_) if defaults is not None else (
            f.default if f.default is not dataclasses.MISSING else f.default_factory())
        is_nested = dataclasses.is_dataclass(default) and not isinstance(default, type)
        tp, extra = _config_type(hints[name_], where, nested.get(name_, ()), default if is_nested else None)
        if is_nested:
            field = Field(default_factory=tp, description=docs[name_])
        else:
            field = Field(_to_config_value(default), description=docs[name_], **extra)
        definitions[name_] = (tp, field)

    def _validate(self):
        try:
            self.to_dataclass()
        except (TypeError, ValueError) as exc:  # the dataclass's own message names the field
            raise ValueError(f"{core.__name__}: {exc}") from exc
        return self

    validators = {"_validate_with_dataclass": model_validator(mode="after")(_validate)} if validate else None
    cls = create_model(name or f"{core.__name__}Section", __base__=(base, DerivedConfig), __module__=__name__,
                       __validators__=validators, **definitions)
    cls.__doc__ = summary(core)
    cls.core_dataclass = core
    cls.core_fields = tuple(definitions)
    cls.library_defaults = frozenset(library_defaults)
    _CACHE[key] = cls
    return cls


def section(cls: type, description: str | None = None) -> Any:
    """A pydantic field holding the nested config section ``cls`` (a :func:`config_class` result) by default.

    Args:
        cls: the section's config class.
        description: shown in the launchpad (default: the class's description).
    """
    return Field(default_factory=cls, description=description or cls.__doc__)
