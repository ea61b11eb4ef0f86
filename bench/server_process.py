"""A server child for the benchmarks that compare rewind with llama.cpp's llama-server
(serve_bench.py, cache_vs_llama.py): started on loopback (rewind on --port 0, reading the port it
prints), up once GET /health answers 200, its output kept for the error when it does not start."""
import http.client, re, socket, subprocess, threading, time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """One server process; `kind` is "llama", or "rewind" or a name that starts with it. Its
    output is kept (the last lines are shown when it fails)."""

    def __init__(self, kind, cmd, port):
        self.kind, self.cmd, self.port = kind, cmd, port
        self.proc, self.log = None, []

    def start(self, startup_s):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace")
        deadline = time.time() + startup_s
        if self.kind.startswith("rewind"):  # --port 0: the server prints the port it bound
            self.port = None
            while time.time() < deadline:
                line = self.proc.stdout.readline()
                self.log.append(line)
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    break
                if not line and self.proc.poll() is not None:
                    break
        threading.Thread(target=lambda: [self.log.append(l) for l in self.proc.stdout],
                         daemon=True).start()
        if not self.port or not self._wait_health(deadline):
            self.stop()
            raise RuntimeError(f"{self.kind} server did not start: {' '.join(self.cmd)}\n" +
                               "".join(self.log[-20:]))

    def _wait_health(self, deadline):
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.3)
        return False

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
