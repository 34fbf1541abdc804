//! The server processes of one peer system and their temporary directory:
//! each process logs to `NAME.log` there, and all of it goes when the
//! value is dropped (after a measurement, on error, on Ctrl-C).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long stopped processes get to exit before they are SIGKILLed.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// Named server processes in one directory, stopped and removed on drop.
pub(crate) struct Procs {
    /// The directory of the data and logs.
    pub(crate) dir: PathBuf,
    /// The running processes with their names.
    children: Vec<(String, Child)>,
    /// The signal (`kill -SIG`) that stops one cleanly and fast.
    stop_signal: &'static str,
}

impl Procs {
    /// A fresh directory named after `system` and this process.
    /// `stop_signal` (e.g. `QUIT`) is what stops a process when done.
    pub(crate) fn new(system: &str, stop_signal: &'static str) -> Result<Procs, String> {
        let dir =
            std::env::temp_dir().join(format!("creek-bench-peers-{system}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(Procs {
            dir,
            children: Vec::new(),
            stop_signal,
        })
    }

    /// The log of the process named `name`.
    pub(crate) fn log_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.log"))
    }

    /// Start `cmd` as the process named `name`, its output to its log
    /// (appended to, when it ran before).
    pub(crate) fn spawn(&mut self, name: &str, mut cmd: Command) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(name))
            .map_err(|e| format!("creating the log of {name}: {e}"))?;
        let err = log
            .try_clone()
            .map_err(|e| format!("opening the log of {name}: {e}"))?;
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .map_err(|e| format!("starting {name} ({:?}): {e}", cmd.get_program()))?;
        self.children.push((name.to_owned(), child));
        Ok(())
    }

    /// Send `signal` (`kill -SIGNAL`: `STOP`, `CONT`, `TERM`) to the
    /// process named `name`.
    pub(crate) fn signal(&self, name: &str, signal: &str) -> Result<(), String> {
        let (_, child) = self
            .children
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| format!("no process named {name}"))?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(child.id().to_string())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| format!("running kill: {e}"))?;
        if !status.success() {
            return Err(format!("kill -{signal} {name} failed ({status})"));
        }
        Ok(())
    }

    /// Wait up to `within` for the process named `name` to exit, then kill
    /// it (`SIGKILL`), and forget it: it may be spawned again under its
    /// name.
    pub(crate) fn reap(&mut self, name: &str, within: Duration) -> Result<(), String> {
        let i = self
            .children
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| format!("no process named {name}"))?;
        let (_, mut child) = self.children.remove(i);
        let deadline = Instant::now() + within;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        child
            .wait()
            .map_err(|e| format!("waiting for {name}: {e}"))?;
        Ok(())
    }

    /// The first process that exited by itself, with the end of its log,
    /// as an error.
    pub(crate) fn check_alive(&mut self) -> Result<(), String> {
        for (name, child) in &mut self.children {
            let why = match child.try_wait() {
                Ok(None) => continue,
                Ok(Some(status)) => format!("it exited ({status})"),
                Err(e) => format!("it cannot be waited on ({e})"),
            };
            let log = self.dir.join(format!("{name}.log"));
            return Err(format!(
                "{name} died: {why}; {}",
                creek_server::replica_log::log_tail(&log)
            ));
        }
        Ok(())
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in &self.children {
            let _ = Command::new("kill")
                .arg(format!("-{}", self.stop_signal))
                .arg(c.id().to_string())
                .stderr(Stdio::null())
                .status();
        }
        let deadline = Instant::now() + STOP_WAIT;
        for (_, c) in &mut self.children {
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The first line `program --version` prints (what it printed on
/// stderr if nothing on stdout).
pub(crate) fn version_of(program: &Path) -> Result<String, String> {
    let out = Command::new(program)
        .arg("--version")
        .output()
        .map_err(|e| format!("running {} --version: {e}", program.display()))?;
    let text = if out.stdout.is_empty() {
        out.stderr
    } else {
        out.stdout
    };
    let text = String::from_utf8_lossy(&text);
    Ok(text.lines().next().unwrap_or_default().trim().to_owned())
}

/// Run `cmd` to its end on a blocking thread (so Ctrl-C can end the
/// measurement meanwhile); its output goes into the log `log`. Fails with
/// the end of that log if the command fails.
pub(crate) async fn run_to_end(what: &str, mut cmd: Command, log: PathBuf) -> Result<(), String> {
    let what = what.to_owned();
    tokio::task::spawn_blocking(move || {
        let out =
            std::fs::File::create(&log).map_err(|e| format!("creating {}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("opening {}: {e}", log.display()))?;
        let status = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .status()
            .map_err(|e| format!("running {what}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed ({status}); {}",
                creek_server::replica_log::log_tail(&log)
            ))
        }
    })
    .await
    .map_err(|e| format!("{e}"))?
}

/// Wait up to 30 s for `ready` to answer `Ok(Some(_))`, checking the
/// processes stay up in between.
pub(crate) async fn wait_for<T, F, Fut>(
    procs: &mut Procs,
    what: &str,
    mut ready: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = String::from("no answer yet");
    loop {
        procs.check_alive()?;
        match ready().await {
            Ok(Some(t)) => return Ok(t),
            Ok(None) => {}
            Err(e) => last = e,
        }
        if Instant::now() > deadline {
            return Err(format!("{what} within 30 s ({last})"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
