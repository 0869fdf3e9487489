"""The state machine hook: committed entries applied in order on one caller thread."""

from dledger.statemachine.caller import StateMachine, StateMachineCaller

__all__ = ["StateMachine", "StateMachineCaller"]
