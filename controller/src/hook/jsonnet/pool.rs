//! The supervised worker processes that evaluate Jsonnet hooks: at most `max_workers` at once,
//! shared by every Jsonnet hook of the process. An evaluation that runs past its timeout, or a
//! worker whose resident memory passes the limit while evaluating, is ended by killing that
//! worker (its memory goes back to the system with it); the next evaluation starts a fresh one.
//! No evaluation runs on the async runtime's threads: the runtime only writes, reads and waits.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::Semaphore;

use super::eval::Sources;
use super::worker::{Answer, MAX_FRAME, Request, frame};

/// How the controller starts a worker process: a program and its arguments (for the `kmeta`
/// binary, itself with `jsonnet-worker`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// Why an evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The program failed: syntax, runtime error, stack depth, output size.
    #[error("{0}")]
    Program(String),
    /// The evaluation did not finish in time; the worker was killed.
    #[error("evaluation did not finish within {0:?} (worker killed)")]
    Timeout(Duration),
    /// The worker's memory passed the limit; it was killed.
    #[error("evaluation used more than {limit_mib} MiB of memory (worker killed)")]
    Memory {
        /// The limit.
        limit_mib: u64,
    },
    /// The worker could not be started, or its pipe broke.
    #[error("jsonnet worker {program}: {message}")]
    Worker {
        /// The worker executable.
        program: String,
        /// What happened.
        message: String,
    },
}

/// One worker process and the program versions it holds.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    loaded: HashSet<String>,
}

/// Worker processes for one [`WorkerCommand`].
pub struct Pool {
    command: WorkerCommand,
    permits: Semaphore,
    idle: Mutex<Vec<Worker>>,
    memory_limit: u64,
}

/// How often a busy worker's memory is read.
const MEMORY_POLL: Duration = Duration::from_millis(20);

/// A pool's identity: its worker command, worker count and memory limit, and the tokio runtime
/// it serves (a worker's pipes belong to the runtime that spawned it, and die with it: a process
/// running several runtimes, as a test binary does, must not hand one runtime's worker to
/// another).
type PoolKey = (WorkerCommand, usize, u64, Option<tokio::runtime::Id>);

/// The pools of this process, one per worker command, limits and runtime.
static POOLS: Mutex<Option<HashMap<PoolKey, Arc<Pool>>>> = Mutex::new(None);

