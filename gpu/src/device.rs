//! Finding the device and compiling kernels, without ever panicking on a machine with no GPU.
//!
//! cudarc loads `libcuda` and `libnvrtc` on first use and panics if they are missing, so every
//! entry point here asks first whether the libraries are present.

use crate::error::GpuError;
use cudarc::driver::{result as drv, sys as drv_sys, CudaContext};
use cudarc::nvrtc::{result as rtc, sys as rtc_sys};
use std::ffi::CString;
use std::sync::Arc;

/// What the device and its software are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's name.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// SMs.
    pub sm_count: u32,
    /// L2 cache bytes.
    pub l2_bytes: u64,
    /// Device memory bytes.
    pub total_mem_bytes: u64,
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub driver_cuda_version: i32,
    /// `(major, minor)` of the NVRTC that compiled the kernels.
    pub nvrtc_version: (i32, i32),
}

/// Why there is no usable device (the reason GPU tests print when they skip).
pub fn no_device_reason() -> Option<String> {
    // SAFETY: only tries to dlopen the libraries, no symbol is called.
    if !unsafe { drv_sys::is_culib_present() } {
        return Some("libcuda (the NVIDIA driver library) not found".to_string());
    }
    if let Err(e) = drv::init() {
        return Some(format!("cuInit failed: {e:?}"));
    }
    match drv::device::get_count() {
        Ok(0) => return Some("the driver reports 0 CUDA devices".to_string()),
        Ok(_) => {}
        Err(e) => return Some(format!("cuDeviceGetCount failed: {e:?}")),
    }
    if !nvrtc_present() {
        return Some("libnvrtc (CUDA 13 run-time compiler) not found; set LD_LIBRARY_PATH".to_string());
    }
    None
}

/// For device tests: prints `skipped: no CUDA device (reason)` to stderr, past the test
/// harness's output capture (which only takes `print!`/`eprint!`), and returns true when there
/// is no device.
pub fn skip_without_device(test: &str) -> bool {
    use std::io::Write;
    match no_device_reason() {
        Some(reason) => {
            let _ = writeln!(std::io::stderr().lock(), "{test}: skipped: no CUDA device ({reason})");
            true
        }
        None => false,
    }
}

/// True when `libnvrtc` can be loaded (kernels can be compiled, device or not).
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to dlopen the library.
    unsafe { rtc_sys::is_culib_present() }
}

/// Opens device 0, or says why there is none.
pub fn open_device() -> Result<(Arc<CudaContext>, DeviceInfo), GpuError> {
    open_device_on(0)
}

/// CUDA devices the driver reports, or why there is none.
pub fn device_count() -> Result<usize, GpuError> {
    if let Some(reason) = no_device_reason() {
        return Err(GpuError::NoDevice(reason));
    }
    Ok(drv::device::get_count()? as usize)
}

/// Opens device `ordinal` (its primary context: every opener of one device shares it), or says
/// why there is none.
pub fn open_device_on(ordinal: usize) -> Result<(Arc<CudaContext>, DeviceInfo), GpuError> {
    let present = device_count()?;
    if ordinal >= present {
        return Err(GpuError::NoDevice(format!(
            "device {ordinal} asked for; the driver reports {present}"
        )));
    }
    let ctx = CudaContext::new(ordinal)?;
    let attr = |a| ctx.attribute(a);
    use drv_sys::CUdevice_attribute_enum as A;
    let mut driver_cuda_version = 0;
    // SAFETY: plain query into a local.
    unsafe { drv_sys::cuDriverGetVersion(&mut driver_cuda_version) }.result()?;
    let info = DeviceInfo {
        name: ctx.name()?,
        compute_capability: ctx.compute_capability()?,
        sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
        l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
        total_mem_bytes: ctx.total_mem()? as u64,
        driver_cuda_version,
        nvrtc_version: nvrtc_version()?,
    };
    Ok((ctx, info))
}

/// `(major, minor)` of the loaded NVRTC.
pub fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    if !nvrtc_present() {
        return Err(GpuError::NoDevice("libnvrtc not found".to_string()));
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain query into locals.
    unsafe { rtc_sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| GpuError::Compile {
            name: "nvrtcVersion".into(),
            log: format!("{e:?}"),
        })?;
    Ok((major, minor))
}

/// A compiled module: the image handed to the driver and NVRTC's log (ptxas's resource usage
/// when `verbose`).
#[derive(Clone, Debug)]
pub struct CompiledModule {
    /// Cubin for `sm_90` (or PTX, NUL-terminated, when NVRTC gave no cubin).
    pub image: Vec<u8>,
    /// Whether NVRTC produced a cubin (else PTX).
    pub is_cubin: bool,
    /// The compile log.
    pub log: String,
}

/// The architecture kernels are built for (HOPPER.md: name the target, don't rely on PTX JIT).
pub const ARCH: &str = "sm_90";

/// Compiles `source` with NVRTC for [`ARCH`]; `verbose` asks ptxas for its resource report.
pub fn compile(name: &str, source: &str, verbose: bool) -> Result<CompiledModule, GpuError> {
    if !nvrtc_present() {
        return Err(GpuError::NoDevice("libnvrtc not found".to_string()));
    }
    let err = |log: String| GpuError::Compile {
        name: name.to_string(),
        log,
    };
    let src = CString::new(source).map_err(|_| err("source holds a NUL byte".into()))?;
    let cname = CString::new(name).map_err(|_| err("name holds a NUL byte".into()))?;
    let prog = rtc::create_program(&src, Some(&cname)).map_err(|e| err(format!("{e:?}")))?;
    let mut opts = vec![
        format!("--gpu-architecture={ARCH}"),
        "--std=c++17".to_string(),
        "-lineinfo".to_string(),
    ];
    if verbose {
        opts.push("--ptxas-options=-v".to_string());
    }
    // SAFETY: prog was created above and is destroyed exactly once below.
    let compiled = unsafe { rtc::compile_program(prog, &opts) };
    let log = unsafe { rtc::get_program_log(prog) }
        .map(|raw| {
            let bytes: Vec<u8> = raw.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    let result = match compiled {
        Err(e) => Err(err(format!("{e:?}\n{log}"))),
        Ok(()) => {
            let mut size = 0usize;
            // SAFETY: prog compiled; size is a local out-parameter.
            let cubin_ok = unsafe { rtc_sys::nvrtcGetCUBINSize(prog, &mut size) }.result().is_ok() && size > 0;
            if cubin_ok {
                let mut image = vec![0u8; size];
                // SAFETY: image has the size NVRTC reported.
                unsafe { rtc_sys::nvrtcGetCUBIN(prog, image.as_mut_ptr().cast()) }
                    .result()
                    .map_err(|e| err(format!("{e:?}")))?;
                Ok(CompiledModule {
                    image,
                    is_cubin: true,
                    log,
                })
            } else {
                // SAFETY: prog compiled.
                let ptx = unsafe { rtc::get_ptx(prog) }.map_err(|e| err(format!("{e:?}")))?;
                let image = ptx.iter().map(|&c| c as u8).collect();
                Ok(CompiledModule {
                    image,
                    is_cubin: false,
                    log,
                })
            }
        }
    };
    // SAFETY: destroyed once.
    let _ = unsafe { rtc::destroy_program(prog) };
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reason_is_given_or_device_opens() {
        if skip_without_device("device::reason_is_given_or_device_opens") {
            assert!(no_device_reason().is_some_and(|r| !r.is_empty()));
            return;
        }
        let (_, info) = open_device().expect("a device that probes fine opens");
        assert!(info.sm_count > 0);
    }
}
