//! The parts of vLLM's `Request` the KV-cache manager reads (vllm_kv.md §6.2).

use super::hash::{extend_block_hashes, BlockHash};

/// A request handle; the scheduler (or trace replayer) maps its own ids onto these.
pub type ReqId = u32;

/// `RequestStatus`, restricted to what the core model distinguishes (§6.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RequestStatus {
    /// Waiting for admission.
    Waiting,
    /// Admitted and running.
    Running,
    /// Preempted; its blocks freed.
    Preempted,
    /// Finished: a stop token.
    FinishedStopped,
    /// Finished: the length cap.
    FinishedLengthCapped,
    /// Finished: aborted.
    FinishedAborted,
}

impl RequestStatus {
    /// `is_finished`: any status after PREEMPTED.
    pub fn is_finished(self) -> bool {
        self > RequestStatus::Preempted
    }
}

/// A request as the KV manager reads it (vLLM's `Request` fields it uses).
#[derive(Debug)]
pub struct Request {
    /// Its dense id.
    pub id: ReqId,
    /// Prompt plus appended outputs.
    pub tokens: Vec<u64>,
    /// Prompt tokens.
    pub num_prompt_tokens: u64,
    /// Tokens with KV computed.
    pub num_computed_tokens: u64,
    /// Scheduled tokens whose output has not been processed (0 in synchronous mode).
    pub num_in_flight_tokens: u64,
    /// Async-scheduling output placeholders (dynamo_fpm.md §11).
    pub num_output_placeholders: u64,
    /// Hashes at `hash_block_size`; empty when prefix caching is off.
    pub block_hashes: Vec<BlockHash>,
    /// The cache salt (first block only).
    pub cache_salt: Option<String>,
    /// The longest single-group hit beyond the agreed one (set by lookups).
    pub shared_prefix_boundary: u64,
    /// Its status.
    pub status: RequestStatus,
    /// Skip prefix-cache lookups.
    pub skip_reading_prefix_cache: bool,
    /// `None` when caching is off: no hasher, no hashes (§2.5).
    hash_block_size: Option<u64>,
    /// `block_hashes` is not computed yet (`renew_unhashed`): `hash_pending` computes it.
    hashes_pending: bool,
}

reuse_clone!(Request {
    id,
    tokens,
    num_prompt_tokens,
    num_computed_tokens,
    num_in_flight_tokens,
    num_output_placeholders,
    block_hashes,
    cache_salt,
    shared_prefix_boundary,
    status,
    skip_reading_prefix_cache,
    hash_block_size,
    hashes_pending
});

impl Request {
    /// A waiting request of `prompt`; hashed when `hash_block_size` is given.
    pub fn new(id: ReqId, prompt: Vec<u64>, cache_salt: Option<String>, hash_block_size: Option<u64>) -> Self {
        // Room for every hash the tokens' capacity can reach (no regrowth).
        let hashes = Vec::with_capacity(hash_block_size.map_or(0, |b| prompt.capacity() / b.max(1) as usize));
        let mut r = Request {
            id,
            num_prompt_tokens: prompt.len() as u64,
            tokens: prompt,
            num_computed_tokens: 0,
            num_in_flight_tokens: 0,
            num_output_placeholders: 0,
            block_hashes: hashes,
            cache_salt,
            shared_prefix_boundary: 0,
            status: RequestStatus::Waiting,
            skip_reading_prefix_cache: false,
            hash_block_size,
            hashes_pending: false,
        };
        r.update_block_hashes();
        r
    }

    /// Become `new(id, prompt, ..)` in place, keeping this request's token
    /// and hash buffers (the tokens with room for at least `room` of them): a replay
    /// renewing a retired request's slot then moves no request around.
    pub fn renew(
        &mut self,
        id: ReqId,
        prompt: &[u64],
        room: usize,
        cache_salt: Option<&str>,
        hash_block_size: Option<u64>,
    ) {
        self.renew_unhashed(id, prompt, room, cache_salt, hash_block_size);
        self.hash_pending();
    }

    /// `renew`, leaving the block hashes to `hash_pending`: a quiet replay hashes a
    /// request only once the model first reads it, and a trace that ends with requests
    /// still waiting never hashes those. The hashes are a function of the tokens, so
    /// computing them late gives the same ones.
    pub fn renew_unhashed(
        &mut self,
        id: ReqId,
        prompt: &[u64],
        room: usize,
        cache_salt: Option<&str>,
        hash_block_size: Option<u64>,
    ) {
        // Every field named: a new one must be renewed here too.
        let Request {
            id: my_id,
            tokens,
            num_prompt_tokens,
            num_computed_tokens,
            num_in_flight_tokens,
            num_output_placeholders,
            block_hashes,
            cache_salt: my_salt,
            shared_prefix_boundary,
            status,
            skip_reading_prefix_cache,
            hash_block_size: my_hbs,
            hashes_pending,
        } = self;
        tokens.clear();
        tokens.reserve(room);
        tokens.extend_from_slice(prompt);
        block_hashes.clear();
        *my_id = id;
        *num_prompt_tokens = prompt.len() as u64;
        (*num_computed_tokens, *num_in_flight_tokens, *num_output_placeholders) = (0, 0, 0);
        // A salt replacing a salt reuses its storage (no allocation per salted request).
        match (my_salt.as_mut(), cache_salt) {
            (Some(mine), Some(salt)) => {
                mine.clear();
                mine.push_str(salt);
            }
            (_, salt) => *my_salt = salt.map(str::to_string),
        }
        *shared_prefix_boundary = 0;
        *status = RequestStatus::Waiting;
        *skip_reading_prefix_cache = false;
        *my_hbs = hash_block_size;
        *hashes_pending = hash_block_size.is_some();
    }

