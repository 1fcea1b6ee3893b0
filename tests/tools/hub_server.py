#!/usr/bin/env python3
"""A stand-in Hugging Face Hub for tests (issue 40): the Hub itself cannot be reached from the test
machines, so this serves model repos from a folder tree the way huggingface.co does, over HTTPS,
with switches for the faults a download must survive. Python standard library only.

Usage:
  hub_server.py --root DIR --state DIR [--cert FILE --key FILE] [--token T] [--cdn-host HOST]

  --root DIR     repos: DIR/<org>/<name>/ holds the files of one commit; optional DIR/<org>/<name>/repo.json:
                   {"commits": {"<40 hex>": "<sub-folder of the repo holding that commit's files>", ...},
                    "refs": {"main": "<40 hex>", "v1.0": "<40 hex>"},
                    "lfs": ["*.safetensors", ...],     (fnmatch patterns; default: weights formats)
                    "gated": false | "auto" | "manual", "private": false,
                    "moved_to": "org/new"}   (a renamed repo: every request answers 307 to the new name)
                 Without "commits" the repo folder itself (minus repo.json) is one commit whose id is
                 "commit" from repo.json, else a sha1 of the tree, and "refs" defaults to {"main": it}.
  --state DIR    where the server writes cert.pem/key.pem (made with openssl at start unless --cert/--key),
                 requests.log (one JSON object a line: method, path, range, auth (bool; never the token),
                 status, bytes, cut) and reads control.json before every request.
  --token T      the token the server accepts for gated/private repos (default "hf_test_token").
  --cdn-host H   host name put in the LFS redirect Location (default 127.0.0.1; "localhost" makes the
                 CDN a different host from the endpoint, as on the real Hub).

The first stdout line is the port (bound to 127.0.0.1, port 0); the second is the cert file path.

control.json (re-read on every request; write it atomically, tmp + rename). All keys optional:
  {"token": "...",                         overrides --token
   "gated": ["org/name", ...],             treated as gated ("manual") in addition to repo.json
   "private": ["org/name", ...],           treated as private
   "require_token": true,                  every repo is private (needs the token)
   "cut": {"FILE": {"after": N, "times": K}},  a GET of FILE's body is cut after N bytes (the connection
                                            closes), the first K times (default: always) since this
                                            control content was written
   "corrupt": ["FILE", ...],               FILE's body is served with one byte changed (same size)
   "status": {"FILE": 503},                 answer requests for FILE with that status
   "throttle_bps": N,                      body bytes per second (for progress and cancel tests)
   "stall": {"FILE": {"after": N, "seconds": S, "times": K}},  the body stops for S seconds after N bytes
   "no_blobs": true}                       model info ignores ?blobs=true (a mirror without sizes/hashes)
  FILE is a repo path ("model.safetensors") or "org/name/model.safetensors".

The protocol (what huggingface_hub's client expects; docs/models.md, 40-design section 4):
  GET  /api/models/{org}/{name}[/revision/{rev}][?blobs=true]  model info JSON
  GET  /api/models/{org}/{name}/tree/{rev}[?recursive=true]      the file list (snapshot_download 2.x)
  HEAD|GET /{org}/{name}/resolve/{rev}/{file}   X-Repo-Commit, quoted ETag (git blob sha1); LFS files:
       302 to https://{cdn-host}:{port}/cdn/{sha256} with X-Linked-Etag "sha256" and X-Linked-Size
  HEAD|GET /cdn/{sha256}                        the LFS bytes, no auth, Range supported
  Errors: X-Error-Code GatedRepo (401 without a token, 403 with a wrong one), RepoNotFound (401; 404
  with a valid token), RevisionNotFound 404, EntryNotFound 404; X-Error-Message says why.
"""

import argparse
import fnmatch
import hashlib
import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULT_LFS = ["*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.h5", "*.msgpack", "*.onnx",
               "*.gguf", "*.model"]

_hash_cache = {}
_hash_lock = threading.Lock()


def file_hashes(path):
    """(size, git blob sha1, sha256) of a file, cached by (path, mtime, size)."""
    st = os.stat(path)
    key = (path, st.st_mtime_ns, st.st_size)
    with _hash_lock:
        if key in _hash_cache:
            return _hash_cache[key]
    with open(path, "rb") as f:
        data = f.read()
    git = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    sha = hashlib.sha256(data).hexdigest()
    value = (len(data), git, sha)
    with _hash_lock:
        _hash_cache[key] = value
    return value


