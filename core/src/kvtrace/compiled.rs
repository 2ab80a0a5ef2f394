//! A trace compiled once (fields checked, ids interned, tokens laid out in op
//! order) and then replayed any number of times, with observation lines or
//! through the model alone: what benchmarks time.

use serde_json::Value;

use super::compile::{compile_op, Op, OpData};
use super::config::parse_config;
use super::exec::Replayer;
use super::observed::{config_error_line, Observed};
use super::replay::{refused, split_trace, stopped, ReplayEnd};
use super::TraceError;
use crate::kv::{ConfigError, KvCacheManager, KvConfig};

/// Storage that quiet replays leave for the next one (`run_quiet_reusing`).
#[derive(Default)]
pub struct ReplayStorage(Option<Replayer>);

impl ReplayStorage {
    /// A replayer over a fresh model of `cfg` (already validated), built in this storage.
    fn replayer(&mut self, cfg: &KvConfig) -> &mut Replayer {
        match &mut self.0 {
            Some(r) => {
                r.reset_to(cfg);
                r
            }
            none => none.insert(Replayer::new(
                KvCacheManager::new(cfg.clone()).expect("validated by parse_config"),
            )),
        }
    }
}

/// A trace ready to replay, any number of times.
pub struct CompiledTrace {
    /// The validated config, or the `ConfigError` line that refuses it.
    pub(super) config: Result<KvConfig, String>,
    pub(super) data: OpData,
    pub(super) ops: Vec<Op>,
}

/// Check a parsed trace's shape and config and compile its ops.
pub fn compile(v: &Value) -> Result<CompiledTrace, TraceError> {
    let (config, ops) = split_trace(v)?;
    Ok(compile_parts(parse_config(config), || {
        let mut data = OpData::default();
        let ops = ops.iter().map(|op| compile_op(op, &mut data)).collect();
        (ops, data)
    }))
}

/// A trace of `config` (as `parse_config` read it) whose ops `ops` compiles
/// (only once the config is valid: a refused trace has no ops).
pub(super) fn compile_parts(
    config: Result<KvConfig, ConfigError>,
    ops: impl FnOnce() -> (Vec<Op>, OpData),
) -> CompiledTrace {
    match config {
        Err(e) => CompiledTrace {
            config: Err(config_error_line(&e.0)),
            data: OpData::default(),
            ops: Vec::new(),
        },
        Ok(cfg) => {
            let (ops, mut data) = ops();
            // Every id is interned now: rank them by name once, so that a replay places
            // each new request in name order by an integer compare.
            data.ids.rank_names();
            CompiledTrace {
                config: Ok(cfg),
                ops,
                data,
            }
        }
    }
}

impl CompiledTrace {
    /// Ops in the trace (none when the config is refused).
    pub fn num_ops(&self) -> usize {
        self.ops.len()
    }

    /// Replay through the model without observation lines; returns the number
    /// of ops applied, the failing one included.
    pub fn run_quiet(&self) -> usize {
        self.run_quiet_reusing(&mut ReplayStorage::default())
    }

    /// `run_quiet` over a model built in `storage`, reusing what earlier replays
    /// left there (the model is reset to this trace's fresh one, not carried over).
    pub fn run_quiet_reusing(&self, storage: &mut ReplayStorage) -> usize {
        let Ok(cfg) = &self.config else { return 0 };
        let r = storage.replayer(cfg);
        r.quiet();
        // No running index: the ops applied are those the iterator has passed.
        let mut ops = self.ops.iter();
        for op in ops.by_ref() {
            if r.apply_inline(&self.data, op).is_err() {
                return self.ops.len() - ops.len();
            }
        }
        self.ops.len()
    }

    /// Replay, handing each observation line (no newline) to `line`; returns
    /// how the replay ended and the number of ops applied.
    pub fn run(&self, mut line: impl FnMut(&str)) -> (ReplayEnd, usize) {
        let cfg = match &self.config {
            Ok(cfg) => cfg,
            Err(refused_line) => {
                line(refused_line);
                return (refused(), 0);
            }
        };
        let mut o = Observed::new(cfg.clone(), None, &self.data);
        line(o.line());
        for (i, &op) in self.ops.iter().enumerate() {
            let error = o.step(&self.data, i, op);
            line(o.line());
            if let Some(kind) = error {
                return (stopped(i, kind), i + 1);
            }
        }
        (ReplayEnd::Completed, self.ops.len())
    }
}

