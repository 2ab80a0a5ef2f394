//! The lock-step without a device: threads stand in for ranks, sleeps for device work.

use super::*;
use kvsim_core::device::ranks::RankMsg;
use std::time::Duration;

const MS: u64 = 1_000_000;

fn msgs(ranks: usize, steps: usize) -> Vec<Vec<RankMsg>> {
    (0..steps)
        .map(|s| {
            (0..ranks)
                .map(|r| RankMsg {
                    stage_ok: s != 2 || r != 1,
                    free_blocks: (100 * r + s) as u64,
                    injected: (s == 3).then_some(7),
                })
                .collect()
        })
        .collect()
}

/// Every rank runs `steps` steps of `work_ms` each with its lag schedule; returns each rank's clock results.
fn run(
    ranks: usize,
    steps: usize,
    work_ms: u64,
    lag: impl Fn(usize, usize) -> u64 + Sync,
    expected: &[Vec<Vec<RankMsg>>],
) -> Vec<(Vec<StepRecord>, Vec<ExchangeMismatch>)> {
    let ends = HostExchange::group(ranks, Duration::from_secs(20));
    std::thread::scope(|s| {
        let hs: Vec<_> = ends
            .into_iter()
            .enumerate()
            .map(|(r, mut ex)| {
                let lag = &lag;
                s.spawn(move || {
                    let sched = (0..steps).map(|st| lag(r, st)).collect();
                    let mut c = RankClock::new(&mut ex, &expected[r], sched);
                    c.start().unwrap();
                    for st in 0..steps {
                        std::thread::sleep(Duration::from_millis(work_ms));
                        c.step(st).unwrap();
                    }
                    (c.records.clone(), c.mismatches.clone())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn skew(out: &[(Vec<StepRecord>, Vec<ExchangeMismatch>)], step: usize) -> u64 {
    let busy: Vec<u64> = out.iter().map(|(r, _)| r[step].busy_ns).collect();
    busy.iter().max().unwrap() - busy.iter().min().unwrap()
}

#[test]
fn an_injected_lag_lands_on_its_step_and_the_others_wait_there() {
    let (ranks, steps) = (3, 6);
    let m = msgs(ranks, steps);
    let expected = vec![m.clone(); ranks];
    // Rank 1 is 60 ms late at step 3 only.
    let out = run(
        ranks,
        steps,
        2,
        |r, s| if (r, s) == (1, 3) { 60 * MS } else { 0 },
        &expected,
    );
    for (r, (recs, mism)) in out.iter().enumerate() {
        assert!(mism.is_empty(), "rank {r}: {mism:?}");
        assert_eq!(recs.len(), steps);
        assert_eq!(recs[3].lag_ns, if r == 1 { 60 * MS } else { 0 });
    }
    // The lagging rank's step is long, the others wait for it at that step.
    assert!(out[1].0[3].busy_ns >= 60 * MS);
    for r in [0, 2] {
        assert!(out[r].0[3].wait_ns >= 45 * MS, "rank {r}: {:?}", out[r].0[3]);
    }
    assert!(out[1].0[3].wait_ns < 30 * MS, "{:?}", out[1].0[3]);
    assert!(skew(&out, 3) >= 45 * MS, "{}", skew(&out, 3));
    for s in (0..steps).filter(|&s| s != 3) {
        assert!(skew(&out, s) < 30 * MS, "step {s}: {}", skew(&out, s));
    }
}

#[test]
fn a_steady_lag_delays_every_step_of_its_rank() {
    let m = msgs(2, 4);
    let out = run(2, 4, 1, |r, _| if r == 0 { 20 * MS } else { 0 }, &[m.clone(), m]);
    for s in 0..4 {
        assert!(out[1].0[s].wait_ns >= 12 * MS, "step {s}: {:?}", out[1].0[s]);
        assert!(skew(&out, s) >= 12 * MS);
    }
}

#[test]
fn a_rank_sending_other_than_the_simulator_says_is_caught() {
    let m = msgs(2, 4);
    let mut wrong = m.clone();
    wrong[2][1].free_blocks += 1;
    // Rank 1 sends (and expects) from `wrong`: rank 0 gathers a step 2 the simulator did not.
    let out = run(2, 4, 0, |_, _| 0, &[m, wrong]);
    let steps: Vec<usize> = out[0].1.iter().map(|x| x.step).collect();
    assert_eq!(steps, vec![2], "{:?}", out[0].1);
    assert!(
        out[0].1[0].detail.contains("free_blocks: 103"),
        "{}",
        out[0].1[0].detail
    );
    assert!(out[1].1.is_empty());
}

#[test]
fn an_aborting_rank_releases_the_others() {
    let mut ends = HostExchange::group(3, Duration::from_secs(30));
    let mut last = ends.pop().unwrap();
    let t0 = std::time::Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = ends
            .into_iter()
            .map(|mut e| s.spawn(move || e.all_gather(0, [1; 4])))
            .collect();
        std::thread::sleep(Duration::from_millis(20));
        last.abort();
        for h in hs {
            assert_eq!(h.join().unwrap(), Err(ExchangeError::Aborted));
        }
    });
    assert!(t0.elapsed() < Duration::from_secs(10));
    assert_eq!(last.all_gather(0, [0; 4]), Err(ExchangeError::Aborted));
}

#[test]
fn a_missing_rank_times_out_and_ranks_out_of_step_are_an_error() {
    let mut ends = HostExchange::group(2, Duration::from_millis(50));
    match ends[0].all_gather(5, [0; 4]) {
        Err(ExchangeError::Timeout {
            seq: 5,
            arrived: 1,
            ranks: 2,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    let mut ends = HostExchange::group(2, Duration::from_secs(5));
    let mut b = ends.pop().unwrap();
    let mut a = ends.pop().unwrap();
    std::thread::scope(|s| {
        let h = s.spawn(move || a.all_gather(1, [0; 4]));
        std::thread::sleep(Duration::from_millis(20));
        assert!(matches!(
            b.all_gather(2, [0; 4]),
            Err(ExchangeError::OutOfStep {
                rank: 1,
                got: 2,
                want: 1
            })
        ));
        assert_eq!(h.join().unwrap(), Err(ExchangeError::Aborted));
    });
}

#[test]
fn the_host_exchange_gathers_in_rank_order_round_after_round() {
    let ends = HostExchange::group(4, Duration::from_secs(20));
    std::thread::scope(|s| {
        let hs: Vec<_> = ends
            .into_iter()
            .map(|mut e| {
                s.spawn(move || {
                    (0..50u64)
                        .map(|seq| e.all_gather(seq, [e.rank() as u64, seq, 0, 0]).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in hs {
            for (seq, got) in h.join().unwrap().into_iter().enumerate() {
                let want: Vec<[u64; 4]> = (0..4).map(|r| [r, seq as u64, 0, 0]).collect();
                assert_eq!(got, want);
            }
        }
    });
}

#[test]
fn nccl_is_a_typed_error_in_this_build() {
    let e = nccl::nccl_group(4, 1).err().expect("no NCCL here");
    assert_eq!(
        e.to_string(),
        "NCCL exchange needs 4 devices; this build/machine has 1: NCCL needs one device per rank (4 ranks)"
    );
    assert!(matches!(
        nccl::nccl_group(2, 2),
        Err(ExchangeError::NcclUnavailable { needed: 2, have: 0, .. })
    ));
}
