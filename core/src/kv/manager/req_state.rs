//! Each request's state in every cache group, kept request-major. vLLM keeps one dict
//! per group manager (`req_to_blocks`, `num_cached_block`, Mamba's bookkeeping); here
//! one lookup finds a request's entries in all of them, so an op on a request looks it
//! up once instead of once per group and dict. A freed request's entries (their table
//! storage included) go to the next request: tables stop regrowing from scratch.
//!
//! Every change to a table bumps one version and stamps the table with it, so an
//! observer can tell which tables may have changed (`TableLog::touch`).

use super::steady_memo::SteadyMemo;
use crate::kv::bump;
use crate::kv::changes::TableChanges;
use crate::kv::req_map::ReqMap;
use crate::kv::request::ReqId;

/// One request's entries in one group's dicts.
#[derive(Debug, Default)]
pub struct GroupReq {
    /// `req_to_blocks[req]` (nulls included) when `has_table`; empty otherwise.
    pub(crate) blocks: Vec<u32>,
    /// `req_to_blocks` has the request (vLLM's defaultdict makes even an empty table).
    pub(crate) has_table: bool,
    /// `num_cached_block[req]`: present means "already running, no new hits possible" (§3.1).
    pub(crate) num_cached: Option<usize>,
    /// The log's version when the table last changed (meaningful while `has_table`).
    pub(crate) stamp: u64,
    // Mamba "align" bookkeeping (§3.6).
    pub(crate) allocated: bool,
    pub(crate) last_state_idx: Option<usize>,
    pub(crate) num_retired: Option<usize>,
}

reuse_clone!(GroupReq {
    blocks,
    has_table,
    num_cached,
    stamp,
    allocated,
    last_state_idx,
    num_retired
});

impl GroupReq {
    /// The table, if the group has one for the request.
    #[inline]
    pub fn table(&self) -> Option<&[u32]> {
        self.has_table.then_some(self.blocks.as_slice())
    }

    /// Leave every dict (`free`): the table's storage stays for reuse.
    pub(crate) fn forget(&mut self) {
        self.blocks.clear();
        self.has_table = false;
        self.num_cached = None;
        self.allocated = false;
        self.last_state_idx = None;
        self.num_retired = None;
    }
}

/// The tables' version and change log.
#[derive(Debug, Default)]
pub struct TableLog {
    version: u64,
    /// (group, request) whose table may have changed since a watcher last looked.
    pub(crate) changes: TableChanges,
}

reuse_clone!(TableLog { version, changes });

impl TableLog {
    /// Group `group`'s table of `req` (its entry `st`) is about to change.
    #[inline]
    pub fn touch(&mut self, group: u32, req: ReqId, st: &mut GroupReq) {
        bump(&mut self.version, 1);
        st.stamp = self.version;
        self.changes.table(group, req);
    }

    /// Changes whenever any table may have.
    pub fn version(&self) -> u64 {
        self.version
    }
}

/// One request's entries, one per group, and what they tell of a step that changes
/// nothing (`SteadyMemo`, dropped whenever the entries are handed out mutably).
#[derive(Debug, Default)]
struct ReqEntry {
    groups: Vec<GroupReq>,
    steady: Option<SteadyMemo>,
}

reuse_clone!(ReqEntry { groups, steady });

/// Every request's entries, one per group.
#[derive(Debug, Default)]
pub struct ReqStates {
    map: ReqMap<ReqEntry>,
    /// Entries of freed requests, kept for their tables' storage.
    spare: Vec<Vec<GroupReq>>,
    /// Entries left over when `reset` fits the spares to fewer groups, for lists it
    /// fits to more: a model of another layout then still finds tables with storage.
    spare_entries: Vec<GroupReq>,
    /// Groups in the model: the length of every entry list.
    groups: usize,
    pub(crate) log: TableLog,
}

reuse_clone!(ReqStates {
    map,
    spare,
    spare_entries,
    groups,
    log
});

impl ReqStates {
    /// The request's entries (one per group), if it has any.
    #[inline]
    pub fn get(&self, req: ReqId) -> Option<&[GroupReq]> {
        self.map.get(&req).map(|e| e.groups.as_slice())
    }

    /// Group `g`'s entry of the request, if any.
    #[inline]
    pub fn group(&self, g: usize, req: ReqId) -> Option<&GroupReq> {
        self.get(req).map(|s| &s[g])
    }

