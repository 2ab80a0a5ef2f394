//! Where an H100 placed the CTAs of each MoE GEMM grid the blind layouts launch, as a probe saw it.
//!
//! `moe_up` and `moe_down` launch grids of (experts, rows) CTAs, rows 8 or 16 for the H = 1024,
//! F = 512 MoE. `scripts/timing/moe_kernels.cu deal2d` recorded the SM of every CTA of every such
//! grid for 1-96 experts, three launches each, on one H100 (docs/timing/data/
//! deal2d-h100-2026-12-07.csv.xz). Each grid's launches put the same CTAs together on SMs (only
//! the SMs' ids differ), another H100 grouped 85 % of its probed pairs the same way, and neither
//! follows launch order mod 132: `scripts/timing/deal2d_summary.py`, docs/timing-history.md.
//! The cost model reads only which CTAs share an SM, so SM ids are as recorded.

/// The table `scripts/timing/deal_table.py` writes: rows 8 then 16, each for 1..=[`EXPERTS`]
/// experts, one byte (the SM) per CTA in launch order.
static TABLE: &[u8] = include_bytes!("deal_h100.bin");

/// Experts per grid the table covers (1 to this).
pub const EXPERTS: usize = 96;

/// Rows of CTAs per expert the table covers, in its order.
const ROWS: [usize; 2] = [8, 16];

/// The probed SM of each CTA (launch order: CTA e + experts x row) of the grid (experts, rows),
/// or `None` where the probe did not cover it.
pub fn placement(experts: usize, rows: usize) -> Option<&'static [u8]> {
    if experts == 0 || experts > EXPERTS {
        return None;
    }
    let block = ROWS.iter().position(|&r| r == rows)?;
    // The grids before it: all of the earlier row counts, then 1..experts-1 of this one.
    let before_rows: usize = ROWS[..block].iter().map(|&r| r * EXPERTS * (EXPERTS + 1) / 2).sum();
    let start = before_rows + rows * (experts - 1) * experts / 2;
    TABLE.get(start..start + experts * rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_holds_every_covered_grid_and_nothing_else() {
        let total: usize = ROWS.iter().map(|&r| r * EXPERTS * (EXPERTS + 1) / 2).sum();
        assert_eq!(TABLE.len(), total);
        // The last grid ends where the table does.
        assert_eq!(
            placement(EXPERTS, 16).map(|p| p.as_ptr_range().end),
            Some(TABLE.as_ptr_range().end)
        );
        assert_eq!(placement(1, 8).map(<[u8]>::len), Some(8));
        assert_eq!(placement(0, 8), None);
        assert_eq!(placement(EXPERTS + 1, 8), None);
        assert_eq!(placement(4, 4), None);
    }

    #[test]
    fn every_grid_spreads_its_ctas_evenly_over_the_sms() {
        // The device balances the counts: the busiest SM holds ceil(N / 132) CTAs.
        for rows in ROWS {
            for experts in 1..=EXPERTS {
                let sms = placement(experts, rows).unwrap();
                let mut per = [0usize; 256];
                sms.iter().for_each(|&s| per[s as usize] += 1);
                assert!(sms.iter().all(|&s| s < 132), "({experts}, {rows})");
                assert_eq!(per.iter().max(), Some(&sms.len().div_ceil(132)), "({experts}, {rows})");
            }
        }
    }
}