#[cfg(test)]
mod tests {
    use super::{compile, CompiledTrace, ReplayStorage};
    use crate::kv::state_text::model_state;
    use crate::kv::{shortcuts, KvCacheManager};
    use crate::kvtrace::compile::{Op, OpData};
    use crate::kvtrace::exec::{OpError, Outcome, Replayer};
    use crate::kvtrace::gen::generate;
    use crate::kvtrace::live::Live;
    use crate::kvtrace::observed::render_init;

    /// The whole observable state (every section of an observation line), rendered afresh.
    fn state(r: &Replayer, data: &OpData) -> String {
        let mut line = String::new();
        render_init(r, data, &mut Default::default(), &mut line);
        line
    }

    /// Traces to compare replay modes on: generated ones (every layout) and every
    /// trace under tests/data (edge cases and errors).
    fn test_traces() -> Vec<CompiledTrace> {
        let mut out: Vec<CompiledTrace> = (0..160)
            .map(|i| compile(&generate(11, i)).expect("a generated trace compiles"))
            .collect();
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
        for dir in ["kvtrace_examples", "kvtrace_reference"] {
            let mut files: Vec<_> = std::fs::read_dir(data.join(dir))
                .expect("tests/data is there")
                .map(|e| e.expect("a readable entry").path())
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect();
            files.sort();
            for f in files {
                let text = std::fs::read_to_string(&f).expect("a readable trace");
                if let Ok(t) = crate::kvtrace::compile_text(&text) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// A live request as a later op reads it: renewed if no op has read it yet
    /// (`Live::read`), its pending hashes computed.
    fn request_text(l: &Live, data: &OpData) -> String {
        let mut l = l.clone();
        l.read(data).req.hash_pending();
        format!("{:?} {:?}", l.req, l.uncommitted)
    }

    /// How a replayer under comparison runs: quietly or observed, and whether the model
    /// may take its shortcuts (`kv::shortcuts`).
    #[derive(Clone, Copy)]
    struct Mode {
        quiet: bool,
        shortcuts: bool,
    }

    fn apply(r: &mut Replayer, mode: Mode, data: &OpData, op: Op) -> Result<Outcome, OpError> {
        if mode.shortcuts {
            r.apply(data, op)
        } else {
            shortcuts::without(|| r.apply(data, op))
        }
    }

    /// Replay every test trace through a replayer in each mode (`b` in reused storage)
    /// and assert the same outcome and the same whole state after every op.
    fn assert_modes_agree(a_mode: Mode, b_mode: Mode) {
        let mut storage = ReplayStorage::default();
        let (mut traces, mut ops) = (0, 0);
        for (i, t) in test_traces().iter().enumerate() {
            let Ok(cfg) = &t.config else { continue };
            let mut a = Replayer::new(KvCacheManager::new(cfg.clone()).unwrap());
            let b = storage.replayer(cfg);
            for (r, mode) in [(&mut a, a_mode), (&mut *b, b_mode)] {
                if mode.quiet {
                    r.quiet();
                }
            }
            for (k, &op) in t.ops.iter().enumerate() {
                let (x, y) = (apply(&mut a, a_mode, &t.data, op), apply(b, b_mode, &t.data, op));
                let message = |r: &Result<Outcome, OpError>| match r {
                    Ok(o) => format!("{o:?}"),
                    Err(OpError::Invalid(m)) => m.clone(),
                    Err(OpError::Model(e)) => e.to_string(),
                };
                assert_eq!(message(&x), message(&y), "trace {i} op {k}");
                assert_eq!(model_state(b.kv()), model_state(a.kv()), "trace {i} op {k}");
                assert_eq!(b.new_blocks, a.new_blocks, "trace {i} op {k}");
                assert_eq!(b.pending(), a.pending(), "trace {i} op {k}");
                for id in 0..t.data.ids.count() as u32 {
                    let (q, o) = (b.get(id), a.get(id));
                    let text = |l: &Live| request_text(l, &t.data);
                    assert_eq!(q.map(text), o.map(text), "trace {i} op {k} id {id}");
                }
                ops += 1;
                if x.is_err() {
                    break;
                }
            }
            traces += 1;
        }
        assert!(traces > 190 && ops > 30_000, "{traces} traces, {ops} ops");
    }

    #[test]
    fn a_quiet_replay_counts_the_ops_an_observed_one_applies() {
        let config = r#"{"block_size":8,"enable_caching":true,"groups":[{"kind":"full_attention"}],"max_in_flight_tokens":23,"max_model_len":80,"num_blocks":12}"#;
        let ops = r#"[{"op":"new_step"},{"op":"bogus"},{"op":"new_step"}]"#;
        let failing = format!(r#"{{"format":"kvtrace/1","config":{config},"ops":{ops}}}"#);
        let failing = crate::kvtrace::compile_text(&failing).expect("a well-formed trace");
        assert_eq!(failing.run_quiet(), 2, "stops at the failing op, counting it");
        for (i, t) in test_traces().iter().chain([&failing]).enumerate() {
            assert_eq!(t.run_quiet(), t.run(|_| {}).1, "trace {i}");
        }
    }

    #[test]
    fn a_quiet_replay_changes_the_model_like_an_observed_one() {
        let on = |quiet| Mode { quiet, shortcuts: true };
        assert_modes_agree(on(false), on(true));
    }

    #[test]
    fn the_models_shortcuts_change_it_like_the_steps_they_skip() {
        let quiet = |shortcuts| Mode { quiet: true, shortcuts };
        assert_modes_agree(quiet(false), quiet(true));
    }

    /// A lookup keyed like the last one of the previous replay in the same storage (same
    /// request number, hashes, tokens and hash version) is looked up afresh.
    #[test]
    fn a_replay_in_reused_storage_does_not_take_the_last_replays_lookup() {
        let trace = |a: u32| {
            let prompt = |from: u32| format!("{:?}", (from..from + 9).collect::<Vec<u32>>());
            let (p0, p1) = (prompt(a), prompt(a + 1000 * u32::from(a != 1)));
            let config = r#"{"block_size":4,"enable_caching":true,"groups":[{"kind":"full_attention"}],"max_in_flight_tokens":16,"max_model_len":64,"num_blocks":16}"#;
            let ops = format!(
                r#"[{{"op":"add_request","id":"a","prompt":{p0}}},{{"op":"allocate_slots","id":"a","num_new_tokens":9}},{{"op":"add_request","id":"b","prompt":{p1}}},{{"op":"get_computed_blocks","id":"b"}}]"#
            );
            crate::kvtrace::compile_text(&format!(r#"{{"format":"kvtrace/1","config":{config},"ops":{ops}}}"#))
                .expect("a well-formed trace")
        };
        let (first, second) = (trace(1), trace(50));
        let mut storage = ReplayStorage::default();
        for t in [&first, &second] {
            let cfg = t.config.as_ref().expect("a valid config");
            let mut fresh = Replayer::new(KvCacheManager::new(cfg.clone()).unwrap());
            let reused = storage.replayer(cfg);
            for &op in &t.ops {
                assert!(fresh.apply(&t.data, op).is_ok() && reused.apply(&t.data, op).is_ok());
            }
            assert_eq!(reused.pending(), fresh.pending());
        }
        let hit = |t: &CompiledTrace| {
            let mut r = Replayer::new(KvCacheManager::new(t.config.clone().unwrap()).unwrap());
            t.ops.iter().for_each(|&op| assert!(r.apply(&t.data, op).is_ok()));
            r.pending().expect("a lookup").1.num_computed_tokens
        };
        assert_eq!(
            (hit(&first), hit(&second)),
            (8, 0),
            "the first trace hits, the second does not"
        );
    }

    #[test]
    fn a_model_built_in_reused_storage_replays_like_a_fresh_one() {
        let mut storage = ReplayStorage::default();
        let (mut traces, mut ops) = (0, 0);
        for i in 0..120 {
            let t = compile(&generate(11, i)).expect("a generated trace compiles");
            let Ok(cfg) = &t.config else { continue };
            let mut fresh = Replayer::new(KvCacheManager::new(cfg.clone()).unwrap());
            let reused = storage.replayer(cfg);
            assert_eq!(state(reused, &t.data), state(&fresh, &t.data), "trace {i}: init");
            for (k, &op) in t.ops.iter().enumerate() {
                let (a, b) = (fresh.apply(&t.data, op), reused.apply(&t.data, op));
                assert_eq!(a.is_ok(), b.is_ok(), "trace {i} op {k}");
                assert_eq!(state(reused, &t.data), state(&fresh, &t.data), "trace {i} op {k}");
                assert_eq!(reused.new_blocks, fresh.new_blocks, "trace {i} op {k}");
                ops += 1;
                if a.is_err() {
                    break;
                }
            }
            traces += 1;
        }
        assert!(traces > 100 && ops > 10_000, "{traces} traces, {ops} ops");
    }
}