    /// The request's entries, mutably, and the log, if it has any.
    #[inline]
    pub fn get_mut(&mut self, req: ReqId) -> Option<(&mut [GroupReq], &mut TableLog)> {
        let log = &mut self.log;
        self.map.get_mut(&req).map(|e| {
            e.steady = None;
            (e.groups.as_mut_slice(), log)
        })
    }

    /// The request's entries (empty ones, from a spare, if it had none) and the log.
    #[inline]
    pub fn entry(&mut self, req: ReqId) -> (&mut [GroupReq], &mut TableLog) {
        let (spare, groups, log) = (&mut self.spare, self.groups, &mut self.log);
        let e = self.map.get_or_insert_with(req, || {
            let mut s = spare.pop().unwrap_or_default();
            s.resize_with(groups, GroupReq::default);
            ReqEntry {
                groups: s,
                steady: None,
            }
        });
        e.steady = None;
        (e.groups.as_mut_slice(), log)
    }

    /// The request's steady memo, made by `make` from its entries if it has none since
    /// they last changed (kept if `make` makes one); `None` if the request has no entries
    /// or `make` makes none.
    #[inline]
    pub(crate) fn steady(
        &mut self,
        req: ReqId,
        make: impl FnOnce(&[GroupReq]) -> Option<SteadyMemo>,
    ) -> Option<SteadyMemo> {
        let e = self.map.get_mut(&req)?;
        if e.steady.is_none() {
            e.steady = make(&e.groups);
        }
        e.steady
    }

    /// Take the request's entries out (to free them); `recycle` hands them back.
    #[inline]
    pub fn remove(&mut self, req: ReqId) -> Option<Vec<GroupReq>> {
        self.map.remove(&req).map(|e| e.groups)
    }

    /// Keep a removed request's entries for the next request, every one of them
    /// already forgotten (`GroupReq::forget`).
    pub fn recycle(&mut self, s: Vec<GroupReq>) {
        debug_assert!(s.iter().all(|g| g.table().is_none() && g.num_cached.is_none()));
        self.spare.push(s);
    }

    /// Become empty for a model of `groups` groups, keeping every table's storage.
    pub fn reset(&mut self, groups: usize) {
        let spare = &mut self.spare;
        self.map.drain_into(|mut e| {
            e.groups.iter_mut().for_each(GroupReq::forget);
            spare.push(e.groups);
        });
        if groups != self.groups {
            // Every spare list to the new length here, once, rather than in `entry`,
            // where shortening one dropped its tables and lengthening it made empty ones.
            let extra = &mut self.spare_entries;
            for s in spare.iter_mut() {
                if s.len() > groups {
                    extra.extend(s.drain(groups..));
                }
                while s.len() < groups {
                    s.push(extra.pop().unwrap_or_default());
                }
            }
        }
        self.groups = groups;
        self.log = TableLog::default();
    }

    /// Requests with entries (possibly all empty), in no particular order.
    pub fn ids(&self) -> impl Iterator<Item = ReqId> + '_ {
        self.map.keys()
    }
}

#[cfg(test)]
mod tests {
    use super::{ReqStates, SteadyMemo};

    /// Every way to the entries that may change them drops the memo: the next ask makes
    /// it afresh from what they hold then.
    #[test]
    fn a_steady_memo_lasts_only_until_the_entries_are_handed_out_mutably() {
        let mut reqs = ReqStates::default();
        reqs.reset(2);
        let mut made = 0;
        let mut ask = |reqs: &mut ReqStates| {
            reqs.steady(7, |_| {
                made += 1;
                Some(SteadyMemo::NEVER)
            })
        };
        assert_eq!(ask(&mut reqs), None, "no entries, no memo");
        reqs.entry(7);
        assert!(ask(&mut reqs).is_some() && ask(&mut reqs).is_some());
        reqs.entry(7);
        ask(&mut reqs);
        reqs.get_mut(7);
        ask(&mut reqs);
        let groups = reqs.remove(7).expect("entries");
        reqs.recycle(groups);
        assert_eq!(ask(&mut reqs), None);
        reqs.entry(7);
        ask(&mut reqs);
        assert_eq!(made, 4, "made once after each mutable hand-out, reused in between");
    }
}
