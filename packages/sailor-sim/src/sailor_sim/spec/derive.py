"""Frozen spec dataclasses as the one declaration of a setting: CLI flags, config files, dicts
and proto messages are all derived from the dataclass fields (torchtitan derives its CLI from
its config the same way; typer reads the generated signature).

- ``flags(cls)``: one ``Flag`` per leaf field; nested spec dataclasses are flattened (their
  fields become flags of their own names), the help text is the field's docstring.
- ``with_spec(cls)``: a decorator for a typer command; the command's ``spec`` parameter is
  replaced by the generated flags plus ``--config FILE`` (TOML with the same field names,
  nested tables for nested specs); the command receives one frozen ``spec``. Precedence:
  field default < config file < flag given on the command line.
- ``to_dict`` / ``from_dict``: plain data, unknown keys refused naming the key.
- ``to_proto`` / ``from_proto``: by field name into a message of the same field names; the
  fields a subclass adds, which the message lacks, travel as JSON in its ``extensions`` map and
  come back as fields of the same names and values (``extended``): a setting added to a spec
  reaches the receiver with no other declaration. ``to_json`` / ``from_json``: the same
  message as JSON (a file a process hands another).

Bad values are ``ValidationError``s naming the flag, which the CLIs print as one line, exit 2.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import json
import keyword
import textwrap
import tomllib
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..errors import ValidationError

ALIASES: dict[str, tuple[str, ...]] = {
    "flash_attention": ("--flash/--no-flash",),
    "global_batch_size": ("--gbs",),
    "seq_len": ("--seq",),
    "precision": ("--dtype",),
    "expert_parallel": ("--ep",),
    "context_parallel": ("--cp",),
}
"""Short spellings kept for the flags users already type (one vocabulary, a few synonyms)."""


@dataclasses.dataclass(frozen=True)
class Flag:
    path: tuple[str, ...]
    """Field names from the root spec down to this leaf."""
    kind: type
    """bool, int, float or str (Optional unwrapped)."""
    optional: bool
    default: Any
    help: str

    @property
    def name(self) -> str:
        return self.path[-1]

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")


def is_spec(cls: Any) -> bool:
    return inspect.isclass(cls) and dataclasses.is_dataclass(cls)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings (the string literal under a field) of a dataclass and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = _class_body(klass)
        for prev, node in zip(body, body[1:], strict=False):
            if (
                isinstance(prev, ast.AnnAssign)
                and isinstance(prev.target, ast.Name)
                and isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            ):
                docs[prev.target.id] = " ".join(node.value.value.split())
    return docs


def _class_body(klass: type) -> list:
    """The statements of ``klass``'s definition: from its module's syntax tree, parsed once
    per file (``inspect.getsource`` tokenizes the file again for every class, ~10 ms of every
    CLI start), else from its own source (a nested class), else none."""
    try:
        filename = inspect.getsourcefile(klass)
    except TypeError:
        return []
    if filename and klass.__qualname__ == klass.__name__:
        found = _top_level_classes(filename).get(klass.__name__)
        if found is not None:
            return found.body
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError):
        return []
    return tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []


@functools.cache
def _top_level_classes(filename: str) -> dict[str, ast.ClassDef]:
    try:
        with open(filename, encoding="utf-8") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, UnicodeDecodeError):
        return {}
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def _leaf_type(hint: Any) -> tuple[Any, bool]:
    args = typing.get_args(hint)
    if args and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return hint, False


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def flags(cls: type, path: tuple[str, ...] = ()) -> list[Flag]:
    """The leaf fields of a spec, depth first, in declaration order."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    out: list[Flag] = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_"):
            continue
        kind, optional = _leaf_type(hints[f.name])
        if is_spec(kind):
            out += flags(kind, (*path, f.name))
            continue
        if kind not in (bool, int, float, str):
            raise TypeError(f"{cls.__name__}.{f.name}: {kind} is not a flag type")
        out.append(Flag((*path, f.name), kind, optional, _default(f), docs.get(f.name, "")))
    names = [flag.name for flag in out]
    clash = {n for n in names if names.count(n) > 1}
    if clash and not path:
        raise TypeError(f"{cls.__name__}: leaf field names must be unique, repeated: {clash}")
    return out


