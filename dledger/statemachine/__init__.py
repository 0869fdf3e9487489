"""The state machine hook: committed entries applied in order on one caller thread."""

from dledger.statemachine.caller import SnapshottingStateMachine, StateMachine, StateMachineCaller

__all__ = ["SnapshottingStateMachine", "StateMachine", "StateMachineCaller"]
