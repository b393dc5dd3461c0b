"""Settings declared once, as dataclass fields: CLI flags, TOML keys and checks are derived from them.

A settings class is a frozen dataclass whose fields are made with :func:`setting`: a default, a help
line, and what a valid value is (a minimum, choices). From the class alone wetqa derives

- the command-line flags (:func:`add_arguments`: ``--max-tokens`` for ``max_tokens``, typed and
  range-checked, default ``None`` so that "not given" can be told from "given the default");
- the keys a TOML table may hold, and the check of their values (:func:`coerce`);
- which settings change a result (``output=True``), so run folders record exactly those.

So adding a setting is one line in one file (vLLM's ``cli_args.py`` does the same from its engine
arguments "to keep the argument definitions in one place").
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


class SettingError(ValueError):
    """A setting with a value of the wrong type or out of range; the message names the setting."""


def setting(
    default: Any = dataclasses.MISSING,
    help: str = "",
    *,
    minimum: float | None = None,
    above: float | None = None,
    maximum: float | None = None,
    choices: Sequence[str] | None = None,
    output: bool = False,
    flag: str | None = None,
    metavar: str | None = None,
    cli: bool = True,
    invalid: str | None = None,
    split: str | None = None,
) -> Any:
    """A dataclass field with what wetqa needs to expose it.

    ``minimum``/``maximum`` bound the value inclusively, ``above`` exclusively; ``output`` marks a
    setting that changes what is produced (recorded with runs); ``flag`` replaces the derived
    ``--name``; ``cli=False`` keeps it out of the command line (a TOML-only setting); ``split`` (a tuple of
    texts) splits every value given at it, so ``--kind wet,AMvB``, ``--kind wet --kind AMvB`` and
    ``kind = "wet,AMvB"`` are one list (left out where a value may hold it: paths, model ids).
    """
    meta = {
        "help": help,
        "minimum": minimum,
        "above": above,
        "maximum": maximum,
        "choices": tuple(choices) if choices else None,
        "output": output,
        "flag": flag,
        "metavar": metavar,
        "cli": cli,
        "invalid": invalid,
        "split": split,
    }
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple (immutable) as a setting's default")
    return field(default=default, metadata={"wetqa": meta})


@dataclass(frozen=True, slots=True)
class SettingInfo:
    name: str
    kind: type  # int, float, str, bool, or tuple (of ``item``)
    optional: bool  # None is a valid value
    default: Any
    help: str
    minimum: float | None
    above: float | None
    maximum: float | None
    choices: tuple[str, ...] | None
    output: bool
    flag: str
    metavar: str | None
    cli: bool
    invalid: str | None = None  # the complaint about an out-of-range value, when the derived one reads badly
    item: type | None = None  # the element type of a tuple setting
    split: str | None = None  # a tuple of texts: each value given is a list split at this ("wet,AMvB")

    @property
    def key(self) -> str:
        """The TOML key: the field name."""
        return self.name


def _unwrap(annotation: Any) -> tuple[type, bool, type | None]:
    """(base type, optional, tuple element type) of ``int``, ``float | None``, ``tuple[str, ...]``..."""
    optional = False
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        if len(args) != 1:
            raise TypeError(f"a setting has one type (and maybe None), not {annotation}")
        annotation = args[0]
        origin = typing.get_origin(annotation)
    if origin is tuple:
        item = typing.get_args(annotation)[0]
        return tuple, optional, item
    if annotation not in (int, float, str, bool):
        raise TypeError(f"unsupported setting type {annotation}")
    return annotation, optional, None


_SETTINGS: dict[type, tuple[SettingInfo, ...]] = {}


def flag_of(name: str) -> str:
    """The command-line flag of a setting: ``--max-tokens`` for ``max_tokens``."""
    return "--" + name.replace("_", "-")


def settings_of(cls: type) -> tuple[SettingInfo, ...]:
    """The settings of a settings dataclass, in field order (read once per class)."""
    if cls not in _SETTINGS:
        _SETTINGS[cls] = _read_settings(cls)
    return _SETTINGS[cls]


def _read_settings(cls: type) -> tuple[SettingInfo, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("wetqa")
        if meta is None:
            continue
        kind, optional, item = _unwrap(hints[f.name])
        out.append(
            SettingInfo(
                name=f.name,
                kind=kind,
                optional=optional,
                default=f.default,
                help=meta["help"],
                minimum=meta["minimum"],
                above=meta["above"],
                maximum=meta["maximum"],
                choices=meta["choices"],
                output=meta["output"],
                flag=meta["flag"] or flag_of(f.name),
                metavar=meta["metavar"],
                cli=meta["cli"],
                invalid=meta.get("invalid"),
                item=item,
                split=meta.get("split"),
            )
        )
    return tuple(out)


def _describe_range(info: SettingInfo) -> str:
    parts = []
    if info.minimum is not None:
        parts.append(f">= {info.minimum:g}")
    if info.above is not None:
        parts.append(f"> {info.above:g}")
    if info.maximum is not None:
        parts.append(f"<= {info.maximum:g}")
    return " and ".join(parts)


def _check_scalar(info: SettingInfo, value: Any, kind: type, where: str) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if kind is bool or isinstance(value, bool):
        if not isinstance(value, bool) or kind is not bool:
            raise SettingError(f"{where}: expected {kind.__name__}, got {value!r}")
        return value
    if not isinstance(value, kind):
        raise SettingError(f"{where}: expected {'a number' if kind is float else kind.__name__}, got {value!r}")
    if kind in (int, float):
        number = float(value)  # type: ignore[arg-type]  # an int or float here
        bad = (
            (info.minimum is not None and not number >= info.minimum)
            or (info.above is not None and not number > info.above)
            or (info.maximum is not None and not number <= info.maximum)
            or number != number  # nan
        )
        if bad:
            raise SettingError(
                f"{where}: {info.invalid}, got {value}"
                if info.invalid
                else f"{where} must be {_describe_range(info)}, got {value}"
            )
    if info.choices and value not in info.choices:
        raise SettingError(f"{where}: unknown value {value!r}; choose one of {', '.join(info.choices)}")
    return value


def split_values(info: SettingInfo, values: Sequence[Any], where: str) -> list[Any]:
    """The texts of a list setting split at its ``split`` ("wet,AMvB" -> "wet", "AMvB"); other values as given."""
    out: list[Any] = []
    for value in values:
        if not isinstance(value, str) or info.split is None:
            out.append(value)
            continue
        pieces = [piece.strip() for piece in value.split(info.split)]
        if not all(pieces):
            raise SettingError(f"{where}: an empty value in {value!r}")
        out += pieces
    return out


def coerce(info: SettingInfo, value: Any, where: str | None = None) -> Any:
    """``value`` checked against the setting (type, range, choices); SettingError naming it otherwise."""
    where = where or info.name
    if value is None:
        if info.optional or info.default is None:
            return None
        raise SettingError(f"{where} needs a value")
    if info.kind is tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            value = [value]
        value = split_values(info, value, where)
        item_info = dataclasses.replace(info, kind=info.item or str, choices=info.choices)
        return tuple(_check_scalar(item_info, v, info.item or str, f"{where}[{i}]") for i, v in enumerate(value))
    return _check_scalar(info, value, info.kind, where)


def check(obj: Any) -> Any:
    """Every setting of a settings dataclass instance checked; the instance itself when all are valid."""
    for info in settings_of(type(obj)):
        coerce(info, getattr(obj, info.name))
    return obj


def build(cls: type, values: dict, where: str = "") -> Any:
    """An instance of ``cls`` from a mapping (a TOML table, CLI values): unknown keys and bad values refused."""
    infos = {i.name: i for i in settings_of(cls)}
    unknown = sorted(set(values) - set(infos))
    if unknown:
        prefix = f"{where}: " if where else ""
        raise SettingError(f"{prefix}unknown setting(s) {', '.join(unknown)}; known: {', '.join(infos)}")
    checked = {k: coerce(infos[k], v, f"{where}.{k}" if where else k) for k, v in values.items()}
    return cls(**checked)


# ---------------------------------------------------------------------------------------- the CLI
def _arg_type(info: SettingInfo, kind: type):
    label = {int: "a whole number", float: "a number", str: "a text"}[kind]

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {label}, got {text!r}") from None
        try:
            return _check_scalar(info, value, kind, "the value")
        except SettingError as exc:
            raise argparse.ArgumentTypeError(
                str(exc).replace("the value: ", "", 1).replace("the value ", "", 1)
            ) from None

    parse.__name__ = kind.__name__  # argparse names the type in its messages
    return parse


def _list_type(info: SettingInfo):
    one = _arg_type(info, info.item or str)
    example = "0.7,0.3" if info.item is float else "a,b"
    label = "numbers" if info.item in (int, float) else "values"

    def parse(text: str):
        try:
            return tuple(one(x.strip()) for x in text.split(","))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated {label} such as {example}, got {text!r} ({exc})"
            ) from None

    parse.__name__ = "list"
    return parse


def _split_type(info: SettingInfo):
    """An argparse type for a list setting that splits: each value given, as the list of its pieces."""

    def parse(text: str) -> list[str]:
        try:
            return split_values(info, [text], "the value")
        except SettingError as exc:
            raise argparse.ArgumentTypeError(str(exc).replace("the value: ", "", 1)) from None

    parse.__name__ = "list"
    return parse


def add_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    infos: Iterable[SettingInfo],
    seen: set[str] | None = None,
    defaults_in_help: bool = True,
) -> None:
    """A flag per setting, default None (not given). ``seen`` skips names already added (shared settings)."""
    for info in infos:
        if not info.cli or (seen is not None and info.name in seen):
            continue
        if seen is not None:
            seen.add(info.name)
        help_text = info.help
        if defaults_in_help and info.default not in (None, "", (), dataclasses.MISSING) and info.kind is not bool:
            shown = ",".join(map(str, info.default)) if isinstance(info.default, tuple) else info.default
            help_text += f" (default {shown})"
        kwargs: dict[str, Any] = {"dest": info.name, "default": None, "help": help_text}
        if info.metavar:
            kwargs["metavar"] = info.metavar
        if info.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif info.kind is tuple and info.item is str and info.split:
            kwargs["action"], kwargs["type"] = "extend", _split_type(info)  # --kind wet,AMvB --kind KB
        elif info.kind is tuple and info.item is str:
            kwargs["action"] = "append"  # --index A --index B
        elif info.kind is tuple:
            kwargs["type"] = _list_type(info)
        elif info.choices:
            kwargs["choices"] = info.choices
        else:
            kwargs["type"] = _arg_type(info, info.kind)
        parser.add_argument(info.flag, **kwargs)


def given(args: argparse.Namespace, infos: Iterable[SettingInfo]) -> dict:
    """The settings given on the command line (flags left out are None and not included)."""
    out = {}
    flags = vars(args)
    for info in infos:
        value = flags.get(info.name)
        if value is not None:
            out[info.name] = tuple(value) if isinstance(value, list) else value
    return out