def to_dict(spec: Any) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def from_dict(cls: type, data: Mapping[str, Any], where: str = "spec") -> Any:
    """A spec from plain data; unknown keys and bad types refused naming the key."""
    if not isinstance(data, Mapping):
        raise ValidationError(f"must be a table of {cls.__name__} fields", field=where)
    hints = typing.get_type_hints(cls)
    known = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValidationError(f"unknown field(s) {unknown}; known: {sorted(known)}", field=where)
    kwargs = {}
    for name, value in data.items():
        kind, optional = _leaf_type(hints[name])
        key = f"{where}.{name}"
        if is_spec(kind):
            kwargs[name] = from_dict(kind, value, key) if value is not None else None
        else:
            kwargs[name] = _coerce(value, kind, optional, key)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ValidationError):
            raise
        raise ValidationError(str(exc), field=where) from None


def _coerce(value: Any, kind: type, optional: bool, key: str) -> Any:
    if value is None:
        if optional:
            return None
        raise ValidationError("must be set", field=key)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is bool and not isinstance(value, bool) or not isinstance(value, kind):
        raise ValidationError(f"must be {kind.__name__}, got {value!r:.60}", field=key)
    if kind is int and isinstance(value, bool):
        raise ValidationError(f"must be int, got {value!r}", field=key)
    return value


def from_file(cls: type, path: str | Path) -> Any:
    """A spec from a TOML file of its field names (nested specs as tables)."""
    file = Path(path).expanduser()
    try:
        data = tomllib.loads(file.read_text())
    except OSError as exc:
        raise ValidationError(f"cannot read {file}: {exc.strerror}", field="config") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ValidationError(f"{file} is not valid TOML ({exc})", field="config") from None
    try:
        return from_dict(cls, data, where=file.name)
    except ValidationError as exc:  # a value the spec refused: say which file it came from
        if (exc.field or "").startswith(file.name):
            raise
        raise ValidationError(str(exc), field=file.name) from None


def _file_data(cls: type, path: str | Path) -> dict[str, Any]:
    """A config file's values only (not the field defaults), checked against ``cls``: the
    command's own defaults stay where the file is silent."""
    from_file(cls, path)  # every key and value checked, named by the file
    return tomllib.loads(Path(path).expanduser().read_text())


