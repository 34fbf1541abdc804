//! The `creek serve` processes a benchmark starts on loopback, with the
//! server defaults or settings of its own, and can kill, wipe and restart
//! one at a time. Replica `i`'s configuration is `r{i}.toml`, its log
//! `r{i}.log` and its data directory `r{i}/` in one temporary directory,
//! which goes with the processes when the value is dropped (on error and
//! on Ctrl-C too).

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use creek_client::TlsOptions;
use creek_server::ServerConfig;

/// `creek serve` processes, killed and their directory removed on drop.
pub(crate) struct Servers {
    /// Where the configurations, logs and data directories are.
    pub(crate) dir: PathBuf,
    /// The replicas' client endpoints (replica `i + 1` at index `i`).
    pub(crate) clients: Vec<SocketAddr>,
    /// The replicas' peer endpoints (replica `i + 1` at index `i`).
    pub(crate) peers: Vec<SocketAddr>,
    /// The running processes (`None`: killed and not restarted).
    children: Vec<Option<Child>>,
    /// `RUST_LOG` of the servers.
    log_filter: String,
    /// Leave the directory behind on drop (the processes are killed).
    pub(crate) keep: bool,
}

/// A free loopback port, never one this process was given before: a port
/// is released as soon as it is found, so the system may hand the same one
/// out again to the next call (a metrics port that was also a replica's
/// made a benchmark refuse its own configuration).
pub(crate) fn free_addr() -> Result<SocketAddr, String> {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    for _ in 0..64 {
        let addr = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("finding a free port: {e}"))?;
        let mut given = GIVEN
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !given.contains(&addr.port()) {
            given.push(addr.port());
            return Ok(addr);
        }
    }
    Err("finding a free port: the system kept giving ports already in use here".into())
}

/// `creek certs create-local` for `n` replicas into `dir`, run as the
/// command this process is (the one whose `creek serve` the benchmarks
/// start): what it prints stays off the benchmark's standard output.
fn create_certs(dir: &std::path::Path, n: u16) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["certs", "create-local", "--replicas"])
        .arg(n.to_string())
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting creek certs: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let err = err.trim();
    Err(err.strip_prefix("creek: ").unwrap_or(err).to_owned())
}

