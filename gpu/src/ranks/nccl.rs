//! The device-side exchange (NCCL) for ranks on separate devices: not built.
//!
//! DECISION: cudarc 0.19 has an `nccl` feature (dynamically loaded like the driver), but no
//! machine with several GPUs is lent to test it, `libnccl` is not known to be on the device
//! machine, and NCCL refuses two ranks on one device. Rather than ship an untested collective,
//! this build says so with a typed error; the host exchange serves several devices of one host
//! too (one process, one thread per device). A real implementation would all-gather the
//! [`Wire`](kvsim_core::device::ranks::Wire) records with `Comm::all_gather` on each rank's
//! stream after the step's work, behind the same [`Exchange`](super::Exchange) trait.

use super::exchange::{Exchange, ExchangeError};

/// NCCL ends for `ranks` ranks, one per device of `devices` present: always the typed error
/// in this build, saying what is missing.
pub fn nccl_group(ranks: usize, devices: usize) -> Result<Vec<Box<dyn Exchange>>, ExchangeError> {
    // Devices NCCL could use here: none in a build without it.
    let (have, why) = if devices < ranks {
        (devices, format!("NCCL needs one device per rank ({ranks} ranks)"))
    } else {
        (
            0,
            "this build has no NCCL exchange (cudarc's `nccl` feature is not enabled; docs/gpu.md, issue 23)".into(),
        )
    };
    Err(ExchangeError::NcclUnavailable {
        needed: ranks,
        have,
        why,
    })
}
