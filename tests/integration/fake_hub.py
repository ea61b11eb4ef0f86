#!/usr/bin/env python3
"""A local stand-in for the Hugging Face Hub's download endpoints, for tests/integration/pull_test.cpp.

Serves the repositories under --root (ROOT/ORG/NAME/..., revision REV of it from ROOT/ORG/NAME@REV/)
on 127.0.0.1 at a free port, written to --port-file once listening:

  GET /api/models/ORG/NAME/tree/REV?recursive=true[&cursor=N]  the file listing (JSON array; with
      --page-size, pages linked by a `Link: <url>; rel="next"` header)
  GET /ORG/NAME/resolve/REV/PATH   small files directly; LFS files (*.safetensors, *.gguf,
      tokenizer.json) by a 302 to /cdn/... on --cdn-host, as the Hub redirects to its CDN
  GET /cdn/ORG/NAME/REV/PATH       the bytes, with Range requests (206, 416)

Faults: --private REPO (401 without `Authorization: Bearer TOKEN`), --gated REPO (401 without a
token, 403 with one), --drop REPO/PATH=N (the first CDN response for it sends N bytes and closes
the connection), --corrupt REPO/PATH (the CDN serves one byte changed). Unknown repositories are a
401, unknown revisions and files a 404, as on the Hub. Every request is appended to --log as one
JSON line: method, path, query, range, auth ("none", "ok" or "bad"; never the token), host.
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".gguf")


def is_lfs(path):
    return path.endswith(LFS_SUFFIXES) or os.path.basename(path) == "tokenizer.json"


class Hub:
    def __init__(self, args):
        self.root = args.root
        self.token = args.token
        self.private = set(args.private)
        self.gated = set(args.gated)
        self.drops = dict(d.rsplit("=", 1) for d in args.drop)
        self.corrupt = set(args.corrupt)
        self.page_size = args.page_size
        self.cdn_host = args.cdn_host
        self.log_path = args.log
        self.lock = threading.Lock()
        self.sha = {}

    def repo_dir(self, repo, rev):
        d = os.path.join(self.root, repo if rev == "main" else repo + "@" + rev)
        return d if os.path.isdir(d) else None

    def listing(self, base):
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, base)
            for d in dirnames:
                rel = d if rel_dir == "." else rel_dir + "/" + d
                out.append({"type": "directory", "oid": "0" * 40, "size": 0, "path": rel})
            for f in sorted(filenames):
                rel = f if rel_dir == "." else rel_dir + "/" + f
                full = os.path.join(dirpath, f)
                data = open(full, "rb").read()
                entry = {"type": "file", "size": len(data), "path": rel,
                         "oid": hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()}
                if is_lfs(rel):
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data),
                                    "pointerSize": 134}
                out.append(entry)
        return out


class Handler(BaseHTTPRequestHandler):
    hub = None

    def log_message(self, fmt, *args):
        pass

    def auth(self):
        h = self.headers.get("Authorization")
        if h is None:
            return "none"
        return "ok" if self.hub.token and h == "Bearer " + self.hub.token else "bad"

    def record(self, path, query):
        line = {"method": self.command, "path": path, "query": query,
                "range": self.headers.get("Range"), "auth": self.auth(),
                "host": self.headers.get("Host")}
        with self.hub.lock:
            with open(self.hub.log_path, "a") as f:
                f.write(json.dumps(line) + "\n")

    def reply(self, status, body=b"", headers=None, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def error(self, status, code, message):
        self.reply(status, json.dumps({"error": message}).encode(),
                   {"X-Error-Code": code, "X-Error-Message": message})

    def access_denied(self, repo):
        """The Hub's answer for a repository this request may not read, or None."""
        a = self.auth()
        if repo in self.hub.private and a != "ok":
            self.error(401, "RepoNotFound", "Repository not found")
            return True
        if repo in self.hub.gated:
            if a == "none":
                self.error(401, "GatedRepo", "Access to model %s is restricted. You must be "
                           "authenticated to access it." % repo)
                return True
            self.error(403, "GatedRepo", "Access to model %s is restricted and you are not in "
                       "the authorized list." % repo)
            return True
        return False

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        query = urllib.parse.parse_qs(url.query)
        self.record(path, url.query)
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
            return self.tree("/".join(parts[2:4]), "/".join(parts[5:]), query)
        if len(parts) >= 5 and parts[2] == "resolve":
            return self.resolve("/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        if parts[0] == "cdn" and len(parts) >= 5:
            return self.cdn("/".join(parts[1:3]), parts[3], "/".join(parts[4:]))
        self.error(404, "NotFound", "no such endpoint")

    def tree(self, repo, rev, query):
        if not os.path.isdir(os.path.join(self.hub.root, repo)):
            return self.error(401, "RepoNotFound", "Repository not found")
        if repo in self.hub.private and self.access_denied(repo):
            return
        base = self.hub.repo_dir(repo, rev)
        if base is None:
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        entries = self.hub.listing(base)
        headers = {}
        if self.hub.page_size:
            start = int(query.get("cursor", ["0"])[0])
            end = start + self.hub.page_size
            if end < len(entries):
                nxt = "http://%s/api/models/%s/tree/%s?recursive=true&cursor=%d" % (
                    self.headers.get("Host"), repo, urllib.parse.quote(rev, safe=""), end)
                headers["Link"] = '<%s>; rel="next"' % nxt
            entries = entries[start:end]
        self.reply(200, json.dumps(entries).encode(), headers)

    def resolve(self, repo, rev, rel):
        if not os.path.isdir(os.path.join(self.hub.root, repo)):
            return self.error(401, "RepoNotFound", "Repository not found")
        if self.access_denied(repo):
            return
        base = self.hub.repo_dir(repo, rev)
        if base is None:
            return self.error(404, "RevisionNotFound", "Invalid rev id: " + rev)
        full = os.path.join(base, rel)
        if not os.path.isfile(full):
            return self.error(404, "EntryNotFound", "Entry not found")
        if is_lfs(rel):
            port = self.server.server_address[1]
            loc = "http://%s:%d/cdn/%s/%s/%s?signature=x" % (
                self.hub.cdn_host, port, repo, urllib.parse.quote(rev, safe=""),
                urllib.parse.quote(rel))
            return self.reply(302, b"", {"Location": loc}, "text/plain")
        return self.send_bytes(repo + "/" + rel, open(full, "rb").read())

    def cdn(self, repo, rev, rel):
        base = self.hub.repo_dir(repo, rev)
        full = os.path.join(base, rel) if base else None
        if full is None or not os.path.isfile(full):
            return self.error(404, "NotFound", "no such object")
        return self.send_bytes(repo + "/" + rel, open(full, "rb").read())

    def send_bytes(self, key, data):
        if key in self.hub.corrupt:
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        size = len(data)
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[len("bytes="):].partition("-")
            start = int(a)
            end = min(int(b), size - 1) if b else size - 1
            if start >= size:
                return self.reply(416, b"", {"Content-Range": "bytes */%d" % size})
            status = 206
        body = data[start:end + 1]
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.end_headers()
        with self.hub.lock:
            drop = self.hub.drops.pop(key, None)
        if drop is not None and int(drop) < len(body):
            self.wfile.write(body[:int(drop)])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--root", required=True)
    p.add_argument("--port-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--token", default="")
    p.add_argument("--private", action="append", default=[])
    p.add_argument("--gated", action="append", default=[])
    p.add_argument("--drop", action="append", default=[])
    p.add_argument("--corrupt", action="append", default=[])
    p.add_argument("--page-size", type=int, default=0)
    p.add_argument("--cdn-host", default="localhost")
    args = p.parse_args()
    Handler.hub = Hub(args)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    tmp = args.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.rename(tmp, args.port_file)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
