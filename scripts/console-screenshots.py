#!/usr/bin/env python3
"""Take the screenshots of docs/console.md: start `creek dev` on spare
ports, put a light load on it through the console's own invoke endpoint
(weak and strong increments of shared counters from every replica, so some
speculation gets corrected), and photograph replica 1's console with a
headless chromium driven by chromedriver (W3C WebDriver). Standard library
only; needs chromium and chromium-driver (Debian packages).

    scripts/console-screenshots.py [--creek target/debug/creek] [--out docs/console]
"""
import argparse, base64, json, os, random, shutil, signal, socket, subprocess
import tempfile, threading, time, urllib.request

def post(url, body, timeout=10):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode()

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

class Driver:
    def __init__(self, port):
        self.base = f"http://127.0.0.1:{port}"
        self.sid = None
    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["value"]
    def session(self, profile):
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": shutil.which("chromium"),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                     f"--user-data-dir={profile}", "--window-size=1400,1650"]}}}}
        self.sid = self.call("POST", "/session", caps)["sessionId"]
    def s(self, rest=""):
        return f"/session/{self.sid}{rest}"
    def eval(self, script):
        return self.call("POST", self.s("/execute/sync"), {"script": script, "args": []})
    def shot(self, path):
        # Just after a refresh the strip's new ops are still fading in:
        # wait for the next one, then for the animation.
        seen = self.eval("return document.body.dataset.updated || ''")
        for _ in range(30):
            time.sleep(0.1)
            if self.eval("return document.body.dataset.updated || ''") != seen:
                break
        time.sleep(0.6)
        with open(path, "wb") as f:
            f.write(base64.b64decode(self.call("GET", self.s("/screenshot"))))

def load(http_ports, stop):
    def worker(i):
        rng = random.Random(i)
        while not stop.is_set():
            port = http_ports[i % len(http_ports)]
            level = rng.choice(["weak", "weak", "both"])
            key = rng.choice(["hot", "hot", f"k{rng.randrange(20)}"])
            try:
                post(f"http://127.0.0.1:{port}/api/invoke",
                     {"procedure": "kv.incr", "args": [key, 1], "level": level})
            except Exception:
                pass
            time.sleep(rng.uniform(0.005, 0.03))
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(6)]
    for t in threads:
        t.start()
    return threads

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--creek", default="target/debug/creek")
    ap.add_argument("--out", default="docs/console")
    ap.add_argument("--warm", type=float, default=40.0, help="seconds of load before the shots")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="creek-shots-")
    base = 20000 + random.randrange(10000)
    dev = subprocess.Popen([a.creek, "dev", "--data-dir", f"{tmp}/data", "--client-port", str(base),
                            "--peer-port", str(base + 100), "--metrics-port", str(base + 200)],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=open(f"{tmp}/dev.log", "w"))
    dport = free_port()
    driver = subprocess.Popen(["chromedriver", f"--port={dport}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    stop = threading.Event()
    try:
        http_ports = [base + 200, base + 201, base + 202]
        console = f"http://127.0.0.1:{http_ports[0]}/"
        for _ in range(100):
            try:
                urllib.request.urlopen(console + "api/console", timeout=1).read()
                break
            except Exception:
                time.sleep(0.2)
        load(http_ports, stop)
        time.sleep(a.warm)
        d = Driver(dport)
        for _ in range(50):
            try:
                d.session(f"{tmp}/profile")
                break
            except Exception:
                time.sleep(0.2)
        d.call("POST", d.s("/url"), {"url": console})
        time.sleep(3)
        d.shot(f"{a.out}/overview.png")
        d.eval("document.getElementById('args').value = '[\"hot\", 1]';"
               "document.getElementById('level').value = 'both';"
               "document.getElementById('invoke-btn').click();"
               "document.getElementById('invoke-form').scrollIntoView(); return true")
        time.sleep(2)
        d.shot(f"{a.out}/invoke.png")
        # A replica that goes down: add a fourth in its own process
        # (`creek dev add-replica`), let it catch up, kill it.
        extra = subprocess.Popen([a.creek, "dev", "--data-dir", f"{tmp}/data", "--client-port",
                                  str(base), "--peer-port", str(base + 100), "--metrics-port",
                                  str(base + 200), "add-replica"],
                                 stdout=subprocess.DEVNULL, stderr=open(f"{tmp}/r4.log", "w"))
        for _ in range(150):
            r = json.loads(urllib.request.urlopen(console + "api/console", timeout=2).read())
            if any(m["replica"] == 4 and m["health"] == "up" for m in r["members"]):
                break
            time.sleep(0.2)
        time.sleep(5)
        extra.send_signal(signal.SIGKILL)
        extra.wait()
        time.sleep(3)
        d.eval("window.scrollTo(0, 0); return true")
        d.shot(f"{a.out}/replica-down.png")
        d.call("DELETE", d.s())
    finally:
        stop.set()
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        dev.send_signal(signal.SIGTERM)
        dev.wait(timeout=30)
        shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__":
    main()
