//! A persistent harness worker (`harness.py --serve`, `conformance/dynamo/worker.py`):
//! vLLM and the planner are imported once; every request is recorded in a
//! child forked from that process, so a case costs its sweep, not the import.
//!
//! A worker that dies or stops answering is killed and reported through the
//! case's error (`RecordError::WorkerDied`); the caller starts a fresh one
//! for the next case. Nothing a case writes outlives its temporary directory.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

use kvsim_core::fpm::scenarios::BuiltinScenario;
use serde_json::{json, Value};

use super::env;
use super::harness::{absolute_source, read_outputs, request, temp_dir};
use super::{RecordError, RecordOptions, Recording};

/// How long a new worker may take to import vLLM and the planner.
const START_TIMEOUT: Duration = Duration::from_secs(300);
/// Grace past a request's own timeout before the worker itself is presumed hung.
const REPLY_GRACE: Duration = Duration::from_secs(30);

/// A persistent harness worker (a forked Python process).
pub struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: u64,
    /// Cases this worker served (a fresh worker starts at 0).
    pub served: u64,
}

impl Worker {
    /// Start a worker and wait until it has imported everything.
    pub fn start() -> Result<Worker, RecordError> {
        let python = env::ready_python().ok_or(RecordError::NoEnvironment)?;
        let script = env::harness_script();
        if !script.is_file() {
            return Err(RecordError::NoHarness(script));
        }
        let mut child = Command::new(&python)
            .arg(&script)
            .arg("--serve")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| RecordError::Io(format!("cannot start {}: {e}", python.display())))?;
        let stdin = child.stdin.take().expect("piped stdin");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut w = Worker {
            child,
            stdin,
            lines,
            next_id: 0,
            served: 0,
        };
        match w.reply(START_TIMEOUT) {
            Ok(v) if v["ready"] == json!(true) => Ok(w),
            Ok(v) => Err(RecordError::WorkerDied(format!("unexpected greeting {v}"))),
            Err(e) => Err(e),
        }
    }

    fn reply(&mut self, wait: Duration) -> Result<Value, RecordError> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => serde_json::from_str(&line)
                .map_err(|e| RecordError::WorkerDied(format!("unreadable reply {line:?}: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                Err(RecordError::WorkerDied(format!(
                    "no reply within {} s; the worker was killed",
                    wait.as_secs()
                )))
            }
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.child.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(RecordError::WorkerDied(format!("the worker exited ({status})")))
            }
        }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Record the real planner over `s` in a fresh child of this worker.
    pub fn record(&mut self, s: &BuiltinScenario, o: &RecordOptions) -> Result<Recording, RecordError> {
        let o = absolute_source(o)?;
        let dir = temp_dir()?;
        let out = dir.0.join("out");
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({
            "id": id,
            "request": request(s, &o),
            "out_dir": out.display().to_string(),
            "timeout_s": o.timeout.as_secs(),
        });
        let mut line = serde_json::to_string(&msg).expect("requests serialize");
        line.push('\n');
        if let Err(e) = self.stdin.write_all(line.as_bytes()).and_then(|_| self.stdin.flush()) {
            self.kill();
            return Err(RecordError::WorkerDied(format!("cannot send the request: {e}")));
        }
        let reply = self.reply(o.timeout + REPLY_GRACE)?;
        self.served += 1;
        if reply["id"] != json!(id) {
            self.kill();
            return Err(RecordError::WorkerDied(format!(
                "reply {reply} answers another request"
            )));
        }
        if reply["hung"] == json!(true) {
            return Err(RecordError::Timeout(o.timeout.as_secs()));
        }
        let code = reply["exit"].as_i64().map(|c| c as i32);
        let how = match reply["signal"].as_i64() {
            Some(sig) => format!("signal {sig}"),
            None => "no exit status".into(),
        };
        read_outputs(&s.name, code, &out, &out.join("harness.log"), &how)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}
