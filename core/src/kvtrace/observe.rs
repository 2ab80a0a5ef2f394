//! Observation lines (kvtrace-format.md §4) rendered into a caller's buffer. Each state
//! section is rendered again only when what it shows may have changed (the
//! model's change counters, the live set); otherwise it is copied as it is.

use super::exec::{Outcome, Replayer};
use super::ids::Ids;
use super::json::{push_i64, push_ids, push_str, push_tables, push_u64};
use crate::kv::{KvCacheManager, ReqId};

/// How the observed op ended.
pub enum Ending<'a> {
    Ok(Outcome),
    /// The `init` line's result: the derived sizes.
    Init,
    Error {
        kind: &'a str,
        message: &'a str,
    },
}

#[derive(Default)]
pub struct Observer {
    /// The (hash, free queue, tables) versions the sections were rendered at.
    seen: Option<(u64, u64, u64)>,
    /// `{"cached_block_ids":[…],"cached_blocks":N`
    head: String,
    /// `,"free_blocks":N,"free_queue":[…]`
    free: String,
    /// `,"requests":{…}`
    requests: String,
    /// Per live slot: its request's last rendered `"id":[[…],…]`, reused while
    /// the request and its tables' stamps stay the same.
    fragments: Vec<Fragment>,
}

#[derive(Default)]
struct Fragment {
    rid: Option<ReqId>,
    stamps: Vec<Option<u64>>,
    text: String,
}

impl Fragment {
    /// Bring the text up to date with the request's tables.
    fn update(&mut self, kv: &KvCacheManager, literal: &str, rid: ReqId) {
        let stamps = (0..kv.groups.len()).map(|g| kv.table_stamped(g, rid).1);
        if self.rid == Some(rid) && stamps.eq(self.stamps.iter().copied()) {
            return;
        }
        self.rid = Some(rid);
        self.stamps.clear();
        self.stamps
            .extend((0..kv.groups.len()).map(|g| kv.table_stamped(g, rid).1));
        self.text.clear();
        self.text.push_str(literal);
        self.text.push(':');
        push_tables(&mut self.text, kv.tables(rid));
    }
}

impl Observer {
    /// Re-render the sections that may have changed: all of them when `all`,
    /// the requests when `live` (the live set changed).
    pub fn refresh(&mut self, r: &Replayer, ids: &Ids, (all, live): (bool, bool)) {
        let pool = &r.kv().pool;
        let now = (pool.hash_version(), pool.free_version(), r.kv().tables_version());
        let seen = if all { None } else { self.seen };
        self.seen = Some(now);
        if all {
            self.fragments.clear();
        }
        if seen.map(|v| v.0) != Some(now.0) {
            let s = &mut self.head;
            s.clear();
            s.push_str("{\"cached_block_ids\":");
            push_ids(s, pool.cached_block_ids());
            s.push_str(",\"cached_blocks\":");
            push_u64(s, pool.num_cached_keys() as u64);
        }
        if seen.map(|v| v.1) != Some(now.1) {
            let s = &mut self.free;
            s.clear();
            s.push_str(",\"free_blocks\":");
            push_u64(s, pool.num_free_blocks() as u64);
            s.push_str(",\"free_queue\":");
            push_ids(s, pool.free_queue());
        }
        if live || seen.map(|v| v.2) != Some(now.2) {
            let s = &mut self.requests;
            s.clear();
            s.push_str(",\"requests\":{");
            for (k, (id, slot, l)) in r.live_in_order().enumerate() {
                if k > 0 {
                    s.push(',');
                }
                if self.fragments.len() <= slot as usize {
                    self.fragments.resize_with(slot as usize + 1, Fragment::default);
                }
                let f = &mut self.fragments[slot as usize];
                f.update(r.kv(), ids.literal(id), l.req.id);
                s.push_str(&f.text);
            }
            s.push('}');
        }
    }

    /// Append one line (no newline): the op's result plus the state after it.
    pub fn line(&self, r: &Replayer, i: i64, op: Option<&str>, end: Ending, out: &mut String) {
        out.push_str(&self.head);
        if let Ending::Error { kind, .. } = end {
            out.push_str(",\"error\":");
            push_str(out, kind);
        }
        out.push_str(&self.free);
        out.push_str(",\"i\":");
        push_i64(out, i);
        if let Ending::Error { message, .. } = end {
            out.push_str(",\"message\":");
            push_str(out, message);
        }
        out.push_str(",\"op\":");
        match op {
            Some(name) => push_str(out, name),
            None => out.push_str("null"),
        }
        out.push_str(&self.requests);
        out.push_str(",\"result\":");
        push_result(out, r, end);
        out.push('}');
    }
}

fn push_result(out: &mut String, r: &Replayer, end: Ending) {
    let kv = r.kv();
    match end {
        Ending::Error { .. } | Ending::Ok(Outcome::Null) => out.push_str("null"),
        Ending::Ok(Outcome::Bool(b)) => out.push_str(if b { "true" } else { "false" }),
        Ending::Ok(Outcome::Lookup) => {
            let (_, hit) = r.pending().expect("a lookup leaves its result pending");
            out.push_str("{\"block_ids\":");
            push_tables(out, hit.blocks.iter().map(Vec::as_slice));
            out.push_str(",\"num_computed_tokens\":");
            push_u64(out, hit.num_computed_tokens);
            out.push_str(",\"shared_prefix_boundary\":");
            push_u64(out, hit.shared_prefix_boundary);
            out.push('}');
        }
        Ending::Ok(Outcome::Alloc) => {
            out.push_str("{\"block_ids\":");
            push_tables(out, r.new_blocks.iter().map(Vec::as_slice));
            out.push('}');
        }
        Ending::Init => {
            out.push_str("{\"coordinator\":\"");
            out.push_str(kv.coordinator_kind().name());
            out.push_str("\",\"hash_block_size\":");
            push_u64(out, kv.hash_block_size());
            out.push_str(",\"scheduler_block_size\":");
            push_u64(out, kv.scheduler_block_size());
            out.push('}');
        }
    }
}
