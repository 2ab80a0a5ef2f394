//! The crate's error type: everything that stops a run. Content mismatches are not errors;
//! they are [`crate::Violation`]s in the report.

use cudarc::driver::DriverError;

/// Why a GPU run could not happen or could not finish.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No usable CUDA device or library; the string says which and why.
    #[error("no CUDA device ({0})")]
    NoDevice(String),
    /// The layout cannot be built; every problem is listed.
    #[error("invalid layout: {}", .0.join("; "))]
    InvalidLayout(Vec<String>),
    /// The program cannot run; every problem is listed.
    #[error("invalid program: {}", .0.join("; "))]
    InvalidProgram(Vec<String>),
    /// The program was lowered for another layout than the executor holds.
    #[error("the program's layout differs from the executor's")]
    LayoutMismatch,
    /// NVRTC rejected a kernel.
    #[error("NVRTC failed to compile {name}: {log}")]
    Compile {
        /// The kernel.
        name: String,
        /// NVRTC's log.
        log: String,
    },
    /// The pools and buffers do not fit.
    #[error("out of device memory: need {need_bytes} bytes, {free_bytes} free")]
    OutOfMemory {
        /// Bytes needed.
        need_bytes: u64,
        /// Bytes free.
        free_bytes: u64,
    },
    /// Ranks cannot run as asked (`--devices`, a rank's thread).
    #[error("{0}")]
    Ranks(String),
    /// The per-step exchange between ranks failed.
    #[error("rank exchange: {0}")]
    Exchange(#[from] crate::ranks::ExchangeError),
    /// A CUDA driver call failed.
    #[error("CUDA driver error: {0:?}")]
    Driver(#[from] DriverError),
}
