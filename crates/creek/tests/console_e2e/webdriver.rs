//! Just enough of the W3C WebDriver protocol (JSON over HTTP) to drive a
//! headless Chromium through `chromedriver`, over a minimal HTTP/1.1 client
//! on `std::net` (one request per connection). Dropping [`Browser`] ends
//! the session and kills the driver and every browser process (they name
//! the profile directory), so none outlives the test.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// One HTTP request; the status and body of the answer.
pub fn http(
    method: &str,
    addr: SocketAddr,
    path: &str,
    body: Option<(&str, &[u8])>,
) -> std::io::Result<(u16, String)> {
    http_with(method, addr, path, &[], body)
}

/// [`http`] with more headers (a `Host` among them replaces the address).
pub fn http_with(
    method: &str,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<(&str, &[u8])>,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let host = headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("host"))
        .map_or_else(|| addr.to_string(), |(_, v)| (*v).to_owned());
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers
        .iter()
        .filter(|(n, _)| !n.eq_ignore_ascii_case("host"))
    {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some((content_type, b)) = body {
        req.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            b.len()
        ));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    if let Some((_, b)) = body {
        s.write_all(b)?;
    }
    // Read the head, then a body of the length it gives (chromedriver
    // keeps the connection open), or chunks, or up to the close.
    let bad = |why: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned());
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    let split = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Err(bad("no end of headers"));
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let mut rest = raw[split + 4..].to_vec();
    let code: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| bad("no status"))?;
    let length = head.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    let chunked =
        head.contains("transfer-encoding: chunked") || head.contains("transfer-encoding:chunked");
    loop {
        let complete = match length {
            Some(n) => rest.len() >= n,
            None if chunked => dechunk(&rest).is_some(),
            None => false,
        };
        if complete {
            break;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        rest.extend_from_slice(&buf[..n]);
    }
    if let Some(n) = length {
        rest.truncate(n);
    } else if chunked {
        rest = dechunk(&rest).ok_or_else(|| bad("bad chunked body"))?;
    }
    Ok((code, String::from_utf8_lossy(&rest).to_string()))
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = b.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&b[..eol]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        b = &b[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

/// Where the browser and its driver are, if installed.
pub fn find_browser() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| -> Option<PathBuf> {
        let path = std::env::var_os("PATH")?;
        for dir in std::env::split_paths(&path) {
            for n in names {
                let p = dir.join(n);
                if p.is_file() {
                    return Some(p);
                }
            }
        }
        None
    };
    Some((
        find(&["chromedriver"])?,
        find(&["chromium", "chromium-browser"])?,
    ))
}

/// A headless browser session.
pub struct Browser {
    driver: Child,
    addr: SocketAddr,
    session: Option<String>,
    pub profile: PathBuf,
}

impl Browser {
    /// Start `chromedriver` on `addr` and open a session of a headless
    /// `chromium`, with its profile in `profile`.
    pub fn start(driver: &Path, chromium: &Path, addr: SocketAddr, profile: PathBuf) -> Browser {
        use std::os::unix::process::CommandExt as _;
        let child = Command::new(driver)
            .arg(format!("--port={}", addr.port()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start chromedriver");
        let mut b = Browser {
            driver: child,
            addr,
            session: None,
            profile,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        while http("GET", addr, "/status", None).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--no-first-run",
                         format!("--user-data-dir={}", b.profile.display()),
                         "--window-size=1400,1200"]
            }
        }}});
        let v = b.call("POST", "/session", Some(caps));
        b.session = Some(
            v["sessionId"]
                .as_str()
                .unwrap_or_else(|| panic!("no session in {v}"))
                .to_owned(),
        );
        b
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let text = body.map(|b| b.to_string());
        let body = text
            .as_deref()
            .map(|t| ("application/json; charset=utf-8", t.as_bytes()));
        let (code, answer) =
            http(method, self.addr, path, body).unwrap_or_else(|e| panic!("webdriver {path}: {e}"));
        let v: Value = serde_json::from_str(&answer)
            .unwrap_or_else(|e| panic!("webdriver {path}: {e}: {answer}"));
        assert_eq!(code, 200, "webdriver {method} {path}: {v}");
        v["value"].clone()
    }

    fn session_path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session.as_deref().unwrap_or(""))
    }

    /// Open `url`.
    pub fn goto(&self, url: &str) {
        self.call(
            "POST",
            &self.session_path("/url"),
            Some(json!({ "url": url })),
        );
    }

    /// Run `script` (a function body) in the page; its return value.
    pub fn eval(&self, script: &str) -> Value {
        self.call(
            "POST",
            &self.session_path("/execute/sync"),
            Some(json!({ "script": script, "args": [] })),
        )
    }

    /// Click the element `css` selects.
    pub fn click(&self, css: &str) {
        let el = self.call(
            "POST",
            &self.session_path("/element"),
            Some(json!({ "using": "css selector", "value": css })),
        );
        let id = el
            .as_object()
            .and_then(|o| o.values().next())
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no element {css}: {el}"))
            .to_owned();
        self.call(
            "POST",
            &self.session_path(&format!("/element/{id}/click")),
            Some(json!({})),
        );
    }

    /// Wait until `script` returns true, or panic with `what` and the last
    /// value of `show` past `within`.
    pub fn wait_for(&self, what: &str, within: Duration, script: &str, show: &str) {
        let deadline = Instant::now() + within;
        loop {
            if self.eval(script) == Value::Bool(true) {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "{what}: not within {within:?}; page shows {}",
                    self.eval(show)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if self.session.is_some() {
            let path = self.session_path("");
            let _ = http("DELETE", self.addr, &path, None);
        }
        // The browser's processes all name the profile directory; each is
        // killed by its own pid. (Not `kill -KILL -PGID` through the `kill`
        // program: under strace that was seen to become `kill(-1, SIGKILL)`,
        // every process of the user.)
        for pid in processes_mentioning(&self.profile.display().to_string()) {
            let _ = Command::new("kill")
                .args(["-s", "KILL", &pid.to_string()])
                .status();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Processes whose command line mentions `needle` (from /proc).
pub fn processes_mentioning(needle: &str) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(needle))
                .unwrap_or(false)
        })
        .collect()
}