impl Servers {
    /// Start `n` replicas on free loopback ports, in a fresh directory
    /// named after `name` and this process. Each runs with the server
    /// defaults, then `edit`; its log keeps `log_filter` (`RUST_LOG`). With
    /// `tls`, the client and peer links run TLS with the certificates
    /// `creek certs create-local` makes, in [`certs_dir`](Servers::certs_dir);
    /// clients connect with [`client_tls`](Servers::client_tls).
    pub(crate) fn start(
        n: usize,
        name: &str,
        log_filter: &str,
        tls: bool,
        edit: impl Fn(&mut ServerConfig),
    ) -> Result<Servers, String> {
        let dir = std::env::temp_dir().join(format!("creek-bench-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        // Owned from here: whatever fails below, the drop cleans up.
        let mut servers = Servers {
            dir: dir.clone(),
            clients: Vec::new(),
            peers: Vec::new(),
            children: (0..n).map(|_| None).collect(),
            log_filter: log_filter.to_owned(),
            keep: false,
        };
        let clients = (0..n).map(|_| free_addr()).collect::<Result<Vec<_>, _>>()?;
        let peers = (0..n).map(|_| free_addr()).collect::<Result<Vec<_>, _>>()?;
        servers.clients = clients;
        servers.peers = peers;
        let certs = servers.certs_dir();
        if tls {
            let n = u16::try_from(n).map_err(|_| format!("{n} replicas are too many"))?;
            create_certs(&certs, n)?;
        }
        let edit = |c: &mut ServerConfig| {
            if tls {
                c.tls = Some(creek_server::TlsConfig::in_dir(&certs, c.id));
            }
            edit(c);
        };
        let all: Vec<usize> = (0..n).collect();
        for i in 0..n {
            servers.configure(i, &all, edit)?;
        }
        for i in 0..n {
            servers.spawn(i)?;
        }
        Ok(servers)
    }

    /// Write replica `i`'s (0-based) configuration: the server defaults,
    /// the group `members` (0-based, `i` included or not) and `edit`.
    pub(crate) fn configure(
        &self,
        i: usize,
        members: &[usize],
        edit: impl Fn(&mut ServerConfig),
    ) -> Result<(), String> {
        let group = ServerConfig::group_on(&self.peers, &self.clients, &self.dir)
            .map_err(|e| e.to_string())?;
        let mut config = group
            .get(i)
            .cloned()
            .ok_or_else(|| format!("there is no replica {}", i + 1))?;
        config
            .replicas
            .retain(|r| usize::from(r.id) == i + 1 || members.contains(&(usize::from(r.id) - 1)));
        edit(&mut config);
        config.validate().map_err(|e| e.to_string())?;
        let toml = config.to_toml().map_err(|e| e.to_string())?;
        std::fs::write(self.config_path(i), toml)
            .map_err(|e| format!("writing {}: {e}", self.config_path(i).display()))
    }

    /// The replicas (0-based) replica `i`'s configuration lists.
    pub(crate) fn configured(&self, i: usize) -> Result<Vec<usize>, String> {
        let config = ServerConfig::from_file(&self.config_path(i)).map_err(|e| e.to_string())?;
        Ok(config
            .replicas
            .iter()
            .map(|r| usize::from(r.id) - 1)
            .collect())
    }

    /// Make room for a new replica (id `len + 1`) on free loopback ports,
    /// configured with the group `members` and `edit`, and start it.
    /// Returns its 0-based index.
    pub(crate) fn add(
        &mut self,
        members: &[usize],
        edit: impl Fn(&mut ServerConfig),
    ) -> Result<usize, String> {
        self.clients.push(free_addr()?);
        self.peers.push(free_addr()?);
        self.children.push(None);
        let i = self.children.len() - 1;
        self.configure(i, members, edit)?;
        self.spawn(i)?;
        Ok(i)
    }

    /// Stop (`SIGSTOP`) or continue (`SIGCONT`) replica `i` (0-based), if
    /// it runs.
    pub(crate) fn signal(&self, i: usize, stop: bool) -> Result<(), String> {
        let Some(pid) = self.pid(i) else {
            return Ok(());
        };
        let sig = if stop { "-STOP" } else { "-CONT" };
        let status = Command::new("kill")
            .arg(sig)
            .arg(pid.to_string())
            .status()
            .map_err(|e| format!("running kill {sig}: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill {sig} {pid} failed ({status})"))
        }
    }

    /// Delete replica `i`'s (0-based) data directory: the disk was lost.
    /// It must not be running.
    pub(crate) fn wipe(&self, i: usize) -> Result<(), String> {
        if self.pid(i).is_some() {
            return Err(format!("replica {} is running", i + 1));
        }
        let dir = self.data_dir(i);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("deleting {}: {e}", dir.display())),
        }
    }

    /// Where [`start`](Servers::start) puts the certificates
    /// when asked for TLS.
    pub(crate) fn certs_dir(&self) -> PathBuf {
        self.dir.join("certs")
    }

    /// What a client connects with to servers started with TLS: the CA
    /// and the client `root`'s certificate and key.
    pub(crate) fn client_tls(&self) -> Result<TlsOptions, String> {
        let d = self.certs_dir();
        TlsOptions::from_files(
            &d.join("ca.crt"),
            Some(&d.join("client-root.crt")),
            Some(&d.join("client-root.key")),
        )
        .map_err(|e| e.to_string())
    }

    /// Replica `i`'s configuration file (0-based `i`).
    fn config_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("r{}.toml", i + 1))
    }

    /// Replica `i`'s log (0-based `i`); a restart appends to it.
    pub(crate) fn log_path(&self, i: usize) -> PathBuf {
        self.dir.join(format!("r{}.log", i + 1))
    }

    /// Replica `i`'s data directory (0-based `i`), as
    /// `ServerConfig::group_on` names it.
    pub(crate) fn data_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("r{}", i + 1))
    }

    /// Start replica `i` (0-based) from its configuration file and data
    /// directory. It must not be running.
    pub(crate) fn spawn(&mut self, i: usize) -> Result<(), String> {
        match self.children.get(i) {
            None => return Err(format!("there is no replica {}", i + 1)),
            Some(Some(_)) => return Err(format!("replica {} is running already", i + 1)),
            Some(None) => {}
        }
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(i))
            .map_err(|e| format!("opening the log of replica {}: {e}", i + 1))?;
        let child = Command::new(exe)
            .arg("serve")
            .arg("--config")
            .arg(self.config_path(i))
            .env("RUST_LOG", &self.log_filter)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("starting creek serve: {e}"))?;
        self.children[i] = Some(child);
        Ok(())
    }

    /// SIGKILL replica `i` (0-based) and reap it. Killing one that is not
    /// running does nothing.
    pub(crate) fn kill(&mut self, i: usize) -> Result<(), String> {
        if let Some(mut c) = self.children.get_mut(i).and_then(Option::take) {
            c.kill()
                .map_err(|e| format!("killing replica {}: {e}", i + 1))?;
            c.wait()
                .map_err(|e| format!("reaping replica {}: {e}", i + 1))?;
        }
        Ok(())
    }

    /// Replica `i`'s (0-based) process id, while it runs.
    pub(crate) fn pid(&self, i: usize) -> Option<u32> {
        self.children.get(i)?.as_ref().map(Child::id)
    }

    /// Why replica `i` (0-based) is not running, if it exited by itself
    /// (`None` while it runs, and for one killed here).
    pub(crate) fn exited(&mut self, i: usize) -> Option<String> {
        let child = self.children.get_mut(i)?.as_mut()?;
        match child.try_wait() {
            Ok(None) => None,
            Ok(Some(status)) => Some(format!("it exited ({status})")),
            Err(e) => Some(format!("it cannot be waited on ({e})")),
        }
    }

    /// The first replica that exited by itself, with why and the end of
    /// its log, as an error.
    pub(crate) fn check_alive(&mut self) -> Result<(), String> {
        for i in 0..self.children.len() {
            if let Some(why) = self.exited(i) {
                return Err(format!(
                    "replica {} died: {why}; {}",
                    i + 1,
                    creek_server::replica_log::log_tail(&self.log_path(i))
                ));
            }
        }
        Ok(())
    }
}

