//! The run phase: every step's ops issued in order between CUDA events, the measurement
//! windows' events and host-clock readings, and the timings they give once the device is done.

use super::moe::MoeScratch;
use super::prepare::Prepared;
use super::{cfg, ExecOptions, ExecReport, GpuExecutor, OpTiming, PointTiming, StepTiming};
use crate::error::GpuError;
use crate::ids::PointId;
use cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaSlice, PushKernelArg};
use std::time::Instant;

/// The events around one step, and the host time spent issuing it.
struct StepEvents {
    begin: CudaEvent,
    end: CudaEvent,
    host_ns: u64,
}

/// A window whose `BeginTimed` was issued and whose `EndTimed` was not yet.
struct OpenWindow {
    point: PointId,
    step: usize,
    begin: CudaEvent,
    at: Instant,
}

/// A closed measurement window.
struct Window {
    point: PointId,
    step_begin: usize,
    step_end: usize,
    begin: CudaEvent,
    end: CudaEvent,
    host_ns: u64,
    wall_ns: Option<u64>,
}

/// The events around one launching op (`ExecOptions::time_ops`).
struct OpEvents {
    step: usize,
    op: usize,
    kind: &'static str,
    begin: CudaEvent,
    end: CudaEvent,
}

/// Every event a run recorded; read only after the device finished.
pub(super) struct RunEvents {
    steps: Vec<StepEvents>,
    points: Vec<Window>,
    ops: Vec<OpEvents>,
}

impl RunEvents {
    /// A report holding the run's timings (steps, windows, ops) and nothing else yet.
    pub(super) fn timings(&self) -> Result<ExecReport, GpuError> {
        let mut report = ExecReport::default();
        for (i, s) in self.steps.iter().enumerate() {
            report.steps.push(StepTiming {
                step: i,
                device_ms: s.begin.elapsed_ms(&s.end)?,
                host_ns: s.host_ns,
            });
        }
        for w in &self.points {
            report.points.push(PointTiming {
                point: w.point,
                step_begin: w.step_begin,
                step_end: w.step_end,
                device_ms: w.begin.elapsed_ms(&w.end)?,
                host_ns: w.host_ns,
                wall_ns: w.wall_ns,
            });
        }
        for o in &self.ops {
            report.op_timings.push(OpTiming {
                step: o.step,
                op: o.op,
                kind: o.kind,
                device_ms: o.begin.elapsed_ms(&o.end)?,
            });
        }
        Ok(report)
    }
}

impl GpuExecutor {
    /// Zeroes the pools and keeps the SMs busy as `opts` asks, then waits, so the run starts
    /// on an idle device.
    pub(super) fn ready_device(&mut self, opts: &ExecOptions) -> Result<(), GpuError> {
        if opts.reset_pools {
            self.reset_pools()?;
        }
        if opts.warm_up_ms > 0 {
            let ns = u64::from(opts.warm_up_ms) * 1_000_000;
            // SAFETY: spin(u64) reads nothing and writes nothing.
            unsafe {
                self.stream.launch_builder(&self.common["spin"]).arg(&ns).launch(cfg(
                    (4 * self.info.sm_count, 1, 1),
                    128,
                    0,
                ))
            }?;
        }
        self.stream.synchronize()?;
        Ok(())
    }

    /// Issues every step's ops between the step's pair of events, and the windows' marks; the
    /// caller synchronises before reading the events.
    pub(super) fn run_steps(
        &self,
        prepared: &[Vec<Prepared>],
        opts: &ExecOptions,
        verify: &CudaSlice<u32>,
        moe_scratch: &mut Option<MoeScratch>,
        mut sync: Option<&mut dyn super::StepSync>,
    ) -> Result<RunEvents, GpuError> {
        let mut events = RunEvents {
            steps: Vec::with_capacity(prepared.len()),
            points: Vec::new(),
            ops: Vec::new(),
        };
        let mut open: Option<OpenWindow> = None;
        for (si, ops) in prepared.iter().enumerate() {
            let host_start = Instant::now();
            let e0 = self.recorded_event()?;
            let mut last_out: Option<&CudaSlice<f32>> = None;
            for (oi, p) in ops.iter().enumerate() {
                match p {
                    Prepared::Begin(point) => open = Some(self.open_window(*point, si, opts)?),
                    Prepared::End(point) => events.points.push(self.close_window(&mut open, *point, si, opts)?),
                    other => {
                        let kind = other.kind();
                        let timed = opts.time_ops && kind.is_some();
                        let before = if timed { Some(self.recorded_event()?) } else { None };
                        self.launch(other, verify, moe_scratch.as_mut(), last_out)?;
                        if let (Some(b), Some(kind)) = (before, kind) {
                            let e = self.recorded_event()?;
                            events.ops.push(OpEvents {
                                step: si,
                                op: oi,
                                kind,
                                begin: b,
                                end: e,
                            });
                        }
                        if let Prepared::Decode(d) = other {
                            last_out = d.launches.first().map(|l| &l.out);
                        }
                    }
                }
            }
            let e1 = self.recorded_event()?;
            events.steps.push(StepEvents {
                begin: e0,
                end: e1,
                host_ns: host_start.elapsed().as_nanos() as u64,
            });
            if let Some(s) = sync.as_deref_mut() {
                // Lock-step: the step is over when its work is, on every rank.
                self.stream.synchronize()?;
                s.after_step(si)?;
            }
        }
        Ok(events)
    }

    /// `BeginTimed`: with `sync_windows` on an idle device; the host clock starts after the event.
    fn open_window(&self, point: PointId, step: usize, opts: &ExecOptions) -> Result<OpenWindow, GpuError> {
        if opts.sync_windows {
            self.stream.synchronize()?;
        }
        let e = self.recorded_event()?;
        Ok(OpenWindow {
            point,
            step,
            begin: e,
            at: Instant::now(),
        })
    }

    /// `EndTimed` of the window `open` holds: its event, then the host clock, then (with
    /// `sync_windows`) the wall clock once the device is done.
    fn close_window(
        &self,
        open: &mut Option<OpenWindow>,
        point: PointId,
        step: usize,
        opts: &ExecOptions,
    ) -> Result<Window, GpuError> {
        let e = self.recorded_event()?;
        let OpenWindow {
            point: begin_point,
            step: begin_step,
            begin: b,
            at: t,
        } = open.take().expect("validated: EndTimed follows its BeginTimed");
        assert_eq!(begin_point, point, "validated: windows do not nest");
        let host_ns = t.elapsed().as_nanos() as u64;
        let wall_ns = if opts.sync_windows {
            self.stream.synchronize()?;
            Some(t.elapsed().as_nanos() as u64)
        } else {
            None
        };
        Ok(Window {
            point,
            step_begin: begin_step,
            step_end: step,
            begin: b,
            end: e,
            host_ns,
            wall_ns,
        })
    }

    /// A new timing event, recorded on the stream now.
    fn recorded_event(&self) -> Result<CudaEvent, GpuError> {
        let e = self.ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        e.record(&self.stream)?;
        Ok(e)
    }
}
