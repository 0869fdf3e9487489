"""The state machine hook: committed entries applied in order on one caller thread."""

from dledger.statemachine.caller import (
    QueryableStateMachine,
    SnapshottingStateMachine,
    StateMachine,
    StateMachineCaller,
)

__all__ = ["QueryableStateMachine", "SnapshottingStateMachine", "StateMachine", "StateMachineCaller"]