/// The cluster a benchmark measures: servers it started (stopped with
/// this value), or a running cluster attached to.
pub(crate) struct Target {
    /// The servers started, if any.
    pub(crate) servers: Option<Servers>,
    /// The replicas' client endpoints.
    pub(crate) clients: Vec<SocketAddr>,
    /// The replicas' `/metrics` endpoints (none when attached).
    pub(crate) metrics: Vec<SocketAddr>,
    /// What clients connect with: TLS options when the servers were
    /// started with TLS, `None` for plaintext.
    pub(crate) tls: Option<TlsOptions>,
}

impl Target {
    /// Attach to `attach` if it names replicas, else start `n` with the
    /// server defaults, with TLS on the client and peer links if `tls`. An
    /// attached cluster is measured in plaintext: `tls` with `attach` is
    /// refused.
    pub(crate) fn start_or_attach(
        n: usize,
        attach: &[SocketAddr],
        tls: bool,
    ) -> Result<Target, String> {
        if !attach.is_empty() {
            if tls {
                return Err(
                    "--tls measures a cluster the benchmark starts: it cannot be \
                            combined with --attach"
                        .into(),
                );
            }
            return Ok(Target {
                servers: None,
                clients: attach.to_vec(),
                metrics: Vec::new(),
                tls: None,
            });
        }
        // Each replica serves `/metrics`, for the stage timings.
        let metrics = (0..n).map(|_| free_addr()).collect::<Result<Vec<_>, _>>()?;
        let servers = Servers::start(n, "cluster", "warn", tls, |c| {
            c.metrics_addr = usize::from(c.id)
                .checked_sub(1)
                .and_then(|i| metrics.get(i))
                .copied();
        })?;
        Ok(Target {
            tls: if tls {
                Some(servers.client_tls()?)
            } else {
                None
            },
            clients: servers.clients.clone(),
            servers: Some(servers),
            metrics,
        })
    }

    /// The process ids of the servers started and running (none when
    /// attached).
    pub(crate) fn pids(&self) -> Vec<u32> {
        self.servers.as_ref().map_or_else(Vec::new, |s| {
            (0..s.clients.len()).filter_map(|i| s.pid(i)).collect()
        })
    }
}

impl Drop for Servers {
    fn drop(&mut self) {
        for mut c in self.children.iter_mut().filter_map(Option::take) {
            let _ = c.kill();
            let _ = c.wait();
        }
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_setting_fails_before_any_process_starts_and_leaves_nothing() {
        let r = Servers::start(3, "procs-test", "warn", false, |c| {
            c.checkpoint_every_secs = 0
        });
        let Err(e) = r else {
            panic!("checkpoint_every_secs = 0 was accepted");
        };
        assert!(e.contains("checkpoint_every_secs"), "{e}");
        let dir =
            std::env::temp_dir().join(format!("creek-bench-procs-test-{}", std::process::id()));
        assert!(!dir.exists(), "{} was left behind", dir.display());
    }
}
