//! Newtypes for the identifiers a lowered GPU program uses, so that a block id is never passed
//! where a group id is meant (style: "newtypes for what gets confused").

use std::fmt;

/// Index of a cache group in [`crate::device::DeviceLayout::groups`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(pub u32);

/// Index of a block inside one group's pool. Block 0 is the null block: it is allocated, always
/// zero unless a program writes it by mistake, and never holds a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BlockId(pub u32);

impl BlockId {
    /// The null block (vLLM's block 0): stands for positions a table does not hold.
    pub const NULL: BlockId = BlockId(0);

    /// True for the null block.
    pub fn is_null(self) -> bool {
        self == Self::NULL
    }
}

/// A request (sequence) of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReqId(pub u32);

/// A measurement point of the plan (`BeginTimed`/`EndTimed` pairs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PointId(pub u32);

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

impl fmt::Display for BlockId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "b{}", self.0)
    }
}

impl fmt::Display for ReqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

impl fmt::Display for PointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "p{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_block_is_block_zero() {
        assert!(BlockId(0).is_null());
        assert!(!BlockId(1).is_null());
        assert_eq!(BlockId::NULL.to_string(), "b0");
        assert_eq!(GroupId(3).to_string(), "g3");
    }
}
