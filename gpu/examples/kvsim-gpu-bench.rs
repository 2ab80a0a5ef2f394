//! `kvsim-gpu-bench [all|selfcheck|bandwidth|compile] [--quick] [--seed N] [--shapes PREFIX] [--defines A,B=1] [--out DIR]`
//!
//! * `selfcheck`: clean program vs the f64 CPU reference, corrupted program must report its
//!   violations at the planned steps;
//! * `bandwidth`: paged decode attention vs device-to-device copy, Markdown table;
//! * `compile`: compile every kernel with NVRTC and print ptxas's resource report (no GPU needed;
//!   with `--out`, the images are written there too);
//! * `all` (default): selfcheck then bandwidth.
//!
//! Exit status: 0 all passed, 1 a check failed, 2 bad arguments or no device / CUDA error.

use kvsim_gpu::{bandwidth, device, executor, selfcheck};
use std::io::Write;
use std::process::ExitCode;

struct Args {
    mode: String,
    quick: bool,
    seed: u64,
    /// Bandwidth shapes whose name starts with this (all when absent).
    shapes: Option<String>,
    /// Extra `#define`s for every decode module (`NAME` or `NAME=VALUE`, comma-separated).
    defines: String,
    out: Option<std::path::PathBuf>,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        mode: "all".into(),
        quick: false,
        seed: 0,
        shapes: None,
        defines: String::new(),
        out: None,
    };
    let mut it = std::env::args().skip(1);
    let mut seeded = false;
    while let Some(a) = it.next() {
        match a.as_str() {
            "all" | "selfcheck" | "bandwidth" | "compile" => args.mode = a,
            "--quick" => args.quick = true,
            "--seed" => {
                let v = it.next().ok_or("--seed needs a value")?;
                args.seed = v.parse().map_err(|_| format!("bad seed {v}"))?;
                seeded = true;
            }
            "--defines" => {
                let v = it.next().ok_or("--defines needs NAME[=VALUE],...")?;
                for d in v.split(',').filter(|d| !d.is_empty()) {
                    let (name, value) = d.split_once('=').unwrap_or((d, ""));
                    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        return Err(format!("bad define {d}"));
                    }
                    args.defines.push_str(&format!("#define {name} {value}\n"));
                }
            }
            "--shapes" => args.shapes = Some(it.next().ok_or("--shapes needs a name prefix")?),
            "--out" => args.out = Some(it.next().ok_or("--out needs a directory")?.into()),
            "-h" | "--help" => {
                return Err(
                    "usage: kvsim-gpu-bench [all|selfcheck|bandwidth|compile] [--quick] [--seed N] [--shapes PREFIX] [--defines A,B=1] [--out DIR]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if !seeded {
        // Fresh queries and tokens every run unless a seed is given (printed for replay).
        args.seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
    }
    Ok(args)
}

struct Log {
    file: Option<std::fs::File>,
}

impl Log {
    fn line(&mut self, s: &str) {
        println!("{s}");
        if let Some(f) = &mut self.file {
            let _ = writeln!(f, "{s}");
        }
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let file = args.out.as_ref().and_then(|d| {
        std::fs::create_dir_all(d).ok()?;
        std::fs::File::create(d.join("kvsim-gpu-bench.log")).ok()
    });
    let mut log = Log { file };
    log.line(&format!(
        "kvsim-gpu-bench mode={} quick={} seed={}",
        args.mode, args.quick, args.seed
    ));
    match run(&args, &mut log) {
        Ok(true) => {
            log.line("RESULT: PASS");
            ExitCode::SUCCESS
        }
        Ok(false) => {
            log.line("RESULT: FAIL");
            ExitCode::from(1)
        }
        Err(e) => {
            log.line(&format!("RESULT: ERROR {e}"));
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args, log: &mut Log) -> Result<bool, kvsim_gpu::GpuError> {
    if args.mode == "compile" {
        let mut layout = selfcheck::layout();
        for s in bandwidth::shapes() {
            layout.groups.extend(s.layout().groups);
        }
        log.line(&format!("nvrtc {:?}", device::nvrtc_version()?));
        for (name, m) in executor::compile_modules(&layout, &args.defines, true)? {
            if let Some(d) = &args.out {
                // The images, for nvdisasm / cuobjdump.
                let ext = if m.is_cubin { "cubin" } else { "ptx" };
                let _ = std::fs::write(d.join(format!("{name}.{ext}")), &m.image);
            }
            log.line(&format!(
                "== {name}: {} bytes ({})",
                m.image.len(),
                if m.is_cubin { "cubin sm_90" } else { "ptx" }
            ));
            for l in m.log.lines().filter(|l| {
                l.contains("registers") || l.contains("spill") || l.contains("Compiling entry") || l.contains("arning")
            }) {
                log.line(&format!("   {l}"));
            }
        }
        return Ok(true);
    }
    let (_, info) = device::open_device()?;
    log.line(&format!(
        "device: {} (sm_{}{}), {} SMs, L2 {} MB, {:.1} GB; driver CUDA {}.{}; NVRTC {}.{}; kernels built for {}",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.sm_count,
        info.l2_bytes >> 20,
        info.total_mem_bytes as f64 / 1e9,
        info.driver_cuda_version / 1000,
        (info.driver_cuda_version % 1000) / 10,
        info.nvrtc_version.0,
        info.nvrtc_version.1,
        device::ARCH
    ));
    let mut ok = true;
    if args.mode == "all" || args.mode == "selfcheck" {
        log.line("== self-check");
        let o = selfcheck::run(args.seed)?;
        for l in &o.lines {
            log.line(l);
        }
        for f in &o.failures {
            log.line(&format!("FAILED: {f}"));
        }
        log.line(&format!("self-check: {}", if o.passed() { "PASS" } else { "FAIL" }));
        ok &= o.passed();
    }
    if args.mode == "all" || args.mode == "bandwidth" {
        log.line("== bandwidth");
        let rows = bandwidth::run(
            args.quick,
            args.seed as u32,
            args.shapes.as_deref(),
            &args.defines,
            &mut |s| log.line(&s),
        )?;
        let table = bandwidth::markdown(&rows);
        log.line(&table);
        if let Some(d) = &args.out {
            let _ = std::fs::write(d.join("bandwidth.md"), &table);
        }
        for r in rows
            .iter()
            .filter(|r| r.ref_rel_err.is_some_and(|e| e.is_nan() || e > selfcheck::REL_TOL))
        {
            log.line(&format!(
                "FAILED: {} [{}] request 0 rel err {:?} > {}",
                r.shape.name,
                r.variant,
                r.ref_rel_err,
                selfcheck::REL_TOL
            ));
            ok = false;
        }
        let violations: usize = rows.iter().map(|r| r.violations).sum();
        if violations > 0 {
            log.line(&format!("FAILED: {violations} violations during the bandwidth runs"));
            ok = false;
        }
        let mut best: Vec<(&str, f64, f64)> = Vec::new();
        for r in &rows {
            match best.iter_mut().find(|(n, _, _)| *n == r.shape.name) {
                Some(b) => {
                    b.1 = b.1.max(r.fraction());
                    b.2 = b.2.max(r.same_fraction());
                }
                None => best.push((r.shape.name, r.fraction(), r.same_fraction())),
            }
        }
        for (name, f, same) in best {
            log.line(&format!(
                "best {name}: {:.1}% of copy, {:.1}% of a same-bytes copy ({})",
                100.0 * f,
                100.0 * same,
                if f >= bandwidth::GOAL_FRACTION {
                    "meets the 85% goal"
                } else {
                    "below the 85% goal"
                }
            ));
        }
    }
    Ok(ok)
}
