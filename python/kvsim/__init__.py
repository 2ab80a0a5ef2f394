"""kvsim from Python: plan and run KV-cache warm-up scenarios with every invariant checked.

    import kvsim

    scenario = kvsim.Scenario.builtin("llama31-8b")      # or Scenario.from_json(your file)
    plan = kvsim.plan(scenario)                          # kvsim's planner, the gate's strategy
    report = kvsim.check(plan)                           # raises InvariantViolation on a finding

A plan from your own planner (a dict or JSON text in the kvsim-plan/1 format, spec/plan.md)
goes through ``Plan.from_json`` and the same ``run`` / ``check``. ``KvModel`` drives the
KV-cache model op by op. See python/README.md.
"""

from os import PathLike
from typing import Union

from ._kvsim import (
    Finding,
    InputError,
    InvariantViolation,
    KvModel,
    KvModelError,
    KvsimError,
    Plan,
    PlanMismatch,
    PlannerError,
    RunReport,
    Scenario,
    Violation,
    builtin_scenarios,
    check,
    mutants,
    plan,
    run,
    swarm,
)

__all__ = [
    "Finding",
    "InputError",
    "InvariantViolation",
    "KvModel",
    "KvModelError",
    "KvsimError",
    "Plan",
    "PlanMismatch",
    "PlannerError",
    "RunReport",
    "Scenario",
    "Violation",
    "builtin_scenarios",
    "check",
    "load_plan",
    "load_scenario",
    "mutants",
    "plan",
    "run",
    "swarm",
]


def load_plan(path: Union[str, "PathLike[str]"]) -> Plan:
    """A plan file (what ``kvsim replay`` reads), parsed and validated."""
    with open(path, encoding="utf-8") as f:
        return Plan.from_json(f.read())


def load_scenario(path: Union[str, "PathLike[str]"]) -> Scenario:
    """A scenario file (what ``--scenario-file`` reads), parsed and validated."""
    with open(path, encoding="utf-8") as f:
        return Scenario.from_json(f.read())
