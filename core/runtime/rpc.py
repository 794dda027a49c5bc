"""Service methods reachable by their wire name, with parameters checked against their annotations.

`@rpc("ChatService.Send")` marks a method; `methods(services)` maps each wire name to its bound
method, and `check_params` checks a call's parameters (by name, JSON-typed) against the
method's signature: the annotations are the one declaration of the types, read once per method.
A parameter with a default may be left out; `X | None` accepts null.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from deck.errors import InvalidParams

F = TypeVar("F", bound=Callable[..., Any])

#: JSON's names for the Python types a parameter may have.
_JSON_NAMES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array",
               type(None): "null"}  # fmt: skip


def rpc(wire_name: str) -> Callable[[F], F]:
    """Make a service method callable as `wire_name` ("Service.Method") through `Deck.call`."""

    def mark(method: F) -> F:
        method.rpc_name = wire_name  # type: ignore[attr-defined]
        return method

    return mark


def methods(services: Iterable[object]) -> dict[str, Callable[..., Any]]:
    """Every `@rpc` method of `services`, bound, by wire name."""
    found: dict[str, Callable[..., Any]] = {}
    for service in services:
        for name in dir(type(service)):
            wire = getattr(getattr(type(service), name), "rpc_name", None)
            if wire is not None:
                found[wire] = getattr(service, name)
    return found


class _Param(typing.NamedTuple):
    name: str
    kinds: tuple[type, ...] | None  # None: any JSON value
    required: bool


@functools.cache
def _params(function: Callable[..., Any]) -> tuple[_Param, ...]:
    """The parameters of `function` as the wire sees them (computed once per method)."""
    hints = typing.get_type_hints(function)
    params = []
    for name, param in inspect.signature(function).parameters.items():
        if name == "self":
            continue
        params.append(_Param(name, _kinds(hints.get(name, Any)), param.default is inspect.Parameter.empty))
    return tuple(params)


def _kinds(hint: Any) -> tuple[type, ...] | None:
    if hint is Any or hint is object:
        return None
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kinds: list[type] = []
        for arg in typing.get_args(hint):
            found = _kinds(arg)
            if found is None:
                return None
            kinds += found
        return tuple(kinds)
    origin = typing.get_origin(hint)
    return (origin if isinstance(origin, type) else hint,)


def check_params(method: Callable[..., Any], params: Any) -> dict[str, Any]:
    """Parameters by name, checked against the method's annotations."""
    declared = _params(getattr(method, "__func__", method))
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidParams("params must be an object with the parameters by name")
    unknown = sorted(set(params) - {p.name for p in declared})
    if unknown:
        raise InvalidParams(f"unknown parameter(s): {', '.join(unknown)}")
    for name, kinds, required in declared:
        if name not in params:
            if required:
                raise InvalidParams(f"missing parameter: {name}")
            continue
        value = params[name]
        if kinds is None:
            continue
        if value is None and not required and type(None) not in kinds:
            params = {k: v for k, v in params.items() if k != name}  # an optional one given as null: left out
            continue
        if isinstance(value, bool) and bool not in kinds and int in kinds:
            raise InvalidParams(f"parameter {name} must be an integer")
        if not isinstance(value, kinds):
            expected = " or ".join(_JSON_NAMES.get(k, k.__name__) for k in kinds)
            raise InvalidParams(f"parameter {name} must be of type {expected}")
    return params
