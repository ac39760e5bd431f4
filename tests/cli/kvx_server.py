"""Starts `kvx serve` on a free loopback port for a test, and stops it with SIGTERM (checking it exits 0).
All traffic goes to 127.0.0.1; every wait is bounded."""
import http.client
import json
import re
import signal
import subprocess
import threading
import time

from kvx_cli import KVX

START_TIMEOUT = 120  # loading a model under AddressSanitizer takes a while


class KvxServer:
    def __init__(self, *args):
        self.proc = subprocess.Popen([KVX, "serve", "--host", "127.0.0.1", "--port", "0", *args],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.log = []
        first_line = threading.Event()

        def drain():  # keeps the pipe from filling, and keeps the log for failures
            for line in self.proc.stderr:
                self.log.append(line.decode("utf-8", "replace"))
                first_line.set()
            first_line.set()

        self.reader = threading.Thread(target=drain, daemon=True)
        self.reader.start()
        first_line.wait(START_TIMEOUT)
        m = re.search(r"http://127\.0\.0\.1:(\d+)", "".join(self.log))
        if not m:
            self.proc.kill()
            self.proc.wait(30)
            self.proc.stderr.close()
            raise RuntimeError("kvx serve did not start: " + "".join(self.log))
        self.port = int(m.group(1))
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, headers, body bytes) of one request on a fresh connection."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
            conn.request(method, path, body=data, headers=headers or {"Content-Type": "application/json"})
            res = conn.getresponse()
            return res.status, dict(res.getheaders()), res.read()
        finally:
            conn.close()

    def metrics(self):
        """The Prometheus text as {name{labels}: value}."""
        status, _, body = self.request("GET", "/metrics")
        assert status == 200, body
        values = {}
        for line in body.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                values[name] = float(value)
        return values

    def wait_idle(self, timeout=60):
        """The metrics once no request runs or waits."""
        deadline = time.monotonic() + timeout
        while True:
            m = self.metrics()
            if m["kvx_requests_running"] == 0 and m["kvx_requests_waiting"] == 0 and \
                    m['kvx_kv_blocks{group="0",state="in_use"}'] == 0:
                return m
            if time.monotonic() > deadline:
                raise AssertionError(f"the server is not idle after {timeout} s: {m}")
            time.sleep(0.05)

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))

    def stop(self, timeout=60):
        """SIGTERM; returns the exit code (the log is in self.log)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(30)
            raise
        self.reader.join(30)
        self.proc.stderr.close()
        return code
