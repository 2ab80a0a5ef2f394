//! Live requests by interned id, in a slab: memory grows with the requests
//! live at once, not with every id a trace names, and a freed request's token
//! and hash buffers are reused by the next request.

use crate::kv::Request;

pub struct Live {
    pub req: Request,
    /// `num_new_tokens` of the last successful allocation, until commit or preempt.
    pub uncommitted: Option<u64>,
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
        if self.slot_of.len() <= id as usize {
            self.slot_of.resize(id as usize + 1, NOT_LIVE);
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.lives.push(Live {
                    req: Request::new(0, Vec::new(), None, None),
                    uncommitted: None,
                });
                u32::try_from(self.lives.len() - 1).expect("fewer than 2^32 live requests")
            }
        };
        let live = &mut self.lives[slot as usize];
        renew(&mut live.req);
        live.uncommitted = None;
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

    /// Retire live `id`; its slot (and buffers) go to the next request.
    pub fn remove(&mut self, id: u32) {
        if let Some(s) = self.slot(id) {
            self.slot_of[id as usize] = NOT_LIVE;
            self.free.push(s);
        }
    }
}