    /// Compute the block hashes `renew_unhashed` left out (nothing if none are pending).
    #[inline]
    pub fn hash_pending(&mut self) {
        if self.hashes_pending {
            self.hash_now();
        }
    }

    #[inline(never)]
    fn hash_now(&mut self) {
        self.hashes_pending = false;
        // Room for every hash the tokens' capacity can reach (no regrowth as outputs come).
        let room = self
            .hash_block_size
            .map_or(0, |b| self.tokens.capacity() / b.max(1) as usize);
        self.block_hashes.reserve(room);
        self.update_block_hashes();
    }

    /// Prompt and output tokens.
    pub fn num_tokens(&self) -> u64 {
        self.tokens.len() as u64
    }

    /// `append_output_token_ids`: extends the tokens and the hash chain. Inlined: a
    /// commit appends one token and nearly always completes no block.
    #[inline(always)]
    pub fn append_output(&mut self, out: &[u64]) {
        // Nearly every commit appends one decoded token: a push, not a memcpy call.
        match out {
            [t] => self.tokens.push(*t),
            _ => self.tokens.extend_from_slice(out),
        }
        // Pending hashes cover every full block once computed, outputs included.
        if !self.hashes_pending {
            self.update_block_hashes();
        }
    }

    /// Inlined: a commit asks it for every token appended, and nearly always no block
    /// completes (a call cost as much as the test).
    #[inline(always)]
    fn update_block_hashes(&mut self) {
        if let Some(hbs) = self.hash_block_size {
            // Most appends (one decoded token) complete no block: nothing to hash.
            if (self.block_hashes.len() as u64 + 1) * hbs > self.tokens.len() as u64 {
                return;
            }
            self.hash_full_blocks(hbs);
        }
    }

    #[inline(never)]
    fn hash_full_blocks(&mut self, hbs: u64) {
        extend_block_hashes(
            &mut self.block_hashes,
            &self.tokens,
            hbs as usize,
            self.cache_salt.as_deref(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{Request, RequestStatus};

    #[test]
    fn only_the_statuses_after_preempted_are_finished() {
        use RequestStatus::*;
        for s in [Waiting, Running, Preempted] {
            assert!(!s.is_finished(), "{s:?}");
        }
        for s in [FinishedStopped, FinishedLengthCapped, FinishedAborted] {
            assert!(s.is_finished(), "{s:?}");
        }
        assert!(
            !Request::new(0, vec![1, 2, 3], None, Some(2)).status.is_finished(),
            "a new request waits"
        );
    }

    #[test]
    fn a_renewed_request_is_a_new_one() {
        let mut r = Request::new(4, vec![9; 13], Some("salt".into()), Some(4));
        r.append_output(&[1, 2, 3]);
        (r.num_computed_tokens, r.num_in_flight_tokens, r.num_output_placeholders) = (12, 1, 2);
        (r.shared_prefix_boundary, r.status, r.skip_reading_prefix_cache) = (8, RequestStatus::Running, true);
        // A salt after a salt (its storage reused), none after one, one after none.
        let salts = [Some("t"), None, Some("s"), None].map(|s| s.map(str::to_string));
        for (salt, hbs) in salts.into_iter().zip([Some(2), Some(2), Some(4), None]) {
            let prompt = [5, 6, 7, 8, 9];
            r.renew(7, &prompt, 64, salt.as_deref(), hbs);
            let fresh = Request::new(7, prompt.to_vec(), salt, hbs);
            assert_eq!(format!("{r:?}"), format!("{fresh:?}"));
            assert!(r.tokens.capacity() >= 64, "room for the outputs");
        }
    }

    #[test]
    fn hashes_computed_late_are_the_hashes_computed_up_front() {
        let mut late = Request::new(0, vec![], None, None);
        for (salt, hbs) in [(None, Some(2)), (Some("s".to_string()), Some(4)), (None, None)] {
            let prompt: Vec<u64> = (0..11).collect();
            late.renew_unhashed(3, &prompt, 64, salt.as_deref(), hbs);
            assert!(late.block_hashes.is_empty(), "nothing hashed yet");
            late.append_output(&[20]);
            late.append_output(&[21, 22, 23, 24]);
            late.hash_pending();
            let mut eager = Request::new(3, prompt, salt, hbs);
            eager.append_output(&[20]);
            eager.append_output(&[21, 22, 23, 24]);
            assert_eq!(format!("{late:?}"), format!("{eager:?}"));
            assert_eq!(late.block_hashes.len(), hbs.map_or(0, |b| 16 / b as usize));
            // Later outputs are hashed as they complete blocks, as in an eager request.
            late.append_output(&[25, 26, 27, 28]);
            eager.append_output(&[25, 26, 27, 28]);
            late.hash_pending();
            assert_eq!(format!("{late:?}"), format!("{eager:?}"));
        }
    }
}
