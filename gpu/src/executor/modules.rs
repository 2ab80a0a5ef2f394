//! The CUDA modules: compiling the common module and one decode module per kernel shape,
//! loading them, and the resources their kernels use.

use super::GpuExecutor;
use crate::device::{compile, CompiledModule};
use crate::error::GpuError;
use crate::kernels::{specialised, SOURCE};
use crate::layout::{DeviceLayout, GroupLayout};
use crate::lower::AttnKernel;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use std::sync::Arc;

/// Registers, local memory (spills) and static shared memory of one kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelResources {
    /// The kernel module.
    pub name: String,
    /// Registers per thread.
    pub regs: i32,
    /// Local memory bytes per thread.
    pub local_bytes: i32,
    /// Static shared memory bytes.
    pub shared_bytes: i32,
}

/// Compiles every module `layout` needs (no device needed, only NVRTC): the common module and
/// one decode module per distinct [`AttnKernel`]. Returns `(name, module)` pairs.
/// `extra_defines` go into every decode module, as
/// [`ExecutorOptions::attn_defines`](super::ExecutorOptions::attn_defines) do.
pub fn compile_modules(
    layout: &DeviceLayout,
    extra_defines: &str,
    verbose: bool,
) -> Result<Vec<(String, CompiledModule)>, GpuError> {
    let mut out = vec![("kvsim_common".to_string(), compile("kvsim_common", SOURCE, verbose)?)];
    for k in attn_kernels(layout, None) {
        let name = k.module_name();
        out.push((
            name.clone(),
            compile(&name, &specialised(&format!("{}{extra_defines}", k.defines())), verbose)?,
        ));
    }
    Ok(out)
}

pub(super) fn attn_kernels(layout: &DeviceLayout, latent_stages: Option<u32>) -> Vec<AttnKernel> {
    let mut ks: Vec<AttnKernel> = layout
        .groups
        .iter()
        .filter_map(|g| kernel_for(g, latent_stages))
        .collect();
    ks.sort();
    ks.dedup();
    ks
}

/// The decode kernel of group `g`, with the latent kernel's stage count overridden.
pub(super) fn kernel_for(g: &GroupLayout, latent_stages: Option<u32>) -> Option<AttnKernel> {
    match (AttnKernel::for_group(g)?, latent_stages) {
        (
            AttnKernel::LatentMma {
                latent_dim, head_tile, ..
            },
            Some(stages),
        ) => Some(AttnKernel::LatentMma {
            latent_dim,
            head_tile,
            stages: stages.max(2).div_ceil(2) * 2, // even: see lower::latent_mma_stages
        }),
        (k, _) => Some(k),
    }
}

/// One compiled decode module.
pub(super) struct AttnModule {
    pub(super) name: String,
    /// Kept for the diagnostic `lat_timeline` global (LAT_DIAG_TIMELINE builds).
    pub(super) module: Arc<CudaModule>,
    pub(super) decode: CudaFunction,
    /// CTAs of `decode` resident per SM.
    pub(super) per_sm: u32,
}

impl GpuExecutor {
    /// Resource usage of every kernel (registers, spills, shared memory).
    pub fn kernel_resources(&self) -> Result<Vec<KernelResources>, GpuError> {
        let one = |name: String, f: &CudaFunction| -> Result<KernelResources, GpuError> {
            Ok(KernelResources {
                name,
                regs: f.num_regs()?,
                local_bytes: f.local_size_bytes()?,
                shared_bytes: f.shared_size_bytes()?,
            })
        };
        let mut out = Vec::new();
        for (name, f) in &self.common {
            out.push(one((*name).to_string(), f)?);
        }
        for AttnModule { name, decode: f, .. } in self.attn.values() {
            out.push(one(name.clone(), f)?);
        }
        Ok(out)
    }
}

pub(super) fn load(ctx: &Arc<CudaContext>, m: CompiledModule) -> Result<Arc<CudaModule>, GpuError> {
    Ok(ctx.load_module(Ptx::from_binary(m.image))?)
}
