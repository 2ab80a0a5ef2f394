"""A Python planner's test suite with kvsim: copy this file next to your planner's tests.

Each test is one thing such a suite checks: kvsim's planner over a scenario (built in, or your
model as a scenario file), your own planner's plan (a kvsim-plan/1 dict) passing every invariant,
a bad plan caught as an exception that says where, a recorded real-planner plan replayed, and
the KV-cache model driven op by op.
"""

import json
from pathlib import Path

import pytest

import kvsim

REPO = Path(__file__).resolve().parents[2]


def tiny_scenario(window=None):
    """kvsim's tiny layout: full attention (and a sliding window), block size 4."""
    groups = [{"kind": "full_attention", "block_size": 4, "layers": 2, "kv_heads": 2, "head_dim": 8}]
    if window:
        groups.append({"kind": "sliding_window", "sliding_window": window, "block_size": 4,
                       "layers": 2, "kv_heads": 2, "head_dim": 8})
    return {
        "name": "tiny",
        "model": {"groups": groups, "vocab_size": 100},
        "pool_blocks": 32,
        "scheduler": {"max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 64,
                      "enable_caching": True},
        "dp_ranks": 1,
        "seed": 1,
    }


def my_planner(ctx, decodes, zero_window_block=False):
    """Stands in for your planner: warm one request of `ctx` tokens, then decode. With
    `zero_window_block` it zeroes the window block the first decode reads (a planner slip)."""
    prompt = {"source": "ids", "ids": [(t + 3) % 100 for t in range(ctx)]}
    steps = [{"step": 0, "rank": 0, "ops": [
        {"op": "add_request", "req": "warm", "prompt": prompt},
        {"op": "schedule", "req": "warm", "num_new_tokens": ctx},
        {"op": "forward", "batch": [{"req": "warm", "tokens": ctx, "output": [7]}]},
        {"op": "process_outputs"},
    ]}]
    for d in range(decodes):
        ops = [{"op": "schedule", "req": "warm", "num_new_tokens": 1}]
        if zero_window_block and d == 0:
            ops.append({"op": "zero_blocks", "group": 1, "blocks": [2 * -(-ctx // 4)]})
        ops += [{"op": "forward", "batch": [{"req": "warm", "tokens": 1, "output": [5]}]},
                {"op": "process_outputs"}]
        steps.append({"step": 1 + d, "rank": 0, "ops": ops})
    steps.append({"step": 1 + decodes, "rank": 0, "ops": [{"op": "finish", "req": "warm"}]})
    return {"format": "kvsim-plan/1", "scenario": tiny_scenario(window=4), "steps": steps}


def test_a_builtin_scenario_plans_and_runs_clean():
    scenario = kvsim.Scenario.builtin("gpt-oss-tp")
    assert "native" in scenario.strategies
    plan = kvsim.plan(scenario, strategy="native")
    report = kvsim.check(plan)
    assert report.passed and report.result == "passed" and report.finding is None
    assert report.ops == plan.num_ops > 0
    # The same plan gives the same report (determinism).
    assert kvsim.run(plan).to_json() == report.to_json()


def test_my_model_from_a_template_plans_and_runs_clean():
    mine = kvsim.Scenario.builtin("gpt-oss-tp").to_dict()
    mine["name"] = mine["scenario"]["name"] = "my-moe"
    mine["scenario"]["pool_blocks"] = 1500
    mine["bench"]["expert_parallel"] = True
    scenario = kvsim.Scenario.from_json(mine)
    assert scenario.name == "my-moe"
    kvsim.check(kvsim.plan(scenario))
    report = kvsim.swarm([scenario], cases=4, seed=1)
    assert report["scenario_names"] == ["my-moe"] and report["failures"] == []


@pytest.mark.parametrize("ctx,decodes", [(1, 1), (7, 2), (12, 3), (33, 1)])
def test_my_planner_keeps_every_invariant(ctx, decodes):
    kvsim.check(kvsim.Plan.from_json(my_planner(ctx, decodes)))


def test_a_bad_plan_raises_the_violation_with_where_it_broke():
    plan = kvsim.Plan.from_json(my_planner(12, 2, zero_window_block=True))
    with pytest.raises(kvsim.InvariantViolation) as caught:
        kvsim.check(plan)
    v = caught.value
    assert (v.invariant, v.step, v.rank, v.op_index) == ("PL-WINDOW", 1, 0, 2)
    assert v.op["op"] == "forward" and v.detail
    assert isinstance(v.state["free_blocks"], int)
    # run() reports the same finding without raising.
    f = kvsim.run(plan).finding
    assert (f.invariant, f.step, f.rank, f.op_index, f.detail) == (v.invariant, v.step, v.rank, v.op_index, v.detail)


def test_bad_input_is_an_input_error_naming_the_path():
    bad = my_planner(4, 1)
    bad["steps"][0]["ops"][0]["prompt"]["sourse"] = "ids"
    with pytest.raises(kvsim.InputError, match=r"\$\.steps\[0\]\.ops\[0\]"):
        kvsim.Plan.from_json(bad)
    with pytest.raises(kvsim.PlannerError, match="does not apply"):
        kvsim.plan(kvsim.Scenario.builtin("llama31-8b"), strategy="chain")


def test_a_recorded_real_planner_plan_replays_with_its_finding():
    # Dynamo 1.6.1's InstrumentedScheduler, recorded on vLLM 0.31.0 (docs/dynamo-findings.md):
    # a shadow's sliding-window read of a block the planner had zeroed.
    plan = kvsim.load_plan(REPO / "docs/dynamo/findings/pl-window.plan.json")
    assert plan.source["planner"] == "dynamo" and plan.source["version"] == "1.6.1"
    report = kvsim.run(plan)
    assert report.result == "violation"
    assert report.finding.invariant == "PL-WINDOW"
    with pytest.raises(kvsim.InvariantViolation) as caught:
        kvsim.check(plan)
    assert caught.value.invariant == "PL-WINDOW" and caught.value.step == report.finding.step


def test_the_kv_model_step_by_step():
    model = kvsim.KvModel({"num_blocks": 10, "enable_caching": True, "max_model_len": 64,
                           "block_size": 4, "groups": [{"kind": "full_attention"}]})
    assert model.init()["free_blocks"] == 9
    model.apply({"op": "new_step"})
    model.apply({"op": "add_request", "id": "a", "prompt": list(range(9))})
    hit = model.apply({"op": "get_computed_blocks", "id": "a"})
    assert hit["result"]["num_computed_tokens"] == 0
    line = model.apply({"op": "allocate_slots", "id": "a", "num_new_tokens": 9})
    assert line["result"]["block_ids"] == [[1, 2, 3]]
    assert model.free_blocks == 6 and model.block_tables() == {"a": [[1, 2, 3]]}
    assert model.check_invariants() == []
    with pytest.raises(kvsim.KvModelError) as caught:
        model.apply({"op": "commit", "id": "a", "num_tokens": 5})  # not the allocated 9
    assert caught.value.error == "InvalidOp"
    model.apply({"op": "free", "id": "a"})
    assert model.free_blocks == 9 and model.check_invariants() == []


def test_findings_carry_the_fields_of_kvsims_finding():
    fields = {"invariant", "step", "rank", "op_index", "op", "detail", "state"}
    f = kvsim.run(kvsim.Plan.from_json(my_planner(12, 1, zero_window_block=True))).finding
    assert fields <= set(dir(f))
    assert json.loads(kvsim.run(kvsim.Plan.from_json(my_planner(12, 1, True))).to_json())["outcome"]["invariant"] == f.invariant
