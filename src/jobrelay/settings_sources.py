"""How settings are read: from the environment, from `<VARIABLE>_FILE` secret files and from
values given in code, every group of a settings class in one pass.

`jobrelay.settings` declares the settings (one `SettingsGroup` per part, `Settings` over
them); this module is the machinery under them, and knows nothing of any group:

- `SettingField`, `fields_of`, `groups_of`: every setting of a settings class with its
  variables (`env_names`: the alias's choices, else `JOBRELAY_` + the flat name), for the
  sources, the reference page and the CLI's error lines.
- The sources `Settings.settings_customise_sources` returns: `KeysByAlias` (values given in
  code, keyed like the others), `SecretFileSource` (secret files) and `GroupedEnvSource`
  (the environment, one pass).
"""

from __future__ import annotations

import functools
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, AliasGenerator, BaseModel, ConfigDict, SecretStr
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from jobrelay.domain.errors import JobrelayError

ENV_PREFIX = "JOBRELAY_"


class SettingsFileError(JobrelayError):
    """A `<VARIABLE>_FILE` setting names a file that cannot be read (or clashes with
    `<VARIABLE>`); the message names both."""


class SettingsGroup(BaseModel):
    """The settings of one part. A plain model, not a `BaseSettings`: only `Settings` reads
    the environment, once for every group. Its fields are set by name in code
    (`Settings(db={"pool_max": 6})`) and by their alias, the flat name, from the sources."""

    model_config = ConfigDict(validate_by_name=True, validate_by_alias=True, extra="forbid")


def group_config(prefix: str) -> ConfigDict:
    """The model config of a group whose fields are set by `<prefix>_<field name>`
    (`JOBRELAY_BATCH_MAX_ITEMS` for `batches.max_items` with prefix `batch`): the alias of
    every field that declares none is derived, so a new setting is one line; a field whose
    variable differs (a legacy name, `DATABASE_URL`) declares its own `validation_alias`."""
    return ConfigDict(
        validate_by_name=True,
        validate_by_alias=True,
        extra="forbid",
        alias_generator=AliasGenerator(validation_alias=lambda name: f"{prefix}_{name}"),
    )


