//! Live requests by interned id, in a slab: memory grows with the requests
//! live at once, not with every id a trace names, and a freed request's token
//! and hash buffers are reused by the next request.

use super::compile::{OpData, Span, Str};
use crate::kv::{ReqId, Request, RequestStatus};

#[derive(Clone)]
pub struct Live {
    pub req: Request,
    /// `num_new_tokens` of the last successful allocation, until commit or preempt.
    pub uncommitted: Option<u64>,
    /// A quiet replay's request that no op has read yet (`Slots::insert_unread`):
    /// `read` renews `req` from this. About half the requests of a generated trace are
    /// still waiting when it ends; their prompts are never copied.
    unread: Option<Unread>,
}

/// `Request::renew_unhashed`'s arguments, kept until a request is first read.
#[derive(Clone, Copy)]
pub(super) struct Unread {
    pub prompt: Span,
    pub salt: Option<Str>,
    pub room: usize,
    pub hash_block_size: Option<u64>,
}

impl Live {
    /// Whether an op has read the request since it was made live (`read`).
    #[inline(always)]
    pub fn is_read(&self) -> bool {
        self.unread.is_none()
    }

    /// The request, renewed first if no op has read it yet.
    #[inline(always)]
    pub(super) fn read(&mut self, data: &OpData) -> &mut Self {
        if let Some(u) = self.unread.take() {
            let salt = u.salt.map(|s| data.str(s));
            self.req
                .renew_unhashed(self.req.id, data.tokens(u.prompt), u.room, salt, u.hash_block_size);
        }
        self
    }
}

/// `slot_of` entry of an id that is not live.
const NOT_LIVE: u32 = u32::MAX;

#[derive(Default)]
pub struct Slots {
    /// Per interned id: its slot in `lives`, or `NOT_LIVE`.
    slot_of: Vec<u32>,
    /// Live requests, and at the slots in `free` freed ones (kept for their buffers).
    lives: Vec<Live>,
    free: Vec<u32>,
}

impl Slots {
    /// The slot of live `id`.
    #[inline]
    pub fn slot(&self, id: u32) -> Option<u32> {
        // A plain match: the `copied().filter(..)` chain compiled to a flag test as well.
        match self.slot_of.get(id as usize) {
            Some(&s) if s != NOT_LIVE => Some(s),
            _ => None,
        }
    }

    #[inline]
    pub fn get(&self, id: u32) -> Option<&Live> {
        self.slot(id).map(|s| &self.lives[s as usize])
    }

    #[inline]
    pub fn get_mut(&mut self, id: u32) -> Option<&mut Live> {
        self.slot(id).map(|s| &mut self.lives[s as usize])
    }

    /// Make `id` live with the request `renew` makes of a slot's request in place
    /// (`Request::renew`): a freed one, buffers kept, or a new empty one.
    pub fn insert(&mut self, id: u32, renew: impl FnOnce(&mut Request)) {
        self.insert_live(id, |live| renew(&mut live.req));
    }

    /// `insert` of request `rid`, renewed only when an op first reads it (`Live::read`).
    /// Meanwhile it is a waiting request with no tokens and nothing computed, and every
    /// op sees it as one: a lookup, `cache_blocks` and `preempt` read it first; an
    /// allocation's known-tokens test fails on it (it asks at least one token), and only
    /// then is it read and the allocation made again; a commit fails on it as on any
    /// request without an allocation; `free` reads only its id.
    pub(super) fn insert_unread(&mut self, id: u32, rid: ReqId, unread: Unread) {
        self.insert_live(id, |live| {
            let req = &mut live.req;
            req.id = rid;
            req.tokens.clear();
            req.num_computed_tokens = 0;
            req.status = RequestStatus::Waiting;
            live.unread = Some(unread);
        });
    }

    #[inline(always)]
    fn insert_live(&mut self, id: u32, make: impl FnOnce(&mut Live)) {
        if self.slot_of.len() <= id as usize {
            // Doubling: ids are interned in op order, so each new one would grow it again.
            self.slot_of
                .resize((id as usize + 1).max(2 * self.slot_of.len()), NOT_LIVE);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.lives.push(Live {
                    req: Request::new(0, Vec::new(), None, None),
                    uncommitted: None,
                    unread: None,
                });
                u32::try_from(self.lives.len() - 1).expect("fewer than 2^32 live requests")
            }
        };
        let live = &mut self.lives[slot as usize];
        live.uncommitted = None;
        live.unread = None;
        make(live);
        self.slot_of[id as usize] = slot;
    }

    /// Retire every request, keeping every slot's buffers; slots are then handed
    /// out in the order a fresh `Slots` would hand them out.
    pub fn reset(&mut self) {
        self.slot_of.clear();
        self.free.clear();
        let n = u32::try_from(self.lives.len()).expect("fewer than 2^32 live requests");
        self.free.extend((0..n).rev());
    }

    /// Retire live `id`, handing back its request's id (`None` if `id` is not live); its
    /// slot (and buffers) go to the next request. One lookup for both.
    #[inline]
    pub fn remove(&mut self, id: u32) -> Option<crate::kv::ReqId> {
        let s = self.slot(id)?;
        self.slot_of[id as usize] = NOT_LIVE;
        self.free.push(s);
        Some(self.lives[s as usize].req.id)
    }
}
