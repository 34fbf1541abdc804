//! A cluster of `creek serve` processes on this machine.
//!
//! Replica `i` (0-based, id `i + 1`) has its configuration in
//! `DIR/r{i+1}.toml`, its log (standard error, appended across restarts)
//! in `DIR/r{i+1}.log` and its data directory at `DIR/r{i+1}/`, the names
//! `ServerConfig::group_on` and `ServerConfig::local_group` give. A
//! process is signalled and killed by its own process id only — never a
//! negative id or a process group — and every process still running is
//! killed and reaped when the [`Cluster`] is dropped.
//!
//! Not for choosing what a replica runs: the caller writes each
//! configuration (from a group on reserved ports, [`Cluster::configure`],
//! or as it likes, [`Cluster::write_config`]).

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use creek_server::ServerConfig;

/// What becomes of the cluster's directory when the [`Cluster`] is
/// dropped (its processes are killed in every case).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDrop {
    /// Leave it: it is the user's (`creek dev`).
    KeepDir,
    /// Remove it, unless [`Cluster::keep`] is set.
    RemoveDir,
    /// Remove it, unless [`Cluster::keep`] is set or the thread is
    /// panicking: then say where the logs are (a failed test).
    RemoveDirUnlessPanicking,
}

/// How the processes are started.
#[derive(Clone, Debug)]
pub struct Launch {
    /// The `creek` binary.
    pub binary: PathBuf,
    /// Where the configurations, logs and data directories are.
    pub dir: PathBuf,
    /// Arguments before `serve` (global flags such as `--log-format`).
    pub args_before: Vec<OsString>,
    /// Arguments after `serve --config FILE`.
    pub args_after: Vec<OsString>,
    /// Environment variables set for every process (`RUST_LOG`).
    pub env: Vec<(OsString, OsString)>,
    /// Standard input from `/dev/null` rather than inherited.
    pub stdin_null: bool,
    /// Each process in a process group of its own (a terminal's Ctrl-C
    /// then reaches only the launching process, which stops them in turn).
    pub own_process_group: bool,
    /// What becomes of [`dir`](Launch::dir) on drop.
    pub on_drop: OnDrop,
}

impl Launch {
    /// Start `binary` with no extra arguments or environment, logs and
    /// configurations in `dir`, which is removed on drop.
    pub fn new(binary: PathBuf, dir: PathBuf) -> Launch {
        Launch {
            binary,
            dir,
            args_before: Vec::new(),
            args_after: Vec::new(),
            env: Vec::new(),
            stdin_null: false,
            own_process_group: false,
            on_drop: OnDrop::RemoveDir,
        }
    }

    /// With `RUST_LOG` set to `filter` for every process.
    #[must_use]
    pub fn log_filter(mut self, filter: &str) -> Launch {
        self.env.push(("RUST_LOG".into(), filter.into()));
        self
    }
}

/// Which signal [`Cluster::signal`] sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// `SIGTERM`: stop cleanly.
    Term,
    /// `SIGSTOP`: pause.
    Stop,
    /// `SIGCONT`: continue after a pause.
    Cont,
}

impl Signal {
    fn flag(self) -> &'static str {
        match self {
            Signal::Term => "-TERM",
            Signal::Stop => "-STOP",
            Signal::Cont => "-CONT",
        }
    }
}

/// `creek serve` processes, killed when the value is dropped.
pub struct Cluster {
    launch: Launch,
    /// Where the configurations, logs and data directories are.
    pub dir: PathBuf,
    /// The replicas' client endpoints (replica `i + 1` at index `i`).
    pub clients: Vec<SocketAddr>,
    /// The replicas' peer endpoints (replica `i + 1` at index `i`).
    pub peers: Vec<SocketAddr>,
    /// The running processes (`None`: not started, stopped or killed).
    children: Vec<Option<Child>>,
    /// Leave the directory behind on drop (the processes are killed).
    pub keep: bool,
}

impl Cluster {
    /// `n` replicas, none started, on ports reserved together
    /// ([`ports::reserve`](crate::ports::reserve)); the directory is made.
    pub fn on_loopback(launch: Launch, n: usize) -> Result<Cluster, String> {
        let mut ports = crate::ports::reserve(2 * n)?;
        let peers = ports.split_off(n);
        Cluster::on(launch, ports, peers)
    }