impl Pool {
    /// The process's pool for `command` on the current tokio runtime: at most `max_workers`
    /// evaluations at once, a worker killed when its resident memory passes `memory_limit`
    /// bytes.
    pub fn shared(command: &WorkerCommand, max_workers: usize, memory_limit: u64) -> Arc<Pool> {
        let runtime = tokio::runtime::Handle::try_current().ok().map(|h| h.id());
        let mut pools = POOLS.lock().unwrap_or_else(|p| p.into_inner());
        let key = (command.clone(), max_workers, memory_limit, runtime);
        pools
            .get_or_insert_with(HashMap::new)
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Pool {
                    command: command.clone(),
                    permits: Semaphore::new(max_workers.max(1)),
                    idle: Mutex::new(Vec::new()),
                    memory_limit,
                })
            })
            .clone()
    }

    /// Evaluates `sources` (version `digest`) with `request` within `timeout` (waiting for a
    /// free worker included): the answer's JSON text.
    pub async fn evaluate(
        &self,
        digest: &str,
        sources: &Sources,
        request: String,
        timeout: Duration,
        max_output: usize,
    ) -> Result<String, PoolError> {
        let deadline = Instant::now() + timeout;
        let permit = tokio::time::timeout(timeout, self.permits.acquire())
            .await
            .map_err(|_| PoolError::Timeout(timeout))?
            .map_err(|e| self.worker_error(e.to_string()))?;
        let mut worker = match self.take_idle() {
            Some(w) => w,
            None => self.spawn()?,
        };
        let req = Request {
            digest: digest.to_owned(),
            sources: (!worker.loaded.contains(digest)).then(|| sources.clone()),
            request,
            max_output,
        };
        let body = serde_json::to_vec(&req).map_err(|e| self.worker_error(e.to_string()))?;
        let remaining = deadline.saturating_duration_since(Instant::now());
        let answer = self
            .exchange(&mut worker, frame(&body), remaining, timeout)
            .await;
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                kill(worker).await;
                return Err(e);
            }
        };
        // only an answer proves the version loaded; after a failure it is sent again
        if matches!(answer, Answer::Ok(_)) {
            worker.loaded.insert(digest.to_owned());
        }
        self.put_back(worker);
        drop(permit);
        match answer {
            Answer::Ok(out) => Ok(out),
            Answer::Failed(why) => Err(PoolError::Program(why)),
            Answer::Unknown => Err(self.worker_error("lost the program's sources".into())),
        }
    }

    /// Sends one request and reads its answer, killing nothing: the caller does on an error.
    async fn exchange(
        &self,
        worker: &mut Worker,
        frame: Result<Vec<u8>, super::worker::FrameError>,
        remaining: Duration,
        timeout: Duration,
    ) -> Result<Answer, PoolError> {
        let frame = frame.map_err(|e| self.worker_error(e.to_string()))?;
        let pid = worker.child.id();
        let io = async {
            worker.stdin.write_all(&frame).await?;
            worker.stdin.flush().await?;
            let len = worker.stdout.read_u32().await? as usize;
            if len > MAX_FRAME {
                return Err(std::io::Error::other(format!("answer of {len} bytes")));
            }
            let mut buf = vec![0u8; len];
            worker.stdout.read_exact(&mut buf).await?;
            Ok::<_, std::io::Error>(buf)
        };
        let watch = async {
            let mut tick = tokio::time::interval(MEMORY_POLL);
            loop {
                tick.tick().await;
                if pid.and_then(resident_bytes).unwrap_or(0) > self.memory_limit {
                    return;
                }
            }
        };
        let buf = tokio::select! {
            r = io => r.map_err(|e| self.worker_error(format!("{e} (the worker exited?)")))?,
            () = watch => return Err(PoolError::Memory { limit_mib: self.memory_limit >> 20 }),
            () = tokio::time::sleep(remaining) => return Err(PoolError::Timeout(timeout)),
        };
        serde_json::from_slice(&buf).map_err(|e| self.worker_error(e.to_string()))
    }

    fn take_idle(&self) -> Option<Worker> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(mut w) = idle.pop() {
            if matches!(w.child.try_wait(), Ok(None)) {
                return Some(w);
            }
        }
        None
    }

    /// Keeps `worker` for the next evaluation unless it holds more than half the memory limit
    /// (programs and their caches grow; a fresh worker starts small).
    fn put_back(&self, worker: Worker) {
        let rss = worker.child.id().and_then(resident_bytes).unwrap_or(0);
        if rss > self.memory_limit / 2 {
            drop(worker);
            return;
        }
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(worker);
    }

    fn spawn(&self) -> Result<Worker, PoolError> {
        let mut child = Command::new(&self.command.program)
            .args(&self.command.args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| self.worker_error(format!("cannot start: {e}")))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(self.worker_error("no pipes".into()));
        };
        Ok(Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            loaded: HashSet::new(),
        })
    }

    fn worker_error(&self, message: String) -> PoolError {
        PoolError::Worker {
            program: self.command.program.display().to_string(),
            message,
        }
    }

    /// The idle workers: how many, and their resident memory in bytes in all (for benches).
    pub fn idle_workers(&self) -> (usize, u64) {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let rss = idle
            .iter()
            .filter_map(|w| w.child.id().and_then(resident_bytes))
            .sum();
        (idle.len(), rss)
    }
}

/// Kills `worker` and reaps it.
async fn kill(mut worker: Worker) {
    let _ = worker.child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(5), worker.child.wait()).await;
}

/// A process's resident memory in bytes (`VmRSS` of `/proc/<pid>/status`; `None` off Linux).
fn resident_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
