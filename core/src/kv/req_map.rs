//! A map keyed by request id. Schedulers and replayers hand ids out densely
//! from 0, so small ids index a vector directly (no hashing, no probing); any
//! other id goes to a hash map. Per-request manager state lives in these.

use super::hash::FastMap;
use super::request::ReqId;

/// Ids below this index the vector (bounding its size); the rest are hashed.
const DIRECT: usize = 1 << 16;

/// A map keyed by dense request ids.
#[derive(Debug)]
pub struct ReqMap<V> {
    direct: Vec<Option<V>>,
    rest: FastMap<ReqId, V>,
}

// By hand, not `reuse_clone!`: the exhaustive search copies every manager map per
// transition, and most are empty on both sides (the Mamba ones, every hashed side);
// skipping those copies is a tenth of the copy.
impl<V: Clone> Clone for ReqMap<V> {
    fn clone(&self) -> Self {
        let ReqMap { direct, rest } = self;
        ReqMap {
            direct: direct.clone(),
            rest: rest.clone(),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        let ReqMap { direct, rest } = self;
        if !(direct.is_empty() && source.direct.is_empty()) {
            direct.clone_from(&source.direct);
        }
        if !(rest.is_empty() && source.rest.is_empty()) {
            rest.clone_from(&source.rest);
        }
    }
}

impl<V> Default for ReqMap<V> {
    fn default() -> Self {
        ReqMap {
            direct: Vec::new(),
            rest: FastMap::default(),
        }
    }
}

impl<V> ReqMap<V> {
    /// The value of `req`.
    #[inline]
    pub fn get(&self, req: &ReqId) -> Option<&V> {
        match self.direct.get(*req as usize) {
            Some(slot) => slot.as_ref(),
            None if *req as usize >= DIRECT => rest_get(&self.rest, req),
            None => None,
        }
    }

    /// The value of `req`, mutably.
    #[inline]
    pub fn get_mut(&mut self, req: &ReqId) -> Option<&mut V> {
        match self.direct.get_mut(*req as usize) {
            Some(slot) => slot.as_mut(),
            None if *req as usize >= DIRECT => rest_get_mut(&mut self.rest, req),
            None => None,
        }
    }

    /// Whether `req` has a value.
    #[inline]
    pub fn contains_key(&self, req: &ReqId) -> bool {
        self.get(req).is_some()
    }

    /// The value for `req`, inserting `f()` if there is none. Inlined up to the usual
    /// case (a direct id that has a value).
    #[inline]
    pub fn get_or_insert_with(&mut self, req: ReqId, f: impl FnOnce() -> V) -> &mut V {
        if matches!(self.direct.get(req as usize), Some(Some(_))) {
            return self.direct[req as usize].as_mut().expect("checked above");
        }
        self.insert_with(req, f)
    }

    /// `get_or_insert_with` past its usual case.
    #[inline(never)]
    fn insert_with(&mut self, req: ReqId, f: impl FnOnce() -> V) -> &mut V {
        let i = req as usize;
        if i >= DIRECT {
            return self.rest.entry(req).or_insert_with(f);
        }
        if self.direct.len() <= i {
            self.direct.resize_with(i + 1, || None);
        }
        self.direct[i].get_or_insert_with(f)
    }

    /// Set `req`'s value; the old one.
    pub fn insert(&mut self, req: ReqId, v: V) -> Option<V> {
        let i = req as usize;
        if i >= DIRECT {
            return rest_insert(&mut self.rest, req, v);
        }
        if self.direct.len() <= i {
            self.direct.resize_with(i + 1, || None);
        }
        self.direct[i].replace(v)
    }

    /// Remove `req`'s value.
    pub fn remove(&mut self, req: &ReqId) -> Option<V> {
        match self.direct.get_mut(*req as usize) {
            Some(slot) => slot.take(),
            None if *req as usize >= DIRECT => rest_remove(&mut self.rest, req),
            None => None,
        }
    }

    /// Remove every value (the storage stays).
    pub fn clear(&mut self) {
        self.direct.clear();
        self.rest.clear();
    }

    /// Remove every value, handing each to `f` (the storage stays).
    pub fn drain_into(&mut self, mut f: impl FnMut(V)) {
        self.direct.drain(..).flatten().for_each(&mut f);
        self.rest.drain().for_each(|(_, v)| f(v));
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = ReqId> + '_ {
        (0..)
            .zip(&self.direct)
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k)
            .chain(self.rest.keys().copied())
    }
}

// The hashed side, out of line: inlined, its hash of the id was computed up front at
// every call site, though ids are nearly always direct.
#[cold]
#[inline(never)]
fn rest_get<'a, V>(rest: &'a FastMap<ReqId, V>, req: &ReqId) -> Option<&'a V> {
    rest.get(req)
}

#[cold]
#[inline(never)]
fn rest_get_mut<'a, V>(rest: &'a mut FastMap<ReqId, V>, req: &ReqId) -> Option<&'a mut V> {
    rest.get_mut(req)
}

#[cold]
#[inline(never)]
fn rest_remove<V>(rest: &mut FastMap<ReqId, V>, req: &ReqId) -> Option<V> {
    rest.remove(req)
}

#[cold]
#[inline(never)]
fn rest_insert<V>(rest: &mut FastMap<ReqId, V>, req: ReqId, v: V) -> Option<V> {
    rest.insert(req, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Copied over any other map, empty sides included, a map is a clone.
    #[test]
    fn a_map_copied_over_another_is_a_clone() {
        let maps: Vec<ReqMap<u32>> = [&[][..], &[1], &[0, 70_000], &[70_000], &[5, 2, 9]]
            .iter()
            .map(|ids| {
                let mut m = ReqMap::default();
                ids.iter().for_each(|&id| {
                    m.insert(id, id + 1);
                });
                m
            })
            .collect();
        for from in &maps {
            for over in &maps {
                let mut copy = over.clone();
                copy.clone_from(from);
                let mut a: Vec<_> = copy.keys().map(|k| (k, copy.get(&k).copied())).collect();
                let mut b: Vec<_> = from.keys().map(|k| (k, from.get(&k).copied())).collect();
                a.sort_unstable();
                b.sort_unstable();
                assert_eq!(a, b);
                assert_eq!(format!("{:?}", copy.direct), format!("{:?}", from.direct));
            }
        }
    }

    #[test]
    fn small_and_large_ids_behave_alike() {
        let mut m: ReqMap<u32> = ReqMap::default();
        for id in [3, 0, 70_000, u32::MAX] {
            assert_eq!(m.insert(id, id ^ 1), None);
        }
        assert_eq!(m.insert(3, 9), Some(2));
        assert_eq!((m.get(&3), m.get(&4), m.get(&70_000)), (Some(&9), None, Some(&70_001)));
        *m.get_or_insert_with(5, || 0) += 1;
        *m.get_or_insert_with(u32::MAX - 1, || 7) += 1;
        let mut keys: Vec<_> = m.keys().collect();
        keys.sort_unstable();
        assert_eq!(keys, [0, 3, 5, 70_000, u32::MAX - 1, u32::MAX]);
        assert_eq!(m.remove(&70_000), Some(70_001));
        assert_eq!(m.remove(&70_000), None);
        assert!(!m.contains_key(&4) && m.contains_key(&5));
    }
}
