//! The command line as a user runs it: `creek dev` (a process per replica,
//! driven through its prompt), typed `creek call` arguments, `-o json` and
//! `-o value`, `creek proc list`, `creek status`'s words and exit codes as
//! replicas stop and the quorum goes, a strong op's no-quorum error with
//! the request id to retry with, a wrong port, completion scripts.

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::time::{Duration, Instant};

const CREEK: &str = env!("CARGO_BIN_EXE_creek");

/// A `creek dev` process, its prompt and directory; killed (with its
/// replicas, which stop when it goes) and removed on drop.
struct Dev {
    child: Child,
    prompt: ChildStdin,
    dir: PathBuf,
    endpoints: String,
    metrics: u16,
}

impl Dev {
    fn start() -> Dev {
        let dir = std::env::temp_dir().join(format!("creek-cli-e2e-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let [client, peer, metrics] = free_runs();
        let mut child = Command::new(CREEK)
            .args(["dev", "--data-dir"])
            .arg(dir.join("data"))
            .args(["--client-port", &client.to_string()])
            .args(["--peer-port", &peer.to_string()])
            .args(["--metrics-port", &metrics.to_string()])
            .stdin(Stdio::piped())
            .stdout(std::fs::File::create(dir.join("dev.out")).expect("out"))
            .stderr(std::fs::File::create(dir.join("dev.err")).expect("err"))
            .spawn()
            .expect("spawn creek dev");
        let prompt = child.stdin.take().expect("stdin");
        let endpoints = (0..3)
            .map(|i| format!("127.0.0.1:{}", client + i))
            .collect::<Vec<_>>()
            .join(",");
        Dev {
            child,
            prompt,
            dir,
            endpoints,
            metrics,
        }
    }

    /// Type `line` at the prompt.
    fn say(&mut self, line: &str) {
        writeln!(self.prompt, "{line}").expect("prompt");
        self.prompt.flush().expect("flush");
    }

    /// Run `creek ARGS` against the cluster (through CREEK_ENDPOINTS).
    fn creek(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        let mut c = Command::new(CREEK)
            .args(args)
            .env("CREEK_ENDPOINTS", &self.endpoints)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn creek");
        if let Some(mut input) = c.stdin.take() {
            input.write_all(stdin.unwrap_or_default()).expect("stdin");
        }
        c.wait_with_output().expect("creek")
    }

    /// Poll `creek status` until its exit code is `code`; its stdout.
    fn status_until(&self, code: i32, within: Duration) -> String {
        let until = Instant::now() + within;
        loop {
            let out = self.creek(&["status"], None);
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            if out.status.code() == Some(code) {
                return text;
            }
            assert!(
                Instant::now() < until,
                "status never exited {code}; last ({:?}):\n{text}{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn logs(&self) -> String {
        let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
        format!(
            "dev stdout:\n{}\ndev stderr:\n{}",
            read(&self.dir.join("dev.out")),
            read(&self.dir.join("dev.err"))
        )
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Its replicas notice their parent went and stop within a second.
        std::thread::sleep(Duration::from_secs(1));
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Three runs of three free consecutive loopback ports (client, peer,
/// metrics), as `creek dev` numbers them.
fn free_runs() -> [u16; 3] {
    let mut found = Vec::new();
    let mut base = 20_000 + (std::process::id() % 20_000) as u16;
    while found.len() < 3 {
        let free = (0..3).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok());
        if free {
            found.push(base);
            base += 3;
        }
        base += 7;
    }
    [found[0], found[1], found[2]]
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `creek ARGS` must succeed; its stdout.
fn ok(dev: &Dev, args: &[&str]) -> String {
    let out = dev.creek(args, None);
    assert!(
        out.status.success(),
        "creek {args:?}: {:?}\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

#[test]
fn the_cli_types_arguments_reports_quorum_and_drives_a_dev_cluster() {
    let mut dev = Dev::start();
    let status = dev.status_until(0, Duration::from_secs(30));
    assert!(status.contains("ok: 3 of 3 voters up"), "{status}");
    // The replicas log to files: no colour codes there.
    let log = std::fs::read_to_string(dev.dir.join("data/r1.log")).expect("r1.log");
    assert!(log.contains("INFO"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file:\n{log}"
    );

    // Typed arguments: a bare 5 where the signature says bytes is the text.
    ok(&dev, &["call", "kv.put", "n", "5"]);
    let got = ok(
        &dev,
        &["call", "-o", "value", "--level", "strong", "kv.get", "n"],
    );
    assert_eq!(got, "5");
    let json = ok(&dev, &["call", "-o", "json", "kv.incr", "n", "2"]);
    let views: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON view per line"))
        .collect();
    assert_eq!(views.last().expect("a view")["value"], 7);
    assert!(views.iter().all(|v| v["request_id"].is_string()));
    let out = dev.creek(&["call", "kv.incr", "visits", "1.5"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("argument 2 (delta) must be an integer, got \"1.5\""),
        "{}",
        text(&out.stderr)
    );

    // Bytes from hex, from a file and from standard input.
    let file = dev.dir.join("blob");
    std::fs::write(&file, [0u8, 159, 146, 150]).expect("blob");
    ok(&dev, &["call", "kv.put", "h", "x:00ff"]);
    ok(
        &dev,
        &["call", "kv.put", "f", &format!("@{}", file.display())],
    );
    let piped = dev.creek(&["call", "kv.put", "s", "-"], Some(b"from stdin"));
    assert!(piped.status.success(), "{}", text(&piped.stderr));
    let h = ok(
        &dev,
        &["call", "-o", "json", "--level", "strong", "kv.get", "h"],
    );
    assert!(h.contains(r#""value":{"hex":"00ff"}"#), "{h}");
    let out = dev.creek(
        &["call", "-o", "value", "--level", "strong", "kv.get", "f"],
        None,
    );
    assert_eq!(
        out.stdout,
        [0u8, 159, 146, 150],
        "bytes written as they are"
    );
    let s = ok(
        &dev,
        &["call", "-o", "value", "--level", "strong", "kv.get", "s"],
    );
    assert_eq!(s, "from stdin");

    // Procedures with their signatures.
    let procs = ok(&dev, &["proc", "list", "-o", "json"]);
    let incr = procs
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON"))
        .find(|p| p["name"] == "kv.incr")
        .expect("kv.incr listed");
    assert_eq!(incr["params"][1]["type"], "int");
    assert!(
        !procs.contains("creek."),
        "internal procedures are not listed"
    );
    // A reader that goes away (`creek proc list | head -1`) ends the
    // command quietly: no panic on the broken pipe.
    let mut listing = Command::new(CREEK)
        .args(["proc", "list"])
        .env("CREEK_ENDPOINTS", &dev.endpoints)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn creek proc list");
    drop(listing.stdout.take());
    let listed = listing.wait_with_output().expect("creek proc list");
    assert!(
        listed.status.success() && !text(&listed.stderr).contains("panicked"),
        "{:?}: {}",
        listed.status,
        text(&listed.stderr)
    );
    // The banner of a cluster on other ports than the client commands'
    // default says how to reach it.
    let banner = std::fs::read_to_string(dev.dir.join("dev.out")).expect("dev.out");
    assert!(
        banner.contains(&format!("export CREEK_ENDPOINTS={}", dev.endpoints)),
        "{banner}"
    );

    // One replica stopped at the prompt: degraded, exit 3.
    dev.say("stop 2");
    let degraded = dev.status_until(3, Duration::from_secs(20));
    assert!(degraded.contains("degraded: replica 2"), "{degraded}");
    // Two down: no quorum, exit 4, in words; a strong op says so too and
    // names the request id to retry with.
    dev.say("kill 3");
    let lost = dev.status_until(4, Duration::from_secs(20));
    assert!(
        lost.contains("no quorum: replicas 2 and 3 unreachable"),
        "{lost}"
    );
    let out = dev.creek(&["call", "--timeout", "1s", "kv.put", "late", "v"], None);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("no quorum: replicas 2 and 3 unreachable from replica 1"),
        "{err}"
    );
    let retry = err
        .split("creek call ")
        .nth(1)
        .expect("a retry command")
        .trim()
        .to_owned();
    assert!(retry.starts_with("--request-id "), "{retry}");

    // Back up: the retry learns the outcome of the op that waited.
    dev.say("start 2");
    dev.say("start 3");
    dev.status_until(0, Duration::from_secs(60));
    let args: Vec<&str> = retry.split_whitespace().collect();
    let mut call = vec!["call", "-o", "json"];
    call.extend(&args);
    let again = ok(&dev, &call);
    assert!(again.contains(r#""value":null"#), "{again}");
    let late = ok(
        &dev,
        &["call", "-o", "value", "--level", "strong", "kv.get", "late"],
    );
    assert_eq!(late, "v");

    // A wrong port says what it reached.
    let metrics = format!("127.0.0.1:{}", dev.metrics);
    let out = dev.creek(&["call", "--addr", &metrics, "kv.get", "n"], None);
    assert!(
        text(&out.stderr).contains("answered HTTP 404, not gRPC"),
        "{}",
        text(&out.stderr)
    );

    // `quit` stops every replica; creek dev exits cleanly.
    dev.say("quit");
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = dev.child.try_wait().expect("wait") {
            break s;
        }
        assert!(Instant::now() < until, "creek dev did not quit");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{status:?}\n{}", dev.logs());
}

/// Run `creek FLAGS serve` as a one-replica group for two seconds, stop it
/// with SIGTERM; its stderr.
fn serve_briefly(flags: &[&str]) -> String {
    let dir = std::env::temp_dir().join(format!("creek-cli-log-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let [client, peer, _] = free_runs();
    let me = format!("1=127.0.0.1:{peer},127.0.0.1:{client}");
    let serve = Command::new(CREEK)
        .args(flags)
        .args(["serve", "--id", "1", "--replica", &me])
        .arg("--data-dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("creek serve");
    std::thread::sleep(Duration::from_secs(2));
    let _ = Command::new("kill")
        .args(["-TERM", &serve.id().to_string()])
        .status();
    let out = serve.wait_with_output().expect("creek serve");
    let _ = std::fs::remove_dir_all(&dir);
    text(&out.stderr)
}

#[test]
fn logs_in_json_at_the_level_asked() {
    let json = serve_briefly(&["--log-format", "json"]);
    let lines: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.iter().any(|l| l["level"] == "INFO"), "{json}");
    let quiet = serve_briefly(&["--log-level", "warn"]);
    assert!(
        !quiet.contains("INFO"),
        "info lines at --log-level warn:\n{quiet}"
    );
    let out = Command::new(CREEK)
        .args(["--log-level", "loud", "serve", "--id", "1"])
        .output()
        .expect("creek serve");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("--log-level \"loud\""),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn completion_scripts_and_usage_errors() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(CREEK)
            .args(["completion", shell])
            .output()
            .expect("creek completion");
        assert!(out.status.success(), "{shell}");
        assert!(
            text(&out.stdout).contains("proc"),
            "{shell} completes subcommands"
        );
    }
    // Each command's line in the usage says what that command does.
    let help = Command::new(CREEK)
        .arg("--help")
        .output()
        .expect("creek --help");
    let line = |name: &str| {
        text(&help.stdout)
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(line("certs").contains("certificate"), "{}", line("certs"));
    assert!(
        line("completion").contains("completion script"),
        "{}",
        line("completion")
    );
    let out = Command::new(CREEK)
        .args(["dev", "--replicas", "0"])
        .output()
        .expect("creek dev");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("a dev cluster has 1 to 9 replicas"),
        "{}",
        text(&out.stderr)
    );
    let out = Command::new(CREEK)
        .args(["call", "--request-id", "nonsense", "kv.get", "k"])
        .output()
        .expect("creek call");
    assert_eq!(out.status.code(), Some(2), "a usage error");
}
