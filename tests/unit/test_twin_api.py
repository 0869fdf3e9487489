"""The compiled `dledger._store` and its pure-Python twin have the API of the typed stub.

`dledger/_store.pyi` is the reference: the twin must have exactly its public names, and
the parameters of every function and method (names, kinds, defaults); the compiled
module must have every name of the stub and no other public class member. Its methods
are bound with `binding=False`, which leaves no signature to read, so only their names
are compared there (tests/property/test_twin.py proves the two behave alike).
"""

from __future__ import annotations

import ast
import copy
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import dledger
from dledger import _store_py

pytestmark = pytest.mark.unit

STUB = Path(dledger.__file__).parent / "_store.pyi"

NO_DEFAULT = "<no default>"
Param = tuple[str, str, Any]  # name, inspect.Parameter kind name, default (or NO_DEFAULT)

# How to make an instance of each class, to see the twin's instance attributes.
CONSTRUCT: dict[str, tuple[Any, ...]] = {"Quota": (1000,), "MappedTable": (4096,), "LogCore": ()}


@dataclass
class StubClass:
    """The members a class of the stub declares."""

    attributes: set[str] = field(default_factory=set)  # annotated names and properties
    methods: dict[str, list[Param]] = field(default_factory=dict)  # every def, private and dunder too


@dataclass
class StubApi:
    """The public module-level names of the stub, by kind."""

    constants: set[str] = field(default_factory=set)
    functions: dict[str, list[Param]] = field(default_factory=dict)
    classes: dict[str, StubClass] = field(default_factory=dict)

    @property
    def names(self) -> set[str]:
        return self.constants | set(self.functions) | set(self.classes)


def _stub_params(fn: ast.FunctionDef) -> list[Param]:
    a = fn.args
    positional = [(p, "POSITIONAL_ONLY") for p in a.posonlyargs] + [(p, "POSITIONAL_OR_KEYWORD") for p in a.args]
    defaults: list[Any] = [NO_DEFAULT] * (len(positional) - len(a.defaults))
    defaults += [ast.literal_eval(d) for d in a.defaults]
    params = [(p.arg, kind, d) for (p, kind), d in zip(positional, defaults, strict=True)]
    if a.vararg:
        params.append((a.vararg.arg, "VAR_POSITIONAL", NO_DEFAULT))
    for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True):
        params.append((p.arg, "KEYWORD_ONLY", NO_DEFAULT if d is None else ast.literal_eval(d)))
    if a.kwarg:
        params.append((a.kwarg.arg, "VAR_KEYWORD", NO_DEFAULT))
    return params


def _is_property(fn: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in fn.decorator_list)


def _stub_class(node: ast.ClassDef) -> StubClass:
    cls = StubClass()
    for item in node.body:
        if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            cls.attributes.add(item.target.id)
        elif isinstance(item, ast.FunctionDef) and _is_property(item):
            cls.attributes.add(item.name)
        elif isinstance(item, ast.FunctionDef):
            cls.methods[item.name] = _stub_params(item)
    return cls


def parse_stub(source: str) -> StubApi:
    """The public API the stub `source` declares (names starting with _ are stub-only)."""
    api = StubApi()
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if not node.target.id.startswith("_"):
                api.constants.add(node.target.id)
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            api.functions[node.name] = _stub_params(node)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            api.classes[node.name] = _stub_class(node)
    return api


def runtime_params(fn: Any) -> list[Param]:
    """The parameters of a Python function, in the stub's terms."""
    return [
        (p.name, p.kind.name, NO_DEFAULT if p.default is inspect.Parameter.empty else p.default)
        for p in inspect.signature(fn).parameters.values()
    ]


def public(names: Any) -> set[str]:
    return {n for n in names if not n.startswith("_")}


def twin_members(cls: type) -> tuple[set[str], set[str]]:
    """(attributes, methods) of a twin class: its properties and the attributes of an
    instance; its functions."""
    members = {n: v for klass in reversed(cls.__mro__[:-1]) for n, v in vars(klass).items()}
    methods = {n for n, v in members.items() if inspect.isfunction(v)}
    attributes = {n for n, v in members.items() if isinstance(v, property)}
    attributes |= set(vars(cls(*CONSTRUCT[cls.__name__])))
    return attributes, methods


def compiled_members(cls: type) -> tuple[set[str], set[str]]:
    """(attributes, methods) of a compiled class: its descriptors (`cdef public` /
    `readonly` attributes, properties, methods), by whether they are routines."""
    names = set(dir(cls)) - set(dir(object))
    methods = {n for n in names if inspect.isroutine(getattr(cls, n))}
    return names - methods, methods


