"""Naming a state machine: `dledger server --state-machine NAME` (YAML `stateMachine`).

NAME is `kv` (the key-value store of `dledger.kv`) or `package.module:factory`, a
callable taking no arguments that returns the state machine (an object with
`on_apply`). The module is imported with the server's `sys.path`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from dledger.config import ConfigError, check_state_machine_name
from dledger.statemachine.caller import StateMachine

BUILTIN: dict[str, str] = {"kv": "dledger.kv:create_state_machine"}
"""Short names and the factories they stand for."""


def resolve_factory(name: str) -> Callable[[], Any]:
    """The factory NAME stands for, imported but not called.

    Raises:
        ConfigError: a malformed or unknown name, a module that cannot be imported (any
            exception while importing it, SystemExit included; KeyboardInterrupt goes
            through), or no callable of that name in it.
    """
    check_state_machine_name(name)
    target = BUILTIN.get(name, name)
    module_name, _, attribute = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except (Exception, SystemExit) as exc:
        raise ConfigError(f"state machine {name!r}: cannot import {module_name}: {_describe(exc)}") from None
    factory: Any = module
    for part in attribute.split("."):
        factory = getattr(factory, part, None)
    if not callable(factory):
        raise ConfigError(f"state machine {name!r}: {module_name} has no callable {attribute}")
    return factory  # type: ignore[no-any-return]


def load_state_machine(name: str) -> StateMachine:
    """A new state machine from NAME (`kv` or `package.module:factory`).

    Raises:
        ConfigError: see `resolve_factory`; also a factory that raised (SystemExit
            included), or returned something without `on_apply`.
    """
    factory = resolve_factory(name)
    try:
        machine = factory()
    except (Exception, SystemExit) as exc:
        raise ConfigError(f"state machine {name!r}: the factory failed: {_describe(exc)}") from None
    if not isinstance(machine, StateMachine):
        raise ConfigError(f"state machine {name!r}: the factory returned {type(machine).__name__}, without on_apply")
    return machine


def _describe(exc: BaseException) -> str:
    """What went wrong, for the error line: a `sys.exit()` in user code is named as one
    (not let through: it would end the server with its status and no message)."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    return f"{type(exc).__name__}: {exc}"


__all__ = ["BUILTIN", "load_state_machine", "resolve_factory"]