def is_secret(field: FieldInfo) -> bool:
    """True for `SecretStr` fields (also in a list or optional) and fields marked secret."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and extra.get("secret") is True:
        return True
    return _mentions_secret(field.annotation)


def _mentions_secret(annotation: object) -> bool:
    if annotation is SecretStr:
        return True
    return any(_mentions_secret(arg) for arg in typing.get_args(annotation))


def env_names(name: str, field: FieldInfo) -> list[str]:
    """The environment variables that set field `name` (of a group or of `Settings`), the
    preferred one first: the choices of an `AliasChoices`, else `JOBRELAY_` + the flat name
    (the alias, or the field's own name) upper-cased."""
    alias = field.validation_alias
    if isinstance(alias, AliasChoices):
        return [choice for choice in alias.choices if isinstance(choice, str)]
    flat = alias if isinstance(alias, str) else name
    return [f"{ENV_PREFIX}{flat}".upper()]


@dataclass(frozen=True)
class SettingField:
    """One setting: the group holding it, its field, and the variables that set it."""

    group: str | None
    """The field of `Settings` that holds it; None for a field of `Settings` itself."""
    name: str
    field: FieldInfo

    @property
    def key(self) -> str:
        """The key the sources give its value under (and a validation error's location
        names): its flat name, the first alias, else the field's name."""
        alias = self.field.validation_alias
        if isinstance(alias, AliasChoices):
            first = alias.choices[0]
            return first if isinstance(first, str) else self.name
        return alias if isinstance(alias, str) else self.name

    @property
    def path(self) -> str:
        """Where code reads it: `db.pool_max` is `settings.db.pool_max`."""
        return self.name if self.group is None else f"{self.group}.{self.name}"

    @property
    def variables(self) -> list[str]:
        """The environment variables that set it, the preferred one first."""
        return env_names(self.name, self.field)

    @property
    def secret(self) -> bool:
        """True when it may also come from `<VARIABLE>_FILE` (and is never echoed)."""
        return is_secret(self.field)


def groups_of(settings_cls: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The groups of a settings class by field name, in declaration order."""
    groups: dict[str, type[BaseModel]] = {}
    for name, field in settings_cls.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, SettingsGroup):
            groups[name] = field.annotation
    return groups


@functools.cache
def fields_of(settings_cls: type[BaseModel]) -> tuple[SettingField, ...]:
    """Every setting of a settings class, in declaration order: its own fields, then each
    group's."""
    groups = groups_of(settings_cls)
    fields = [
        SettingField(None, name, field)
        for name, field in settings_cls.model_fields.items()
        if name not in groups
    ]
    for group, model in groups.items():
        fields += [SettingField(group, name, field) for name, field in model.model_fields.items()]
    return tuple(fields)


def setting_at(
    settings_cls: type[BaseModel], loc: tuple[int | str, ...]
) -> tuple[SettingField, tuple[int | str, ...]] | None:
    """The setting a validation error's location names and the rest of the location (an
    index in a list), or None when it names no single setting (a check across a group)."""
    for setting in fields_of(settings_cls):
        head = (setting.key,) if setting.group is None else (setting.group, setting.key)
        if loc[: len(head)] == head:
            return setting, loc[len(head) :]
    return None


def _nested(values: list[tuple[SettingField, object]]) -> dict[str, Any]:
    """(setting, value) pairs as the sources give them: `{group: {key: value}}`."""
    nested: dict[str, Any] = {}
    for setting, value in values:
        if setting.group is None:
            nested[setting.key] = value
        else:
            nested.setdefault(setting.group, {})[setting.key] = value
    return nested


class KeysByAlias(PydanticBaseSettingsSource):
    """The values given to `Settings(...)` or `load_settings(...)`, each group's keyed like
    the other sources' (a field's name becomes its alias), so that a value given in code
    wins over the environment's when both are merged."""

    def __init__(
        self, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource
    ) -> None:
        super().__init__(settings_cls)
        self._init_settings = init_settings

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: `__call__` renames the keys of the init source's whole output.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values = dict(self._init_settings())
        aliases: dict[str, dict[str, str]] = {}
        for setting in fields_of(self.settings_cls):
            if setting.group is not None:
                aliases.setdefault(setting.group, {})[setting.name] = setting.key
        for group, renames in aliases.items():
            given = values.get(group)
            if isinstance(given, Mapping):  # a group model given whole stays as it is
                values[group] = {renames.get(key, key): value for key, value in given.items()}
        return values


class GroupedEnvSource(PydanticBaseSettingsSource):
    """Every setting from its environment variable, read in one pass over the environment.

    Like pydantic-settings' own source: names match case-insensitively, the first variable
    of a setting that is set wins (`DATABASE_URL` before `JOBRELAY_DATABASE_URL`), and the
    text is validated by the field (a comma-separated list is split by its validator).
    """

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: `__call__` reads every setting itself.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        environ = {name.lower(): value for name, value in os.environ.items()}
        values: list[tuple[SettingField, object]] = []
        for setting in fields_of(self.settings_cls):
            for variable in setting.variables:
                if variable.lower() in environ:
                    values.append((setting, environ[variable.lower()]))
                    break
        return _nested(values)


class SecretFileSource(PydanticBaseSettingsSource):
    """Secrets from files: `<VARIABLE>_FILE=/run/secrets/x` gives the stripped content of
    that file as the value of `<VARIABLE>`, for every secret setting (`is_secret`).

    A file that cannot be read, or a variable given both ways, raises `SettingsFileError`
    naming the variable and the path, so the command stops before it starts anything.
    """

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Unused: `__call__` reads every field itself.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        values: list[tuple[SettingField, object]] = []
        for setting in fields_of(self.settings_cls):
            if not setting.secret:
                continue
            for variable in setting.variables:
                path = os.environ.get(f"{variable}_FILE")
                if not path:
                    continue
                if os.environ.get(variable):
                    raise SettingsFileError(
                        f"both {variable} and {variable}_FILE are set; set one of them"
                    )
                values.append((setting, _read_secret_file(f"{variable}_FILE", path)))
                break
        return _nested(values)


def _read_secret_file(variable: str, path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise SettingsFileError(f"{variable}={path}: cannot read the file ({reason})") from None
