"""Settings from the command line's sizes and from YAML config files (`dledger server
-c`, `dledger cluster -c`): every value checked against its setting's kind, never a
guess: a switch takes yes/no words, a number of milliseconds or entries a whole number,
a number of bytes also a size (`64MiB`), a text setting text (null only when optional)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from dledger.bounded import read_bounded
from dledger.cli.errors import one_line
from dledger.config import ConfigError, DLedgerConfig, StoreConfig, parse_peers

_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """`"16MiB"`, `"64m"`, `"1g"` or a plain byte count -> bytes.

    Raises:
        ValueError: not a size.
    """
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (examples: 1048576, 64MiB, 1g)")
    number, unit = int(match.group(1)), match.group(2).lower()
    return number << (10 * " kmgt".index(unit or " "))  # no unit: shift 0


def format_size(size: int) -> str:
    """Bytes as `parse_size` reads them back, in the largest exact binary unit:
    1073741824 -> `"1GiB"`, 1000 -> `"1000"`."""
    for shift, unit in ((40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def size_option(_ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """Click callback: a byte size with an optional K/M/G/T (binary) suffix."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param=param) from exc


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower().replace("-", "_")


def setting_fields(store_cls: type[StoreConfig] = StoreConfig) -> dict[str, dataclasses.Field[Any]]:
    """The settings a config file can set, by every snake_case name that names them: each
    field's own name and its DLedger names (metadata "yaml"). They are DLedgerConfig's
    fields but `store`, and the fields of `store_cls` that have DLedger names.

    Raises:
        RuntimeError: two settings answer to the same name.
    """
    fields = [f for f in dataclasses.fields(DLedgerConfig) if f.init and f.name != "store"]
    fields += [f for f in dataclasses.fields(store_cls) if "yaml" in f.metadata]
    names: dict[str, dataclasses.Field[Any]] = {}
    for f in fields:
        yaml_names = f.metadata.get("yaml", ())
        for name in (f.name, *((yaml_names,) if isinstance(yaml_names, str) else yaml_names)):
            if names.setdefault(_snake(name), f) is not f:
                raise RuntimeError(f"{name!r} names both {names[_snake(name)].name} and {f.name}")
    return names


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


_BYTE_FIELD_ENDS = ("_bytes", "_quota", "_throttle_point")
"""DLedgerConfig's byte counts (its fields carry no "size" metadata)."""


def takes_size(field: dataclasses.Field[Any]) -> bool:
    """Whether a setting is a number of bytes (`64MiB` allowed), not milliseconds or a
    count."""
    return bool(field.metadata.get("size")) or field.name.endswith(_BYTE_FIELD_ENDS)


def _whole_number(field: dataclasses.Field[Any], value: Any) -> int:
    if isinstance(value, str):
        if takes_size(field):
            return parse_size(value)
        if not re.fullmatch(r"\s*-?\d+\s*", value):
            raise ValueError("expected a whole number (a size suffix is only for byte settings)")
        return int(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise ValueError("expected a whole number")
    return int(value)


def _coerce(field: dataclasses.Field[Any], value: Any) -> Any:
    """A file's value as its setting's type: yes/no words for a switch, a whole number
    for milliseconds or entries, or a size (`64MiB`) for bytes; a text setting takes
    text (or a whole number: `group: 7`), null only when it is optional. Never a guess:
    a `maybe` switch, `1.5` entries, a list or a mapping for a path is a ValueError."""
    default = field.default
    if isinstance(default, bool):
        if not isinstance(value, (bool, int, str)):
            raise ValueError("expected true or false")
        word = str(value).strip().lower()
        if word not in _TRUE + _FALSE:
            raise ValueError("expected true or false")
        return word in _TRUE
    if isinstance(default, int):
        return _whole_number(field, value)
    if isinstance(default, float):
        if isinstance(value, bool):
            raise ValueError("expected a number")
        return float(value)
    if value is None:
        if default is None:
            return None
        raise ValueError("a value is needed (null is not one)")
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"expected text, not a {_yaml_kind(value)}")
    return str(value)


def _yaml_kind(value: Any) -> str:
    """What a YAML value is, in YAML's words."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    return type(value).__name__


def load_config_file(path: Path, self_id: str | None = None) -> dict[str, Any]:
    """Settings by field name (DLedgerConfig's and StoreConfig's, see `build_config`) from
    a YAML file: DLedger 0.3's keys (`group`, `selfId`, `peers`, `storeBaseDir`,
    `peerPushQuota`, `mappedFileSizeForEntryData`...) or ours in snake_case, at the top
    level or in DLedger's proxy form `configs: [{...}]` (the entry whose selfId is
    `self_id` when there are several). Unknown keys are reported on stderr and ignored.

    Raises:
        click.UsageError: unreadable YAML, no single matching entry or a bad value.
    """
    return file_settings(_read_document(path, self_id), str(path))


def _read_document(path: Path, self_id: str | None) -> dict[Any, Any]:
    import yaml  # type: ignore[import-untyped]

    try:
        document = yaml.safe_load(read_bounded(path).decode("utf-8")) or {}
    except UnicodeDecodeError:
        raise click.UsageError(f"cannot read config file {path}: not a UTF-8 text file") from None
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else one_line(str(exc))
        raise click.UsageError(f"cannot read config file {path}: {reason}") from None
    if not isinstance(document, dict):
        raise click.UsageError(f"{path}: expected a mapping of settings")
    if "configs" in document:
        entries = [e for e in document["configs"] or [] if isinstance(e, dict)]
        if len(entries) > 1 and self_id is not None:
            entries = [e for e in entries if str(e.get("selfId", e.get("self_id"))) == self_id]
        if len(entries) != 1:
            raise click.UsageError(f"{path}: need exactly one entry under 'configs' (use --id to pick one)")
        document = entries[0]
    return document


def file_settings(
    document: Mapping[Any, Any], source: str, store_cls: type[StoreConfig] = StoreConfig
) -> dict[str, Any]:
    """Settings by field name from a config file's key-value pairs (see
    `setting_fields`); unknown keys are reported on stderr and ignored.

    Raises:
        click.UsageError: a value that does not fit its setting.
    """
    fields = setting_fields(store_cls)
    result: dict[str, Any] = {}
    for key, value in document.items():
        field = fields.get(_snake(str(key)))
        if field is None:
            click.echo(f"warning: {source}: ignoring unsupported setting {key!r}", err=True)
            continue
        try:
            result[field.name] = _coerce(field, value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise click.UsageError(f"{source}: bad value for {key}: {value!r:.80} ({exc})") from exc
    return result


def member_id_problem(node_id: str) -> str | None:
    """Why `node_id` cannot be a member's id, by the rule `--peers` applies (letters,
    digits, '_' and '.'; no '-', which ends the id in `id-host:port`); None when it can."""
    if not node_id:
        return "an empty member id"
    if "-" in node_id:
        return f"bad member id {node_id!r}: '-' is not allowed in ids (it ends the id in --peers' id-host:port)"
    try:
        ids = list(parse_peers(f"{node_id}-127.0.0.1:1"))
    except ConfigError:
        ids = []
    if ids != [node_id]:
        return f"bad member id {node_id!r}: use letters, digits, '_' and '.'"
    return None


__all__ = [
    "file_settings",
    "format_size",
    "load_config_file",
    "member_id_problem",
    "parse_size",
    "setting_fields",
    "size_option",
    "takes_size",
]