    /// Replicas on the given client and peer endpoints (one of each per
    /// replica), none started; the directory is made.
    pub fn on(
        launch: Launch,
        clients: Vec<SocketAddr>,
        peers: Vec<SocketAddr>,
    ) -> Result<Cluster, String> {
        if clients.len() != peers.len() {
            return Err(format!(
                "{} client and {} peer endpoints: one of each per replica",
                clients.len(),
                peers.len()
            ));
        }
        let dir = launch.dir.clone();
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(Cluster {
            children: clients.iter().map(|_| None).collect(),
            launch,
            dir,
            clients,
            peers,
            keep: false,
        })
    }

    /// How many replicas there are (running or not).
    pub fn len(&self) -> usize {
        self.children.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Make room for one more replica (id `len + 1`) on the given
    /// endpoints, not started. Returns its index.
    pub fn push(&mut self, client: SocketAddr, peer: SocketAddr) -> usize {
        self.clients.push(client);
        self.peers.push(peer);
        self.children.push(None);
        self.children.len() - 1
    }

    /// Make room for one more replica on loopback ports reserved together.
    /// Returns its index.
    pub fn push_on_loopback(&mut self) -> Result<usize, String> {
        let ports = crate::ports::reserve(2)?;
        Ok(self.push(ports[0], ports[1]))
    }

    /// Replica `i`'s configuration file.
    pub fn config_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("r{}.toml", i + 1))
    }

    /// Replica `i`'s log; a restart appends to it.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("r{}.log", i + 1))
    }

    /// Replica `i`'s data directory, as `ServerConfig::group_on` names it.
    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("r{}", i + 1))
    }

    /// Delete replica `i`'s data directory: the disk was lost. It must not
    /// be running.
    pub fn wipe(&self, i: usize) -> Result<(), String> {
        if self.is_running(i) {
            return Err(format!("replica {} is running", i + 1));
        }
        let dir = self.data_dir(i);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("deleting {}: {e}", dir.display())),
        }
    }

    /// Replica `i`'s configuration in the group of every replica's
    /// endpoints (`ServerConfig::group_on`), listing only the replicas
    /// `members` (indexes) and itself.
    pub fn group_config(&self, i: usize, members: &[usize]) -> Result<ServerConfig, String> {
        let group = ServerConfig::group_on(&self.peers, &self.clients, &self.dir)
            .map_err(|e| e.to_string())?;
        let mut config = group
            .get(i)
            .cloned()
            .ok_or_else(|| format!("there is no replica {}", i + 1))?;
        config
            .replicas
            .retain(|r| usize::from(r.id) == i + 1 || members.contains(&(usize::from(r.id) - 1)));
        Ok(config)
    }

    /// Write replica `i`'s configuration file: its
    /// [`group_config`](Cluster::group_config) with `members`, then `edit`.
    /// Not validated, so a test can write a setting `creek serve` refuses;
    /// [`configure_valid`](Cluster::configure_valid) refuses it here.
    pub fn configure(
        &self,
        i: usize,
        members: &[usize],
        edit: impl FnOnce(&mut ServerConfig),
    ) -> Result<(), String> {
        self.write_group_config(i, members, edit, false)
    }

    /// [`configure`](Cluster::configure), refusing a configuration that
    /// does not validate (before any process starts with it).
    pub fn configure_valid(
        &self,
        i: usize,
        members: &[usize],
        edit: impl FnOnce(&mut ServerConfig),
    ) -> Result<(), String> {
        self.write_group_config(i, members, edit, true)
    }

    fn write_group_config(
        &self,
        i: usize,
        members: &[usize],
        edit: impl FnOnce(&mut ServerConfig),
        validate: bool,
    ) -> Result<(), String> {
        let mut config = self.group_config(i, members)?;
        edit(&mut config);
        if validate {
            config.validate().map_err(|e| e.to_string())?;
        }
        self.write_config(i, &config)
    }

    /// Write `config` as replica `i`'s configuration file.
    pub fn write_config(&self, i: usize, config: &ServerConfig) -> Result<(), String> {
        let toml = config.to_toml().map_err(|e| e.to_string())?;
        let path = self.config_path(i);
        std::fs::write(&path, toml).map_err(|e| format!("writing {}: {e}", path.display()))
    }

    /// The replicas (indexes) replica `i`'s configuration file lists.
    pub fn configured(&self, i: usize) -> Result<Vec<usize>, String> {
        let config = ServerConfig::from_file(&self.config_path(i)).map_err(|e| e.to_string())?;
        Ok(config
            .replicas
            .iter()
            .map(|r| usize::from(r.id) - 1)
            .collect())
    }

    /// Start replica `i` from its configuration file and data directory,
    /// its standard error appended to its log. It must not be running.
    pub fn spawn(&mut self, i: usize) -> Result<(), String> {
        match self.children.get(i) {
            None => return Err(format!("there is no replica {}", i + 1)),
            Some(Some(_)) => return Err(format!("replica {} is running", i + 1)),
            Some(None) => {}
        }
        let log_path = self.log_path(i);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("opening {}: {e}", log_path.display()))?;
        let l = &self.launch;
        let mut command = Command::new(&l.binary);
        command
            .args(&l.args_before)
            .arg("serve")
            .arg("--config")
            .arg(self.config_path(i))
            .args(&l.args_after)
            .envs(l.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        if l.stdin_null {
            command.stdin(Stdio::null());
        }
        if l.own_process_group {
            use std::os::unix::process::CommandExt;
            // A new group whose leader is the child itself (0: its pid).
            command.process_group(0);
        }
        let child = command
            .spawn()
            .map_err(|e| format!("starting replica {}: {e}", i + 1))?;
        self.children[i] = Some(child);
        Ok(())
    }

    /// Replica `i`'s process id, while it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.children.get(i)?.as_ref().map(Child::id)
    }

    /// Whether replica `i` was started and not yet stopped, killed or
    /// found exited by [`take_exited`](Cluster::take_exited).
    pub fn is_running(&self, i: usize) -> bool {
        self.pid(i).is_some()
    }

    /// SIGKILL replica `i` and reap it. Returns whether it was running.
    pub fn kill(&mut self, i: usize) -> Result<bool, String> {
        let Some(mut c) = self.children.get_mut(i).and_then(Option::take) else {
            return Ok(false);
        };
        c.kill()
            .and_then(|()| c.wait().map(drop))
            .map_err(|e| format!("killing replica {}: {e}", i + 1))?;
        Ok(true)
    }

    /// Send `signal` to replica `i`'s process (by its own id), if it runs.
    pub fn signal(&self, i: usize, signal: Signal) -> Result<(), String> {
        let Some(pid) = self.pid(i) else {
            return Ok(());
        };
        // A child's id is positive, so this never names a process group.
        let status = Command::new("kill")
            .arg(signal.flag())
            .arg(pid.to_string())
            .status()
            .map_err(|e| format!("running kill {}: {e}", signal.flag()))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill {} {pid} failed ({status})", signal.flag()))
        }
    }

    /// Wait up to `limit` for replica `i` to exit, then SIGKILL it; it is
    /// not running afterwards. `None` if it was not running.
    pub fn wait_exit(&mut self, i: usize, limit: Duration) -> Result<Option<ExitStatus>, String> {
        let Some(mut child) = self.children.get_mut(i).and_then(Option::take) else {
            return Ok(None);
        };
        let until = Instant::now() + limit;
        loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                return Ok(Some(status));
            }
            if Instant::now() > until {
                let _ = child.kill();
                return child.wait().map(Some).map_err(|e| e.to_string());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM replica `i` and wait for it (SIGKILL after `limit`).
    /// `None` if it was not running.
    pub fn stop(&mut self, i: usize, limit: Duration) -> Result<Option<ExitStatus>, String> {
        if !self.is_running(i) {
            return Ok(None);
        }
        self.signal(i, Signal::Term)?;
        self.wait_exit(i, limit)
    }

    /// Why replica `i` is not running, if it exited by itself (`None`
    /// while it runs, and for one not started or killed here).
    pub fn exited(&mut self, i: usize) -> Option<String> {
        let child = self.children.get_mut(i)?.as_mut()?;
        match child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!("it exited ({status})")),
            Err(e) => Some(format!("it cannot be waited on ({e})")),
        }
    }

    /// Like [`exited`](Cluster::exited), and a replica that exited is no
    /// longer counted as running (it can be started again).
    pub fn take_exited(&mut self, i: usize) -> Option<String> {
        let why = self.exited(i)?;
        if let Some(c) = self.children.get_mut(i) {
            *c = None;
        }
        Some(why)
    }

    /// The end of replica `i`'s log, for an error message.
    pub fn log_tail(&self, i: usize) -> String {
        creek_server::replica_log::log_tail(&self.log_path(i))
    }

    /// The first replica that exited by itself, with why and the end of
    /// its log, as an error.
    pub fn check_alive(&mut self) -> Result<(), String> {
        for i in 0..self.len() {
            if let Some(why) = self.exited(i) {
                return Err(format!(
                    "replica {} died: {why}; {}",
                    i + 1,
                    self.log_tail(i)
                ));
            }
        }
        Ok(())
    }

    /// Wait until every running replica accepts connections on its client
    /// endpoint, all within `limit`; a replica that exits instead fails the
    /// wait, with the end of its log.
    pub fn wait_accepting(&mut self, limit: Duration) -> Result<(), String> {
        let until = Instant::now() + limit;
        for i in 0..self.len() {
            if !self.is_running(i) {
                continue;
            }
            let client = self.clients[i];
            loop {
                if let Some(why) = self.exited(i) {
                    return Err(format!(
                        "replica {} did not start: {why}; {}",
                        i + 1,
                        self.log_tail(i)
                    ));
                }
                if std::net::TcpStream::connect_timeout(&client, Duration::from_millis(200)).is_ok()
                {
                    break;
                }
                if Instant::now() > until {
                    return Err(format!(
                        "replica {} did not open {client} within {limit:?}; its log: {}",
                        i + 1,
                        self.log_path(i).display()
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }
}

impl Drop for Cluster {
    /// Whatever went wrong, no replica outlives the value.
    fn drop(&mut self) {
        for mut c in self.children.iter_mut().filter_map(Option::take) {
            let _ = c.kill();
            let _ = c.wait();
        }
        let remove = match self.launch.on_drop {
            OnDrop::KeepDir => false,
            OnDrop::RemoveDir => !self.keep,
            OnDrop::RemoveDirUnlessPanicking => {
                if std::thread::panicking() {
                    eprintln!("cluster logs kept in {}", self.dir.display());
                }
                !self.keep && !std::thread::panicking()
            }
        };
        if remove {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("creek-harness-{name}-{}", std::process::id()))
    }

    #[test]
    fn a_cluster_on_loopback_has_distinct_ports_and_its_files_in_its_dir() {
        let dir = scratch("layout");
        let mut c =
            Cluster::on_loopback(Launch::new("creek".into(), dir.clone()), 3).expect("cluster");
        let i = c.push_on_loopback().expect("push");
        assert_eq!(i, 3);
        let mut ports: Vec<u16> = c.clients.iter().chain(&c.peers).map(|a| a.port()).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 8, "a port was handed out twice");
        c.configure(1, &[0, 1, 2], |cfg| cfg.workers = 3)
            .expect("configure");
        assert_eq!(c.configured(1).expect("configured"), vec![0, 1, 2]);
        let cfg = ServerConfig::from_file(&c.config_path(1)).expect("read back");
        assert_eq!(cfg.workers, 3);
        assert_eq!(cfg.me().client_addr, c.clients[1]);
        assert_eq!(c.data_dir(1), dir.join("r2"));
        drop(c);
        assert!(!dir.exists(), "{} was left behind", dir.display());
    }

    #[test]
    fn a_process_that_cannot_start_is_an_error_and_nothing_runs() {
        let dir = scratch("nobinary");
        let mut c = Cluster::on_loopback(Launch::new(dir.join("no-such-creek"), dir.clone()), 1)
            .expect("cluster");
        let e = c.spawn(0).expect_err("a missing binary started");
        assert!(e.contains("starting replica 1"), "{e}");
        assert!(!c.is_running(0));
        assert_eq!(c.kill(0), Ok(false));
        assert_eq!(c.stop(0, Duration::from_millis(10)), Ok(None));
        assert!(c.check_alive().is_ok());
    }

    #[test]
    fn a_process_that_exits_is_reported_with_its_log() {
        let dir = scratch("exits");
        // `sh` as the binary: `sh serve --config FILE` fails at once (no
        // script named serve), which is all this test needs.
        let mut c =
            Cluster::on_loopback(Launch::new("sh".into(), dir.clone()), 1).expect("cluster");
        c.spawn(0).expect("spawn");
        let e = c
            .wait_accepting(Duration::from_secs(10))
            .expect_err("an exited process was waited for");
        assert!(e.starts_with("replica 1 did not start: it exited"), "{e}");
        assert!(c.take_exited(0).is_some());
        assert!(!c.is_running(0));
    }
}
