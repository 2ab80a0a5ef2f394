//! The JSON Schema of every format kvsim reads or writes (`kvsim schema NAME`, `--list`).
//!
//! Each schema is derived (schemars) from the type that writes or reads the format; where a
//! writer builds JSON with `json!` (keys sorted, so a typed struct would change the bytes) a
//! schema-only mirror type beside it or in this folder describes it. Objects kvsim writes are
//! closed (`additionalProperties: false`). `tests/tests/schemas.rs` validates every file the
//! tests write against its schema and shows an unknown field or a wrong type rejected in every
//! object; `snapshots/schemas/` holds each schema, reviewed.

mod gpu_result;
mod kvtrace;
mod outputs;

use schemars::gen::SchemaSettings;
use schemars::JsonSchema;
use serde_json::Value;

/// One format: its name for `kvsim schema NAME`, a line saying what it is, its schema.
pub struct Format {
    pub name: &'static str,
    pub description: &'static str,
    schema: fn() -> Value,
}

impl Format {
    pub fn schema(&self) -> Value {
        (self.schema)()
    }
}

/// Every format, in `--list` order.
pub const FORMATS: &[Format] = &[
    Format {
        name: "plan",
        description:
            "kvsim-plan/1: a scenario and the steps a planner took (kvsim replay PLAN; sweep/dynamo run --plan-out)",
        schema: plan,
    },
    Format {
        name: "artifact",
        description: "a rank artifact with Dynamo's field names (kvsim sweep --out, replay --artifact-out)",
        schema: || schema::<kvsim_core::fpm::artifact::RankArtifact>(),
    },
    Format {
        name: "scenario",
        description: "a scenario file: layout, pool, scheduler and benchmark settings (--scenario-file)",
        schema: || schema::<kvsim_core::fpm::scenarios::BuiltinScenario>(),
    },
    Format {
        name: "replay",
        description: "kvsim-replay/1 of the simulator (kvsim replay PLAN --out FILE)",
        schema: || schema::<kvsim_sim::exec::SimResult>(),
    },
    Format {
        name: "replay-gpu",
        description: "kvsim-replay/1 of the GPU backend (kvsim replay PLAN --backend gpu --out FILE)",
        schema: || schema::<gpu_result::GpuResult>(),
    },
    Format {
        name: "predict",
        description: "kvsim-predict/1: the cost model's predicted device times (kvsim predict --out)",
        schema: predict,
    },
    Format {
        name: "profile",
        description: "kvsim-profile/1: the cost model's parameters (kvsim calibrate --out; predict --profile)",
        schema: profile,
    },
    Format {
        name: "compare",
        description: "kvsim-compare/1: predicted vs measured per point (kvsim compare --out)",
        schema: || schema::<outputs::Comparison>(),
    },
    Format {
        name: "check",
        description: "kvsim-check/1: the swarm's report (kvsim check --json; read by check merge)",
        schema: || schema::<kvsim_sim::check::suite::CheckReport>(),
    },
    Format {
        name: "mutants",
        description: "kvsim-check-mutants/1: the mutant hunt's report (kvsim check --mutant NAME|all --json)",
        schema: || schema::<outputs::MutantsReport>(),
    },
    Format {
        name: "kvtrace",
        description: "kvtrace/1 as kvsim writes it (kvsim gen-traces; read by trace, conformance)",
        schema: || schema::<kvtrace::Kvtrace>(),
    },
];

/// The format called `name`.
pub fn find(name: &str) -> Option<&'static Format> {
    FORMATS.iter().find(|f| f.name == name)
}

fn generator() -> schemars::gen::SchemaGenerator {
    SchemaSettings::draft07().into_generator()
}

fn schema<T: JsonSchema>() -> Value {
    serde_json::to_value(generator().into_root_schema_for::<T>()).expect("schemas serialize")
}

/// The plan, its `benchmark` record (JSON in the plan layer) described as the sweep planner's
/// `BenchmarkMeta`, which kvsim's commands read strictly (`load_plan_checked`).
fn plan() -> Value {
    let mut gen = generator();
    let record = gen.subschema_for::<kvsim_core::fpm::sweep::BenchmarkMeta>();
    let mut v = serde_json::to_value(gen.into_root_schema_for::<kvsim_core::plan::Plan>()).expect("schemas serialize");
    let record = serde_json::to_value(record).expect("schemas serialize");
    v["properties"]["benchmark"] = serde_json::json!({
        "description": v["properties"]["benchmark"]["description"],
        "anyOf": [record, {"type": "null"}],
    });
    v
}

/// The profile: parameters added after profiles were written may be absent (the loader fills
/// them in from the parameter each stood for, or with 0 for a term the file did not have), so
/// they are not required.
fn profile() -> Value {
    let mut v = schema::<kvsim_sim::cost::Profile>();
    let optional: Vec<&str> = kvsim_sim::cost::profile::ADDED_PARAMS
        .iter()
        .map(|(name, _)| *name)
        .chain(kvsim_sim::cost::profile::ADDED_ZERO_PARAMS.iter().copied())
        .collect();
    if let Some(Value::Array(req)) = v.pointer_mut("/definitions/Params/required") {
        req.retain(|r| !optional.contains(&r.as_str().unwrap_or("")));
    }
    v
}

/// The prediction: `--describe` ops are the cost description's ops plus `predicted_us_alone`.
fn predict() -> Value {
    let mut v = schema::<outputs::Prediction>();
    let defs = v["definitions"].as_object_mut().expect("a schema with definitions");
    let mut op = defs["OpDesc"].clone();
    for variant in op["oneOf"].as_array_mut().into_iter().flatten() {
        if let Some(props) = variant["properties"].as_object_mut() {
            props.insert(
                "predicted_us_alone".into(),
                serde_json::json!({"type": "number", "description": "The op's predicted device time alone (µs)."}),
            );
        }
    }
    op["description"] = "An op of the cost description (`OpDesc`) with its predicted time alone.".into();
    defs.insert("DescribedOp".into(), op);
    v
}
