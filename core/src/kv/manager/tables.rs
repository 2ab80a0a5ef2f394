//! Per-request block tables of one group. A freed request's table is kept,
//! emptied, for the next request: tables then stop regrowing from scratch.
//! Every mutable access bumps a version and stamps the table with it, so an
//! observer can tell which tables may have changed; callers take mutable
//! access only to change something.

use crate::kv::changes::TableChanges;
use crate::kv::req_map::ReqMap;
use crate::kv::request::ReqId;

#[derive(Debug, Default)]
struct Stamped {
    blocks: Vec<u32>,
    /// The version of this table's last mutable access.
    stamp: u64,
}

reuse_clone!(Stamped { blocks, stamp });

#[derive(Debug, Default)]
pub struct Tables {
    map: ReqMap<Stamped>,
    spare: Vec<Vec<u32>>,
    version: u64,
    /// Requests whose table may have changed since a watcher last looked.
    pub(crate) changes: TableChanges,
}

reuse_clone!(Tables {
    map,
    spare,
    version,
    changes
});

impl Tables {
    #[inline]
    pub fn get(&self, req: &ReqId) -> Option<&Vec<u32>> {
        self.map.get(req).map(|t| &t.blocks)
    }

    /// The table and its stamp (`None` without a table).
    pub fn stamped(&self, req: &ReqId) -> (&[u32], Option<u64>) {
        self.map
            .get(req)
            .map_or((&[], None), |t| (t.blocks.as_slice(), Some(t.stamp)))
    }

    pub fn get_mut(&mut self, req: &ReqId) -> Option<&mut Vec<u32>> {
        self.version += 1;
        self.changes.table(*req);
        let version = self.version;
        self.map.get_mut(req).map(|t| {
            t.stamp = version;
            &mut t.blocks
        })
    }

    /// Changes whenever any table may have.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The request's table, created (from a spare) if it has none.
    pub fn entry(&mut self, req: ReqId) -> &mut Vec<u32> {
        self.version += 1;
        self.changes.table(req);
        let spare = &mut self.spare;
        let t = self.map.get_or_insert_with(req, || Stamped {
            blocks: spare.pop().unwrap_or_default(),
            stamp: 0,
        });
        t.stamp = self.version;
        &mut t.blocks
    }

    pub fn insert(&mut self, req: ReqId, blocks: Vec<u32>) {
        self.version += 1;
        self.changes.table(req);
        let stamp = self.version;
        self.map.insert(req, Stamped { blocks, stamp });
    }

    pub fn remove(&mut self, req: &ReqId) -> Option<Vec<u32>> {
        self.version += 1;
        self.changes.table(*req);
        self.map.remove(req).map(|t| t.blocks)
    }

    /// Keep a table's storage for reuse.
    pub fn recycle(&mut self, mut table: Vec<u32>) {
        // A request freed without a table hands back an empty `Vec`: keeping it would
        // give the next request a table that regrows from nothing.
        if table.capacity() == 0 {
            return;
        }
        table.clear();
        self.spare.push(table);
    }

    /// Become empty like a new `Tables`, keeping every table's storage for reuse.
    pub fn reset(&mut self) {
        let spare = &mut self.spare;
        self.map.drain_into(|mut t| {
            if t.blocks.capacity() > 0 {
                t.blocks.clear();
                spare.push(t.blocks);
            }
        });
        self.version = 0;
        self.changes = TableChanges::default();
    }

    pub fn keys(&self) -> impl Iterator<Item = ReqId> + '_ {
        self.map.keys()
    }
}
