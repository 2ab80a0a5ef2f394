//! One rank's side of the lock-step: after each step, the lagging channel's delay, then the
//! exchange; what each step cost this rank and what it gathered.
//!
//! No device here: the GPU run calls [`RankClock::step`] once a step's work finished on the
//! rank's stream, and the tests call it from plain threads.

use super::exchange::{Exchange, ExchangeError};
use kvsim_core::device::ranks::{agree, RankMsg};
use std::time::{Duration, Instant};

/// What one step cost one rank (host clock, ns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepRecord {
    /// The program step.
    pub step: usize,
    /// From leaving the previous exchange to arriving at this one: issuing the step, its
    /// device work, and the lag delay.
    pub busy_ns: u64,
    /// Of `busy_ns`, the lagging channel's delay.
    pub lag_ns: u64,
    /// Waiting in the exchange for the other ranks (and the exchange itself).
    pub wait_ns: u64,
}

/// The gathered messages of a step differed from what the simulator says the group saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExchangeMismatch {
    /// The program step.
    pub step: usize,
    /// The rank that noticed.
    pub rank: usize,
    /// What differed.
    pub detail: String,
}

/// One rank's lock-step state over its exchange end.
pub struct RankClock<'a> {
    ex: &'a mut dyn Exchange,
    /// Per step: this rank's delay before the exchange (empty: none).
    lag_ns: Vec<u64>,
    /// Per step, per rank: what the simulator says each rank sends.
    expected: &'a [Vec<RankMsg>],
    seq: u64,
    left_at: Instant,
    /// Every step's record, in order.
    pub records: Vec<StepRecord>,
    /// Every step whose gathered messages were not the expected ones.
    pub mismatches: Vec<ExchangeMismatch>,
}

impl<'a> RankClock<'a> {
    /// A clock over `ex`, sending `expected[step][rank]` after each step, delayed `lag_ns[step]`.
    pub fn new(ex: &'a mut dyn Exchange, expected: &'a [Vec<RankMsg>], lag_ns: Vec<u64>) -> Self {
        RankClock {
            ex,
            lag_ns,
            expected,
            seq: 0,
            left_at: Instant::now(),
            records: Vec::new(),
            mismatches: Vec::new(),
        }
    }

    /// A round with no message: every rank is ready; the step clock starts when all are.
    pub fn start(&mut self) -> Result<(), ExchangeError> {
        self.records.clear();
        self.round([0; 4])?;
        self.left_at = Instant::now();
        Ok(())
    }

    fn round(
        &mut self,
        w: kvsim_core::device::ranks::Wire,
    ) -> Result<Vec<kvsim_core::device::ranks::Wire>, ExchangeError> {
        let seq = self.seq;
        self.seq += 1;
        self.ex.all_gather(seq, w)
    }

    /// Step `step`'s work is done on this rank: delay as the lagging channel says, exchange,
    /// check what came back.
    pub fn step(&mut self, step: usize) -> Result<(), ExchangeError> {
        let lag = self.lag_ns.get(step).copied().unwrap_or(0);
        if lag > 0 {
            delay(Duration::from_nanos(lag));
        }
        let arrived = Instant::now();
        let rank = self.ex.rank();
        let want = self.expected.get(step);
        let mine = want.and_then(|w| w.get(rank)).copied().unwrap_or_default();
        let seq = self.seq;
        let got = self.round(mine.to_wire(seq))?;
        let left = Instant::now();
        self.records.push(StepRecord {
            step,
            busy_ns: (arrived - self.left_at).as_nanos() as u64,
            lag_ns: lag,
            wait_ns: (left - arrived).as_nanos() as u64,
        });
        self.left_at = left;
        if let Some(want) = want {
            self.check(step, seq, &got, want);
        }
        Ok(())
    }

    fn check(&mut self, step: usize, seq: u64, got: &[kvsim_core::device::ranks::Wire], want: &[RankMsg]) {
        let rank = self.ex.rank();
        let msgs: Vec<Option<RankMsg>> = got.iter().map(|w| RankMsg::from_wire(w, seq)).collect();
        let detail = if msgs.len() != want.len() {
            Some(format!("{} messages gathered, {} ranks", msgs.len(), want.len()))
        } else if let Some(r) = msgs.iter().position(Option::is_none) {
            Some(format!("rank {r}'s record is not one of round {seq}"))
        } else {
            let msgs: Vec<RankMsg> = msgs.into_iter().flatten().collect();
            let (a, b) = (agree(&msgs), agree(want));
            (msgs != want || a != b).then(|| format!("gathered {msgs:?} (agreed {a:?}), the simulator says {want:?}"))
        };
        if let Some(detail) = detail {
            self.mismatches.push(ExchangeMismatch { step, rank, detail });
        }
    }
}

/// Holds this thread for `d`: sleeps most of a long delay, spins the rest (sleep alone
/// overshoots by tens of microseconds).
pub fn delay(d: Duration) {
    let t0 = Instant::now();
    let spin = Duration::from_micros(200);
    if d > spin {
        std::thread::sleep(d - spin);
    }
    while t0.elapsed() < d {
        std::hint::spin_loop();
    }
}
