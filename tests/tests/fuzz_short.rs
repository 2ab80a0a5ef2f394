//! A short run of the robustness fuzzer (the long run is `kvsim fuzz --iterations 1000000`):
//! arbitrary bytes, arbitrary JSON and mutated valid plans and kvtraces never panic.

use kvsim_sim::fuzz::{fuzz, seed_plan};

#[test]
fn loaders_and_executor_never_panic_on_fuzzed_input() {
    std::panic::set_hook(Box::new(|_| {}));
    let s = fuzz(42, 4000);
    let _ = std::panic::take_hook();
    assert_eq!(s.iterations, 4000);
    assert!(
        s.plans_accepted > 0 && s.traces_replayed > 0,
        "the fuzzer must reach the executor: {s:?}"
    );
    assert!(
        s.crashes.is_empty(),
        "{:?}",
        s.crashes
            .first()
            .map(|c| (&c.message, c.input.chars().take(300).collect::<String>()))
    );
}

#[test]
fn the_fuzz_seed_plan_is_valid_and_runs_clean() {
    let plan = kvsim_core::plan::load_plan(&seed_plan().to_string()).expect("seed plan loads");
    let r = kvsim_sim::exec::run_plan(&plan);
    assert!(r.passed(), "{:?}", r.outcome);
}
