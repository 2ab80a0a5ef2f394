//! The check phase: verification records read back into [`Violation`]s, and decode outputs
//! read back for reference checks.

use super::prepare::{Prepared, PreparedDecode};
use super::{DecodeOutput, GpuExecutor};
use crate::content::StateDigest;
use crate::error::GpuError;
use crate::ids::{BlockId, GroupId, ReqId};
use crate::kernels::RECORD_WORDS;
use crate::lower::DecodeExpect;
use std::fmt;

/// A read that did not return what the program says the block holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The program step.
    pub step: usize,
    /// The op.
    pub op: usize,
    /// The request.
    pub req: ReqId,
    /// The group.
    pub group: GroupId,
    /// The block holding the first mismatched position (the state block for state reads).
    pub block: Option<BlockId>,
    /// The first mismatched position.
    pub position: Option<u32>,
    /// What went wrong.
    pub kind: ViolationKind,
}

/// What went wrong with a read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ViolationKind {
    /// K/V rows whose tag is not the one of the planned token at that position.
    KvContent {
        /// Reads that mismatched.
        mismatched_reads: u32,
        /// The token expected at the first one.
        expected_token: u32,
    },
    /// The kernel read another number of rows than the attended range holds.
    ReadCount {
        /// Rows expected.
        expected: u64,
        /// Rows read.
        actual: u64,
    },
    /// Every row matched its tag, but the sum of the tags read differs (rows read twice or
    /// from outside the range).
    Checksum {
        /// The expected sum.
        expected: u64,
        /// The sum read.
        actual: u64,
    },
    /// State rows whose digest is not the one of the planned history.
    StateDigest {
        /// Rows that mismatched.
        mismatched_rows: u32,
        /// Tokens the state should have consumed.
        expected_tokens: u32,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "step {} op {} {} {}", self.step, self.op, self.req, self.group)?;
        if let Some(b) = self.block {
            write!(f, " block {b}")?;
        }
        if let Some(p) = self.position {
            write!(f, " pos {p}")?;
        }
        match &self.kind {
            ViolationKind::KvContent {
                mismatched_reads,
                expected_token,
            } => {
                write!(
                    f,
                    ": K/V content mismatch ({mismatched_reads} reads; expected token {expected_token})"
                )
            }
            ViolationKind::ReadCount { expected, actual } => write!(f, ": read {actual} rows, expected {expected}"),
            ViolationKind::Checksum { expected, actual } => {
                write!(f, ": tag checksum {actual:#x}, expected {expected:#x}")
            }
            ViolationKind::StateDigest {
                mismatched_rows,
                expected_tokens,
            } => write!(
                f,
                ": state digest mismatch in {mismatched_rows} rows (expected a state of {expected_tokens} tokens)"
            ),
        }
    }
}

/// What one verification record must hold once its op ran.
pub(super) struct RecordExpect {
    pub(super) step: usize,
    pub(super) op: usize,
    pub(super) req: ReqId,
    pub(super) group: GroupId,
    pub(super) expect: DecodeExpect,
    pub(super) what: RecordWhat,
}

/// The read a record checks, and what names its first mismatch.
pub(super) enum RecordWhat {
    Decode {
        table: Vec<BlockId>,
        block_size: u32,
        tokens: Vec<u32>,
    },
    State {
        src_block: BlockId,
        digest: StateDigest,
    },
}

/// Turns verification records into violations. `runs` is how many times each record's op ran
/// (its counters accumulate). Returns the violations and the rows verified.
pub(super) fn check_records(records: &[RecordExpect], words: &[u32], runs: u64) -> (Vec<Violation>, u64) {
    let mut violations = Vec::new();
    let mut rows = 0u64;
    for (i, r) in records.iter().enumerate() {
        let w = &words[i * RECORD_WORDS..(i + 1) * RECORD_WORDS];
        let (mism, first_bad, reads) = (w[0], w[1], u64::from(w[2]));
        let checksum = u64::from(w[4]) | (u64::from(w[5]) << 32);
        rows += reads;
        let expected_reads = r.expect.reads * runs;
        let expected_checksum = r.expect.checksum.wrapping_mul(runs);
        let base = |block, position, kind| Violation {
            step: r.step,
            op: r.op,
            req: r.req,
            group: r.group,
            block,
            position,
            kind,
        };
        match &r.what {
            RecordWhat::Decode {
                table,
                block_size,
                tokens,
            } => {
                if mism > 0 {
                    let block = table.get((first_bad / block_size) as usize).copied();
                    let expected_token = tokens.get(first_bad as usize).copied().unwrap_or(u32::MAX);
                    violations.push(base(
                        block,
                        Some(first_bad),
                        ViolationKind::KvContent {
                            mismatched_reads: mism,
                            expected_token,
                        },
                    ));
                } else if reads != expected_reads {
                    violations.push(base(
                        None,
                        None,
                        ViolationKind::ReadCount {
                            expected: expected_reads,
                            actual: reads,
                        },
                    ));
                } else if checksum != expected_checksum {
                    violations.push(base(
                        None,
                        None,
                        ViolationKind::Checksum {
                            expected: expected_checksum,
                            actual: checksum,
                        },
                    ));
                }
            }
            RecordWhat::State { src_block, digest } => {
                if mism > 0 {
                    violations.push(base(
                        Some(*src_block),
                        None,
                        ViolationKind::StateDigest {
                            mismatched_rows: mism,
                            expected_tokens: digest.tokens,
                        },
                    ));
                } else if reads != expected_reads {
                    violations.push(base(
                        Some(*src_block),
                        None,
                        ViolationKind::ReadCount {
                            expected: expected_reads,
                            actual: reads,
                        },
                    ));
                } else if checksum != expected_checksum {
                    violations.push(base(
                        Some(*src_block),
                        None,
                        ViolationKind::Checksum {
                            expected: expected_checksum,
                            actual: checksum,
                        },
                    ));
                }
            }
        }
    }
    (violations, rows)
}