def check_twin(api: StubApi, twin: ModuleType) -> list[str]:
    """How `twin` differs from the stub's API (empty when it has it exactly)."""
    errors = []
    exported = set(twin.__all__)
    if exported != api.names:
        errors.append(f"twin exports {sorted(exported - api.names)} beyond, lacks {sorted(api.names - exported)}")
    errors += [f"twin lacks {n}" for n in sorted(api.names) if not hasattr(twin, n)]
    for name, params in api.functions.items():
        if hasattr(twin, name) and runtime_params(getattr(twin, name)) != params:
            errors.append(f"{name}{runtime_params(getattr(twin, name))} != stub {params}")
    for name, stub_cls in api.classes.items():
        if not hasattr(twin, name):
            continue
        cls = getattr(twin, name)
        attributes, methods = twin_members(cls)
        if public(attributes) != stub_cls.attributes:
            errors.append(f"{name} attributes {sorted(public(attributes))} != stub {sorted(stub_cls.attributes)}")
        if public(methods) != public(stub_cls.methods):
            errors.append(f"{name} methods {sorted(public(methods))} != stub {sorted(public(stub_cls.methods))}")
        for method, params in stub_cls.methods.items():
            if method not in methods:
                errors.append(f"{name} lacks {method}")
            elif runtime_params(getattr(cls, method)) != params:
                errors.append(f"{name}.{method}{runtime_params(getattr(cls, method))} != stub {params}")
    return errors


def check_compiled(api: StubApi, compiled: ModuleType) -> list[str]:
    """How the compiled module's names differ from the stub's API."""
    errors = [f"compiled module lacks {n}" for n in sorted(api.names) if not hasattr(compiled, n)]
    for name, stub_cls in api.classes.items():
        if not hasattr(compiled, name):
            continue
        cls = getattr(compiled, name)
        attributes, methods = compiled_members(cls)
        if public(attributes) != stub_cls.attributes:
            errors.append(f"{name} attributes {sorted(public(attributes))} != stub {sorted(stub_cls.attributes)}")
        if public(methods) != public(stub_cls.methods):
            errors.append(f"{name} methods {sorted(public(methods))} != stub {sorted(public(stub_cls.methods))}")
        errors += [
            f"{name} lacks {m}" for m in sorted(stub_cls.methods) if not inspect.isroutine(getattr(cls, m, None))
        ]
    return errors


@pytest.fixture(scope="module")
def api() -> StubApi:
    return parse_stub(STUB.read_text())


def test_stub_declares_the_whole_api(api: StubApi) -> None:
    assert {"crc32", "encode_entry", "decode_header", "encode_index_unit", "decode_index_unit"} <= set(api.functions)
    assert set(api.classes) == {"Quota", "MappedTable", "LogCore"}
    assert {"COMPILED", "CRC_IMPL", "STOP_END", "STATE_OK", "FAIL_NONE"} <= api.constants
    assert {"append", "scan", "_init_core", "_acquire", "_set_state"} <= set(api.classes["LogCore"].methods)
    assert {"end_index", "term", "state"} <= api.classes["LogCore"].attributes


def test_twin_has_the_names_and_parameters_of_the_stub(api: StubApi) -> None:
    assert check_twin(api, _store_py) == []


def test_compiled_module_has_the_names_of_the_stub(api: StubApi) -> None:
    compiled = pytest.importorskip("dledger._store")
    assert check_compiled(api, compiled) == []
    for name in api.constants - {"COMPILED", "CRC_IMPL"}:
        assert getattr(compiled, name) == getattr(_store_py, name), name


MUTATIONS = {
    # the stub lacks a name or parameter the implementations have
    "stub lacks a function": lambda api: api.functions.pop("crc32"),
    "stub lacks a method": lambda api: api.classes["LogCore"].methods.pop("scan"),
    "stub lacks an attribute": lambda api: api.classes["LogCore"].attributes.discard("term"),
    "stub lacks a parameter": lambda api: api.classes["LogCore"].methods["scan"].pop(),
    # the implementations lack a name or parameter of the stub
    "implementations lack a function": lambda api: api.functions.update(lost=[]),
    "implementations lack a constant": lambda api: api.constants.add("LOST"),
    "implementations lack a method": lambda api: api.classes["MappedTable"].methods.update(lost=[]),
    "implementations lack a private method": lambda api: api.classes["LogCore"].methods.update(_lost=[]),
    "implementations lack an attribute": lambda api: api.classes["Quota"].attributes.add("lost"),
    "implementations lack a parameter": lambda api: api.functions["encode_entry"].append(
        ("lost", "POSITIONAL_OR_KEYWORD", NO_DEFAULT)
    ),
    "a default differs": lambda api: (
        api.classes["MappedTable"].methods["push"].__setitem__(-1, ("fd", "POSITIONAL_OR_KEYWORD", 0))
    ),
}
NAME_ONLY = {"stub lacks a parameter", "implementations lack a parameter", "a default differs", "stub lacks a function"}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_the_checks_see_a_name_or_parameter_missing_on_either_side(api: StubApi, mutation: str) -> None:
    broken = copy.deepcopy(api)
    MUTATIONS[mutation](broken)
    assert check_twin(broken, _store_py) != []
    compiled = pytest.importorskip("dledger._store")
    # parameters cannot be read on the compiled side, nor its module-level extras (imports)
    assert (check_compiled(broken, compiled) != []) is (mutation not in NAME_ONLY)