def _nest(values: Mapping[tuple[str, ...], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in values.items():
        node = out
        for part in path[:-1]:
            node = node.setdefault(part, {})
        node[path[-1]] = value
    return out


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


_FIELD = dataclasses.MISSING
"""``_typer_parameter``'s own_default when the command shows the field's default."""


def _typer_parameter(flag: Flag, own_default: Any = _FIELD) -> inspect.Parameter:
    """The typer option of ``flag``; ``own_default`` the default its help shows (``_FIELD``:
    the field's, None: none)."""
    import typer

    decls = [flag.option]
    if flag.kind is bool:
        decls = [f"{flag.option}/--no-{flag.option[2:]}"]
    decls += list(ALIASES.get(flag.name, ()))
    default = flag.default if own_default is _FIELD else own_default
    # typer prints a string show_default as "[default: ...]" (help text brackets are markup)
    shown = False if default in (dataclasses.MISSING, None) else str(default)
    annotation = {bool: bool | None, int: int | None, float: float | None, str: str | None}
    return inspect.Parameter(
        "_".join(flag.path),
        inspect.Parameter.KEYWORD_ONLY,
        default=typer.Option(None, *decls, help=flag.help, show_default=shown),
        annotation=annotation[flag.kind],
    )


def with_spec(
    cls: type,
    *,
    exclude: tuple[str, ...] = (),
    defaults: Mapping[str, Any] | None = None,
    no_default: tuple[str, ...] = (),
) -> Callable:
    """Decorate a typer command taking ``spec: cls``: the flags come from ``cls``.
    ``defaults`` (leaf name -> value) are this command's own defaults, below the config file
    and the flags (``sailor run`` trains a tiny model for 20 steps, not the field defaults).
    ``no_default`` names the fields the command takes only as given (a flag, the file or a
    plan's job): their help shows no default, since the field's is never used."""
    import typer

    leaves = [f for f in flags(cls) if f.name not in exclude]
    by_name = {f.name: f for f in flags(cls)}
    unknown = sorted(set(defaults or {}) - set(by_name))
    if unknown:
        raise TypeError(f"defaults for fields {cls.__name__} lacks: {unknown}")
    base_data = _nest({by_name[k].path: v for k, v in (defaults or {}).items()})

    def decorate(command: Callable) -> Callable:
        sig = inspect.signature(command)
        own = [p for name, p in sig.parameters.items() if name not in ("spec", "given")]
        wants_given = "given" in sig.parameters

        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            try:
                spec_kwargs = _spec_arguments(kwargs)
            except ValidationError as exc:  # bad input at a CLI: one line, exit 2
                typer.echo(f"error: {' '.join(str(exc).split())}", err=True)
                raise typer.Exit(2) from None
            return command(*args, **spec_kwargs, **kwargs)

        def _spec_arguments(kwargs: dict[str, Any]) -> dict[str, Any]:
            """Pop the generated parameters from ``kwargs``; the command's spec (and given)."""
            config = kwargs.pop("config", None)
            given = {f.path: kwargs.pop("_".join(f.path)) for f in leaves}
            base = _merge(base_data, _file_data(cls, config)) if config is not None else base_data
            spec_data = _merge(base, _nest({p: v for p, v in given.items() if v is not None}))
            file_keys = _leaf_names(_file_data(cls, config)) if config is not None else set()
            named = frozenset({p[-1] for p, v in given.items() if v is not None} | file_keys)
            try:
                out: dict[str, Any] = {"spec": from_dict(cls, spec_data, where="flags")}
                check = getattr(out["spec"], "check_given", None)
                if check is not None:  # fields valid alone that contradict each other
                    check(named)
            except ValidationError as exc:
                raise _as_flag(exc, by_name) from None
            if wants_given:  # the leaves set by a flag or the file, not by a default
                out["given"] = named
            return out

        config = inspect.Parameter(
            "config",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(
                None, "--config", help=f"TOML file of {cls.__name__} fields (flags override)."
            ),
            annotation=Path | None,
        )
        params = [_resolved(p, command).replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]
        own = defaults or {}
        params += [
            config,
            *(
                _typer_parameter(f, None if f.name in no_default else own.get(f.name, _FIELD))
                for f in leaves
            ),
        ]
        wrapper.__signature__ = sig.replace(parameters=params, return_annotation=None)
        # typer reads the generated signature and its annotations, not the original's.
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__
        return wrapper

    return decorate


def _as_flag(exc: ValidationError, by_name: Mapping[str, Flag]) -> ValidationError:
    """The error of a bad value named by its flag (``--seq-len``), as the user typed it; a
    nested field's path (``options.expert_parallel``) stays in the message."""
    field = (exc.field or "").removeprefix("flags.")
    name = field.split(".")[-1]
    if name not in by_name:
        return exc
    message = str(exc).split(": ", 1)[-1] if field == name else str(exc)
    option = by_name[name].option
    # the config-file key too, where it is spelled otherwise (global_batch_size)
    return ValidationError(message, field=option if "_" not in name else f"{option} ({name})")


def _leaf_names(data: Mapping[str, Any]) -> set[str]:
    out: set[str] = set()
    for key, value in data.items():
        out |= _leaf_names(value) if isinstance(value, Mapping) else {key}
    return out


def _resolved(param: inspect.Parameter, command: Callable) -> inspect.Parameter:
    """A parameter whose string annotation (``from __future__ import annotations``) is
    evaluated in the command's module, as typer needs it."""
    if isinstance(param.annotation, str):
        return param.replace(annotation=eval(param.annotation, command.__globals__))  # noqa: S307
    return param


EXTENSIONS = "extensions"
"""The message's map (field name -> JSON value) for the fields a spec subclass adds."""


def to_proto(spec: Any, message: Any) -> Any:
    """Fill ``message`` (a protobuf message with the spec's field names) from ``spec``; fields
    the message lacks go, as JSON, into its ``extensions`` map."""
    known = message.DESCRIPTOR.fields_by_name
    for f in dataclasses.fields(spec):
        value = getattr(spec, f.name)
        if f.name not in known:
            if EXTENSIONS not in known:
                raise TypeError(f"{type(message).__name__} has no field {f.name!r}")
            getattr(message, EXTENSIONS)[f.name] = json.dumps(value)
        elif value is None:
            continue
        elif dataclasses.is_dataclass(value):
            to_proto(value, getattr(message, f.name))
        else:
            setattr(message, f.name, value)
    return message


def from_proto(cls: type, message: Any) -> Any:
    """The spec of a message filled by ``to_proto`` (unset optional fields stay None). Fields
    in ``extensions`` that ``cls`` lacks make the result an ``extended`` ``cls``."""
    extras = _extensions(message)
    target = extended(cls, {k: v for k, v in extras.items() if k not in _field_names(cls)})
    return from_dict(target, {**_proto_data(cls, message), **extras}, where=cls.__name__)


def extended(cls: type, values: Mapping[str, Any]) -> type:
    """``cls`` with a field per extra value (its type the value's), or ``cls`` itself."""
    if not values:
        return cls
    names = [k for k in values if not k.isidentifier() or keyword.iskeyword(k) or k[0] == "_"]
    if names:
        raise ValidationError(f"{names[0][:40]!r} is not a field name", field=EXTENSIONS)
    bad = {k: v for k, v in values.items() if type(v) not in (bool, int, float, str)}
    if bad:
        raise ValidationError(f"must be bool, int, float or str: {bad!r:.80}", field=EXTENSIONS)
    fields = [(k, type(v), dataclasses.field(default=v)) for k, v in values.items()]
    out = dataclasses.make_dataclass(cls.__name__, fields, bases=(cls,), frozen=True)
    out.__module__ = cls.__module__
    return out


def to_json(spec: Any, message: Any) -> dict[str, Any]:
    """The wire message of ``spec`` as a JSON object (``from_json`` reads it back)."""
    from google.protobuf import json_format

    return json_format.MessageToDict(to_proto(spec, message), preserving_proto_field_name=True)


def from_json(cls: type, data: Any, message: Any) -> Any:
    from google.protobuf import json_format

    try:
        json_format.ParseDict(data, message)
    except (json_format.ParseError, TypeError, AttributeError) as exc:
        raise ValidationError(f"not a {cls.__name__} message: {exc}", field=cls.__name__) from None
    return from_proto(cls, message)


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _extensions(message: Any) -> dict[str, Any]:
    if EXTENSIONS not in message.DESCRIPTOR.fields_by_name:
        return {}
    out = {}
    for name, text in getattr(message, EXTENSIONS).items():
        try:
            out[name] = json.loads(text)
        except ValueError:
            raise ValidationError(
                f"{text[:40]!r} is not JSON", field=f"{EXTENSIONS}.{name}"
            ) from None
    return out


def _proto_data(cls: type, message: Any) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    known = message.DESCRIPTOR.fields_by_name
    data: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in known:
            continue  # a subclass's field: in ``extensions``
        kind, optional = _leaf_type(hints[f.name])
        if is_spec(kind):
            data[f.name] = _proto_data(kind, getattr(message, f.name))
        elif optional and not message.HasField(f.name):
            data[f.name] = None
        else:
            data[f.name] = getattr(message, f.name)
    return data