impl GpuExecutor {
    /// Every decode's outputs, in program order (`ExecOptions::keep_outputs`).
    pub(super) fn all_decode_outputs(&self, prepared: &[Vec<Prepared>]) -> Result<Vec<DecodeOutput>, GpuError> {
        let mut outputs = Vec::new();
        for (si, ops) in prepared.iter().enumerate() {
            for (oi, p) in ops.iter().enumerate() {
                if let Prepared::Decode(d) = p {
                    outputs.extend(self.decode_outputs(d, si, oi)?);
                }
            }
        }
        Ok(outputs)
    }

    pub(super) fn decode_outputs(
        &self,
        d: &PreparedDecode,
        step: usize,
        op: usize,
    ) -> Result<Vec<DecodeOutput>, GpuError> {
        let mut out = Vec::new();
        for l in &d.launches {
            let g = &self.layout.groups[l.group];
            let per_seq = (g.layers * g.q_heads * g.head_dim) as usize;
            let all = self.stream.clone_dtoh(&l.out)?;
            for (i, req) in l.reqs.iter().enumerate() {
                out.push(DecodeOutput {
                    step,
                    op,
                    group: GroupId(l.group as u32),
                    req: *req,
                    out: all[i * per_seq..(i + 1) * per_seq].to_vec(),
                    q_bits: l
                        .q_host
                        .get(i * per_seq..(i + 1) * per_seq)
                        .map(<[u16]>::to_vec)
                        .unwrap_or_default(),
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(what: RecordWhat, reads: u64, checksum: u64) -> RecordExpect {
        RecordExpect {
            step: 3,
            op: 1,
            req: ReqId(7),
            group: GroupId(2),
            expect: DecodeExpect { reads, checksum },
            what,
        }
    }

    fn words(mism: u32, first_bad: u32, reads: u32, checksum: u64) -> Vec<u32> {
        vec![
            mism,
            first_bad,
            reads,
            0,
            checksum as u32,
            (checksum >> 32) as u32,
            0,
            0,
        ]
    }

    fn decode_what() -> RecordWhat {
        RecordWhat::Decode {
            table: vec![BlockId(0), BlockId(0), BlockId(5), BlockId(9)],
            block_size: 16,
            tokens: (100..164).collect(),
        }
    }

    #[test]
    fn clean_records_give_no_violation() {
        let (v, rows) = check_records(&[record(decode_what(), 32, 0xabc)], &words(0, u32::MAX, 64, 0x1578), 2);
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(rows, 64);
    }

    #[test]
    fn mismatch_names_block_and_position() {
        let (v, _) = check_records(&[record(decode_what(), 32, 1)], &words(16, 48, 32, 5), 1);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].block, Some(BlockId(9)));
        assert_eq!(v[0].position, Some(48));
        assert_eq!(v[0].step, 3);
        assert_eq!(
            v[0].kind,
            ViolationKind::KvContent {
                mismatched_reads: 16,
                expected_token: 148
            }
        );
        assert!(v[0].to_string().contains("block b9 pos 48"));
    }

    #[test]
    fn count_and_checksum_mismatches() {
        let (v, _) = check_records(&[record(decode_what(), 32, 1)], &words(0, u32::MAX, 31, 1), 1);
        assert_eq!(
            v[0].kind,
            ViolationKind::ReadCount {
                expected: 32,
                actual: 31
            }
        );
        let (v, _) = check_records(&[record(decode_what(), 32, 1)], &words(0, u32::MAX, 32, 2), 1);
        assert_eq!(v[0].kind, ViolationKind::Checksum { expected: 1, actual: 2 });
        let state = RecordWhat::State {
            src_block: BlockId(3),
            digest: StateDigest { tokens: 4, checksum: 9 },
        };
        let (v, _) = check_records(&[record(state, 8, 72)], &words(8, 0, 8, 0), 1);
        assert_eq!(v[0].block, Some(BlockId(3)));
        assert_eq!(
            v[0].kind,
            ViolationKind::StateDigest {
                mismatched_rows: 8,
                expected_tokens: 4
            }
        );
    }
}