def lfs_pointer(sha, size):
    return ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (sha, size)).encode()


def git_blob_id(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def list_files(folder):
    out = []
    for base, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for f in sorted(files):
            if f.startswith("."):
                continue
            rel = os.path.relpath(os.path.join(base, f), folder)
            out.append(rel.replace(os.sep, "/"))
    return out


class Repo:
    def __init__(self, root, repo_id):
        self.id = repo_id
        self.dir = os.path.join(root, *repo_id.split("/"))
        meta = {}
        meta_path = os.path.join(self.dir, "repo.json")
        if os.path.exists(meta_path):
            with open(meta_path) as f:
                meta = json.load(f)
        self.lfs = meta.get("lfs", DEFAULT_LFS)
        self.gated = meta.get("gated", False)
        self.private = bool(meta.get("private", False))
        self.commits = {}  # commit -> folder
        if "commits" in meta:
            for c, sub in meta["commits"].items():
                self.commits[c] = os.path.join(self.dir, sub)
            self.refs = dict(meta.get("refs", {}))
        else:
            files = [f for f in list_files(self.dir) if f != "repo.json"]
            commit = meta.get("commit")
            if not commit:
                h = hashlib.sha1()
                for f in files:
                    h.update(f.encode() + b"\0" + file_hashes(os.path.join(self.dir, f))[1].encode())
                commit = h.hexdigest()
            self.commits[commit] = self.dir
            self.refs = dict(meta.get("refs", {"main": commit}))

    def commit_for(self, rev):
        if rev in self.commits:
            return rev
        return self.refs.get(rev)

    def files(self, commit):
        folder = self.commits[commit]
        skip_subs = set()
        if folder == self.dir:
            skip_subs = {"repo.json"}
        return [f for f in list_files(folder) if f not in skip_subs]

    def is_lfs(self, name):
        base = name.rsplit("/", 1)[-1]
        return any(fnmatch.fnmatch(base, p) or fnmatch.fnmatch(name, p) for p in self.lfs)

    def entry(self, commit, name):
        """(path on disk, size, etag, sha256 or None, blob id) for a repo file."""
        path = os.path.join(self.commits[commit], *name.split("/"))
        size, git, sha = file_hashes(path)
        if self.is_lfs(name):
            return path, size, sha, sha, git_blob_id(lfs_pointer(sha, size))
        return path, size, git, None, git


class State:
    def __init__(self, args):
        self.root = os.path.abspath(args.root)
        self.state = os.path.abspath(args.state)
        self.token = args.token
        self.cdn_host = args.cdn_host
        self.port = 0
        self.log_lock = threading.Lock()
        self.log = open(os.path.join(self.state, "requests.log"), "a", buffering=1)
        self.control_path = os.path.join(self.state, "control.json")
        self.control_text = None
        self.control = {}
        self.cut_counts = {}
        self.lock = threading.Lock()

    def read_control(self):
        try:
            with open(self.control_path) as f:
                text = f.read()
        except OSError:
            text = ""
        with self.lock:
            if text != self.control_text:
                self.control_text = text
                try:
                    self.control = json.loads(text) if text.strip() else {}
                except ValueError:
                    self.control = {}
                self.cut_counts = {}
            return self.control

    def take_cut(self, key, rule):
        """Whether this GET is cut (counts against "times")."""
        with self.lock:
            n = self.cut_counts.get(key, 0)
            times = rule.get("times")
            if times is not None and n >= int(times):
                return False
            self.cut_counts[key] = n + 1
            return True

    def write_log(self, record):
        with self.log_lock:
            self.log.write(json.dumps(record) + "\n")


def match_fault(table, repo_id, name):
    """The value in a control table (dict or list) for a repo file, or None."""
    if not table or name is None:
        return None
    for key in (repo_id + "/" + name, name):
        if isinstance(table, dict) and key in table:
            return table[key]
        if isinstance(table, list) and key in table:
            return True
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hub-stand-in/1"

    def log_message(self, fmt, *args):  # the request log is written by hand (no token values)
        pass

    # --- helpers ---------------------------------------------------------------------------------
    def flush_log(self):
        """Writes this request's log line once. Called before the client can see the end of the answer,
        so a test that reads the log after its request finished always finds the line."""
        if not self.logged:
            self.logged = True
            self.server.st.write_log(self.record)

    def finish_headers(self, body_follows=False):
        if not body_follows:
            self.flush_log()
        self.end_headers()

    def bearer(self):
        h = self.headers.get("Authorization", "")
        return h[7:].strip() if h.startswith("Bearer ") else None

    def send_error_code(self, status, code, message):
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.record["status"] = status
        self.record["error"] = code
        self.finish_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_plain(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.record["status"] = status
        self.finish_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def access(self, repo_id, control):
        """The Repo if this request may see it, else None after sending the error."""
        st = self.server.st
        token = control.get("token", st.token)
        given = self.bearer()
        valid = given is not None and given == token
        repo_dir = os.path.join(st.root, *repo_id.split("/"))
        if not os.path.isdir(repo_dir):
            self.send_error_code(404 if valid else 401, "RepoNotFound",
                                 "Repository Not Found for url: %s." % self.path +
                                 ("" if valid else " Please make sure you specified the correct `repo_id` "
                                  "and `repo_type`. If you are trying to access a private or gated repo, "
                                  "make sure you are authenticated."))
            return None
        repo = Repo(st.root, repo_id)
        private = repo.private or repo_id in control.get("private", []) or bool(control.get("require_token"))
        if private and not valid:
            self.send_error_code(401, "RepoNotFound",
                                 "Repository Not Found for url: %s. If you are trying to access a private or "
                                 "gated repo, make sure you are authenticated." % self.path)
            return None
        if repo_id in control.get("gated", []) and not repo.gated:
            repo.gated = "manual"
        return repo

    def gate(self, repo, control):
        """For file requests: False after sending GatedRepo when the token is missing or wrong."""
        if not repo.gated:
            return True
        token = control.get("token", self.server.st.token)
        given = self.bearer()
        if given is None:
            self.send_error_code(401, "GatedRepo",
                                 "Access to model %s is restricted. You must have access to it and be "
                                 "authenticated to access it. Please log in." % repo.id)
            return False
        if given != token:
            self.send_error_code(403, "GatedRepo",
                                 "Access to model %s is restricted and you are not in the authorized list. "
                                 "Visit https://huggingface.co/%s to ask for access." % (repo.id, repo.id))
            return False
        return True

    def send_body(self, path, size, etag, repo_id, name, control, extra_headers):
        """Sends a file with Range support and the cut/corrupt/throttle faults."""
        start, end = 0, size - 1
        rng = self.headers.get("Range")
        status = 200
        if rng:
            try:
                unit, spec = rng.split("=", 1)
                a, b = spec.split("-", 1)
                if unit.strip() != "bytes" or "," in spec:
                    raise ValueError
                start = int(a) if a else max(0, size - int(b))
                end = int(b) if (a and b) else size - 1
            except ValueError:
                start, end = 0, size - 1
            else:
                if start >= size or start > end:
                    self.send_response(416)
                    self.send_header("Content-Range", "bytes */%d" % size)
                    self.send_header("Content-Length", "0")
                    self.record["status"] = 416
                    self.finish_headers()
                    return
                end = min(end, size - 1)
                status = 206
        length = end - start + 1
        self.send_response(status)
        for k, v in extra_headers:
            self.send_header(k, v)
        self.send_header("ETag", '"%s"' % etag)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        if status == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
        self.record["status"] = status
        self.finish_headers(body_follows=self.command != "HEAD")
        if self.command == "HEAD":
            return
        with open(path, "rb") as f:
            data = bytearray(f.read())
        if match_fault(control.get("corrupt"), repo_id, name) and len(data) > 0:
            data[len(data) // 2] ^= 0x5A
        body = bytes(data[start:end + 1])
        cut = match_fault(control.get("cut"), repo_id, name)
        limit = len(body)
        if isinstance(cut, dict) and self.server.st.take_cut(repo_id + "/" + name, cut):
            limit = max(0, min(limit, int(cut.get("after", 0))))
            self.record["cut"] = True
        self.record["bytes"] = limit
        stall = match_fault(control.get("stall"), repo_id, name)
        if not (isinstance(stall, dict) and self.server.st.take_cut("stall:" + repo_id + "/" + name, stall)):
            stall = None
        bps = float(control.get("throttle_bps", 0) or 0)
        sent = 0
        chunk = 16384 if bps <= 0 else max(1024, int(bps / 20))
        t0 = time.monotonic()
        try:
            while sent < limit:
                if stall is not None and sent >= int(stall.get("after", 0)):
                    self.record["stalled"] = True
                    time.sleep(float(stall.get("seconds", 5)))
                    stall = None
                n = min(chunk, limit - sent)
                if stall is not None:
                    n = min(n, max(1, int(stall.get("after", 0)) - sent))
                if sent + n >= limit:
                    self.flush_log()  # before the last bytes (see flush_log)
                self.wfile.write(body[sent:sent + n])
                sent += n
                if bps > 0:
                    ahead = sent / bps - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.record["aborted"] = True
            self.record["bytes"] = sent
        self.flush_log()
        if limit < len(body):
            self.close_connection = True
            try:
                self.request.shutdown(2)
            except OSError:
                pass

    # --- routes ----------------------------------------------------------------------------------
    def handle_any(self):
        st = self.server.st
        url = urllib.parse.urlsplit(self.path)
        self.logged = False
        self.record = {"method": self.command, "path": url.path, "query": url.query,
                       "range": self.headers.get("Range"), "auth": "Authorization" in self.headers,
                       "status": None, "bytes": 0}
        try:
            control = st.read_control()
            parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
            if self.moved(url, parts):
                return
            if len(parts) >= 4 and parts[0] == "api" and parts[1] == "models":
                self.model_info(parts[2] + "/" + parts[3], parts[4:], url.query, control)
            elif len(parts) == 2 and parts[0] == "cdn":
                self.cdn(parts[1], control)
            elif len(parts) >= 5 and parts[2] == "resolve":
                self.resolve(parts[0] + "/" + parts[1], parts[3], "/".join(parts[4:]), control)
            else:
                self.send_plain(404, "not found")
        finally:
            self.flush_log()

    do_GET = handle_any
    do_HEAD = handle_any

    def moved(self, url, parts):
        """A renamed repo (repo.json "moved_to": "org/new"): 307 to the same path under the new name,
        relative, as the Hub answers for both the API and resolve."""
        if len(parts) >= 4 and parts[0] == "api" and parts[1] == "models":
            at = 2
        elif len(parts) >= 5 and parts[2] == "resolve":
            at = 0
        else:
            return False
        meta_path = os.path.join(self.server.st.root, parts[at], parts[at + 1], "repo.json")
        try:
            with open(meta_path) as f:
                target = json.load(f).get("moved_to")
        except (OSError, ValueError):
            return False
        if not target:
            return False
        raw = url.path.split("/")
        raw[at + 1:at + 3] = target.split("/")
        location = "/".join(raw) + ("?" + url.query if url.query else "")
        self.send_response(307)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.record["status"] = 307
        self.finish_headers()
        return True

    def model_info(self, repo_id, rest, query, control):
        repo = self.access(repo_id, control)
        if repo is None:
            return
        if rest and rest[0] == "tree" and len(rest) >= 2:
            return self.tree(repo, rest[1], "/".join(rest[2:]))
        rev = "main"
        if rest:
            if rest[0] != "revision" or len(rest) < 2:
                return self.send_plain(404, "not found")
            rev = "/".join(rest[1:])
        commit = repo.commit_for(rev)
        if commit is None:
            return self.send_error_code(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
        blobs = ("blobs=true" in query or "blobs=True" in query) and not control.get("no_blobs")
        siblings = []
        for name in repo.files(commit):
            s = {"rfilename": name}
            if blobs:
                _, size, _, sha, blob_id = repo.entry(commit, name)
                s["size"] = size
                s["blobId"] = blob_id
                if sha:
                    s["lfs"] = {"sha256": sha, "size": size, "pointerSize": len(lfs_pointer(sha, size))}
            siblings.append(s)
        info = {"_id": hashlib.md5(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id,
                "author": repo_id.split("/")[0], "sha": commit, "lastModified": "2025-01-01T00:00:00.000Z",
                "private": repo.private, "gated": repo.gated, "disabled": False, "downloads": 0, "likes": 0,
                "tags": [], "siblings": siblings}
        body = json.dumps(info).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.record["status"] = 200
        self.finish_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def tree(self, repo, rev, prefix):
        """GET /api/models/{org}/{name}/tree/{rev}[/{path}]?recursive=true: the file list that
        huggingface_hub 2.x's snapshot_download asks for (one page; no Link header)."""
        commit = repo.commit_for(rev)
        if commit is None:
            return self.send_error_code(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
        entries, folders = [], set()
        for name in repo.files(commit):
            if prefix and not name.startswith(prefix.rstrip("/") + "/"):
                continue
            _, size, _, sha, blob_id = repo.entry(commit, name)
            e = {"type": "file", "oid": blob_id, "size": size, "path": name}
            if sha:
                e["lfs"] = {"oid": sha, "size": size, "pointerSize": len(lfs_pointer(sha, size))}
            entries.append(e)
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                folders.add("/".join(parts[:i]))
        entries += [{"type": "directory", "oid": hashlib.sha1(f.encode()).hexdigest(), "size": 0, "path": f}
                    for f in sorted(folders)]
        body = json.dumps(entries).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.record["status"] = 200

    def resolve(self, repo_id, rev, name, control):
        repo = self.access(repo_id, control)
        if repo is None:
            return
        if not self.gate(repo, control):
            return
        commit = repo.commit_for(rev)
        if commit is None:
            return self.send_error_code(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
        if name not in repo.files(commit):
            return self.send_error_code(404, "EntryNotFound", "Entry not found")
        forced = match_fault(control.get("status"), repo_id, name)
        if isinstance(forced, int) and forced >= 400:
            return self.send_plain(forced, "forced status %d" % forced)
        path, size, etag, sha, blob_id = repo.entry(commit, name)
        if sha:
            location = "https://%s:%d/cdn/%s" % (self.server.st.cdn_host, self.server.st.port, sha)
            self.send_response(302)
            self.send_header("Location", location)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", '"%s"' % blob_id)
            self.send_header("X-Linked-Etag", '"%s"' % sha)
            self.send_header("X-Linked-Size", str(size))
            self.send_header("Content-Length", "0")
            self.record["status"] = 302
            self.finish_headers()
            return
        self.send_body(path, size, etag, repo_id, name, control, [("X-Repo-Commit", commit)])

    def cdn(self, sha, control):
        st = self.server.st
        # Find the file with that sha256 (any repo, any commit).
        for org in sorted(os.listdir(st.root)):
            org_dir = os.path.join(st.root, org)
            if not os.path.isdir(org_dir):
                continue
            for name in sorted(os.listdir(org_dir)):
                if not os.path.isdir(os.path.join(org_dir, name)):
                    continue
                repo = Repo(st.root, org + "/" + name)
                for commit in repo.commits:
                    for f in repo.files(commit):
                        if not repo.is_lfs(f):
                            continue
                        path, size, etag, fsha, _ = repo.entry(commit, f)
                        if fsha == sha:
                            forced = match_fault(control.get("status"), repo.id, f)
                            if isinstance(forced, int) and forced >= 400:
                                return self.send_plain(forced, "forced status %d" % forced)
                            return self.send_body(path, size, sha, repo.id, f, control, [])
        self.send_plain(404, "no such object")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def finish_request(self, request, client_address):
        # The TLS handshake runs in the request's thread, so a slow client never blocks the others.
        try:
            request = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(request, client_address)
        except (ssl.SSLError, ConnectionError, OSError):
            pass

    def handle_error(self, request, client_address):
        pass


def make_cert(state):
    cert = os.path.join(state, "cert.pem")
    key = os.path.join(state, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return cert, key


def main():
    p = argparse.ArgumentParser(description="A stand-in Hugging Face Hub for tests.")
    p.add_argument("--root", required=True)
    p.add_argument("--state", required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--token", default="hf_test_token")
    p.add_argument("--cdn-host", default="127.0.0.1")
    args = p.parse_args()
    os.makedirs(args.state, exist_ok=True)
    if args.cert and args.key:
        cert, key = args.cert, args.key
    else:
        cert, key = make_cert(args.state)
    st = State(args)
    httpd = Server(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.ctx = ctx
    httpd.st = st
    st.port = httpd.server_address[1]
    sys.stdout.write("%d\n%s\n" % (st.port, os.path.abspath(cert)))
    sys.stdout.flush()
    try:
        httpd.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
