//! The per-step exchange between ranks: an all-gather of one fixed-size record per rank.
//!
//! [`HostExchange`] is the host-side one (threads of one process, a mutex, a condition variable
//! and a shared buffer): it serves ranks that share a device, and ranks on several devices of
//! one host as well. [`super::nccl`] is where a device-side one (NCCL) would go.

use kvsim_core::device::ranks::Wire;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Why an exchange round failed. Never a hang: a rank that gives up aborts the others.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ExchangeError {
    /// Another rank gave up (an error on its device or thread).
    #[error("another rank aborted the exchange")]
    Aborted,
    /// Not every rank arrived in time.
    #[error("exchange round {seq} timed out after {waited_ms} ms: {arrived} of {ranks} ranks arrived")]
    Timeout {
        /// The round.
        seq: u64,
        /// Ranks that arrived.
        arrived: usize,
        /// Ranks in all.
        ranks: usize,
        /// How long this rank waited.
        waited_ms: u64,
    },
    /// Ranks disagree on the round they are in (a protocol error, not a wait).
    #[error("rank {rank} is in exchange round {got} but the group is in round {want}")]
    OutOfStep {
        /// The rank.
        rank: usize,
        /// Its round.
        got: u64,
        /// The group's round.
        want: u64,
    },
    /// This build or machine has no such exchange.
    #[error("NCCL exchange needs {needed} devices; this build/machine has {have}: {why}")]
    NcclUnavailable {
        /// Devices the ranks need (one per rank).
        needed: usize,
        /// Devices usable for NCCL here.
        have: usize,
        /// What is missing.
        why: String,
    },
}

/// One rank's end of an exchange.
pub trait Exchange: Send {
    /// `host` or `nccl`.
    fn kind(&self) -> &'static str;
    /// This end's rank.
    fn rank(&self) -> usize;
    /// Ranks in the group.
    fn ranks(&self) -> usize;
    /// Round `seq`: sends `msg`, returns every rank's message in rank order once all arrived.
    fn all_gather(&mut self, seq: u64, msg: Wire) -> Result<Vec<Wire>, ExchangeError>;
    /// Fails every waiting and later round on every rank (this rank gives up).
    fn abort(&mut self);
}

struct State {
    /// The round being gathered (valid while `arrived > 0`).
    seq: u64,
    arrived: usize,
    slots: Vec<Wire>,
    /// The last completed round's messages.
    done: Vec<Wire>,
    /// Completed rounds: a waiter leaves when it changes.
    generation: u64,
    aborted: bool,
}

struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    timeout: Duration,
}

/// The host-side exchange: one [`HostExchange`] per rank, all over one shared buffer.
pub struct HostExchange {
    rank: usize,
    ranks: usize,
    shared: Arc<Shared>,
}

impl HostExchange {
    /// One end per rank of a new exchange; a round waits at most `timeout` for the others.
    pub fn group(ranks: usize, timeout: Duration) -> Vec<HostExchange> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                seq: 0,
                arrived: 0,
                slots: vec![[0; 4]; ranks],
                done: Vec::new(),
                generation: 0,
                aborted: false,
            }),
            cv: Condvar::new(),
            timeout,
        });
        (0..ranks)
            .map(|rank| HostExchange {
                rank,
                ranks,
                shared: shared.clone(),
            })
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked while holding the lock left consistent data (plain stores).
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Exchange for HostExchange {
    fn kind(&self) -> &'static str {
        "host"
    }

    fn rank(&self) -> usize {
        self.rank
    }

    fn ranks(&self) -> usize {
        self.ranks
    }

    fn all_gather(&mut self, seq: u64, msg: Wire) -> Result<Vec<Wire>, ExchangeError> {
        let mut st = self.lock();
        if st.aborted {
            return Err(ExchangeError::Aborted);
        }
        if st.arrived == 0 {
            st.seq = seq;
        } else if st.seq != seq {
            let want = st.seq;
            st.aborted = true;
            self.shared.cv.notify_all();
            return Err(ExchangeError::OutOfStep {
                rank: self.rank,
                got: seq,
                want,
            });
        }
        st.slots[self.rank] = msg;
        st.arrived += 1;
        let n = st.slots.len();
        if st.arrived == n {
            st.done = st.slots.clone();
            st.arrived = 0;
            st.generation += 1;
            self.shared.cv.notify_all();
            return Ok(st.done.clone());
        }
        let generation = st.generation;
        let t0 = Instant::now();
        // The next round cannot complete before this rank joins it, so `done` is still ours.
        while st.generation == generation && !st.aborted {
            let left = self.shared.timeout.saturating_sub(t0.elapsed());
            if left.is_zero() {
                let arrived = st.arrived;
                st.aborted = true;
                self.shared.cv.notify_all();
                return Err(ExchangeError::Timeout {
                    seq,
                    arrived,
                    ranks: n,
                    waited_ms: t0.elapsed().as_millis() as u64,
                });
            }
            st = self
                .shared
                .cv
                .wait_timeout(st, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        if st.generation == generation {
            return Err(ExchangeError::Aborted);
        }
        Ok(st.done.clone())
    }

    fn abort(&mut self) {
        let mut st = self.lock();
        st.aborted = true;
        self.shared.cv.notify_all();
    }
}
