//! Progress of a long command, on stderr only: a bar (elapsed, rate, ETA) on a
//! terminal; elsewhere (CI logs) a plain line every few seconds, and nothing at all
//! for a command done within them. Never on stdout, never in a file kvsim writes;
//! `KVSIM_PROGRESS=off` silences it.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Seconds between plain lines off a terminal.
const EVERY: Duration = Duration::from_secs(5);

enum Show {
    Off,
    Bar(ProgressBar),
    Plain { next: Duration, printed: bool },
}

pub struct Progress {
    label: String,
    unit: &'static str,
    start: Instant,
    show: Show,
    last: (u64, u64),
}

impl Progress {
    /// Progress of `label`, counted in `unit`s (the total may come with the updates).
    pub fn new(label: &str, unit: &'static str) -> Progress {
        let mode = std::env::var("KVSIM_PROGRESS").unwrap_or_default();
        let show = if mode == "off" {
            Show::Off
        } else if std::io::stderr().is_terminal() && mode != "plain" {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template(&format!(
                "{{prefix}} [{{elapsed_precise}}] [{{bar:30}}] {{pos}}/{{len}} {unit} ({{per_sec}}, ETA {{eta}})"
            ))
            .expect("the template is valid");
            bar.set_style(style);
            bar.set_prefix(label.to_string());
            Show::Bar(bar)
        } else {
            Show::Plain {
                next: EVERY,
                printed: false,
            }
        };
        Progress {
            label: label.to_string(),
            unit,
            start: Instant::now(),
            show,
            last: (0, 0),
        }
    }

    /// `done` of `total` units are done.
    pub fn update(&mut self, done: u64, total: u64) {
        self.last = (done, total);
        match &mut self.show {
            Show::Off => {}
            Show::Bar(bar) => {
                bar.set_length(total);
                bar.set_position(done);
            }
            Show::Plain { next, printed } => {
                let elapsed = self.start.elapsed();
                if elapsed >= *next {
                    *next = elapsed + EVERY;
                    *printed = true;
                    eprintln!("{}", line(&self.label, self.unit, done, total, elapsed));
                }
            }
        }
    }

    /// Clear the bar; off a terminal, a last line when any was printed.
    pub fn finish(&mut self) {
        match std::mem::replace(&mut self.show, Show::Off) {
            Show::Bar(bar) => bar.finish_and_clear(),
            Show::Plain { printed: true, .. } => {
                let (done, total) = self.last;
                eprintln!("{}", line(&self.label, self.unit, done, total, self.start.elapsed()));
            }
            _ => {}
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// One plain progress line: count, share, elapsed, rate and ETA.
fn line(label: &str, unit: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 { done as f64 / secs } else { 0.0 };
    let pct = (done * 100).checked_div(total).unwrap_or(0);
    let eta = if done >= total {
        "done".to_string()
    } else if rate > 0.0 {
        format!("ETA {:.0} s", (total - done) as f64 / rate)
    } else {
        "ETA ?".to_string()
    };
    format!("{label}: {done}/{total} {unit} ({pct}%), {secs:.1} s elapsed, {rate:.1} {unit}/s, {eta}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_line_gives_count_rate_and_eta() {
        let l = line("check", "cases", 350, 700, Duration::from_secs(5));
        assert_eq!(l, "check: 350/700 cases (50%), 5.0 s elapsed, 70.0 cases/s, ETA 5 s");
        assert!(line("fuzz", "inputs", 10, 10, Duration::from_secs(2)).ends_with("done"));
        assert!(line("fuzz", "inputs", 0, 10, Duration::ZERO).ends_with("ETA ?"));
    }
}
