#!/usr/bin/env python3
"""The Hugging Face cache is shared with huggingface_hub (issue 40): run by hand with a python that has
huggingface_hub (e.g. the hub venv of tests/reference/README.md), never by CI.

    <venv>/bin/python tests/reference/check_hub_interop.py --worker build/bin/flotilla-worker

Against the stand-in Hub (tests/tools/hub_server.py, --cdn-host localhost as huggingface_hub expects):
  1. Flotilla downloads a model; huggingface_hub, offline, finds every file in that cache (same
     snapshot folder), and scan_cache_dir() reports it with no warning.
  2. huggingface_hub downloads a model; Flotilla (`hub download --refresh`, which asks the Hub)
     finds it complete: one model-info request, no file requested.
  3. Flotilla's interrupted download leaves blobs/<etag>.incomplete; huggingface_hub completes the
     file regardless (1.x resumes that partial file with a Range request; 2.x downloads to a
     process-unique temporary file and ignores it), the bytes hash right, and Flotilla then finds
     the blob and completes the snapshot.
Prints one line per check and exits 1 if any failed.
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SERVER = os.path.join(HERE, "..", "tools", "hub_server.py")

failures = 0


def check(ok, what):
    global failures
    print(("PASS " if ok else "FAIL ") + what)
    if not ok:
        failures += 1


def requests_log(state):
    with open(os.path.join(state, "requests.log")) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker", required=True)
    args = p.parse_args()
    worker = os.path.abspath(args.worker)
    tmp = tempfile.mkdtemp(prefix="hub-interop-")
    repo = os.path.join(tmp, "repos", "org", "tiny")
    os.makedirs(repo)
    weights = os.urandom(400000)
    files = {"config.json": b'{"model_type": "llama"}\n', "tokenizer.json": b"{}\n", "model.safetensors": weights}
    for name, data in files.items():
        with open(os.path.join(repo, name), "wb") as f:
            f.write(data)
    state = os.path.join(tmp, "state")
    server = subprocess.Popen([sys.executable, SERVER, "--root", os.path.join(tmp, "repos"), "--state", state,
                               "--cdn-host", "localhost"], stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        cert = server.stdout.readline().strip()
        env = dict(os.environ, HF_ENDPOINT="https://127.0.0.1:%d" % port, FLOTILLA_HF_CA_FILE=cert,
                   REQUESTS_CA_BUNDLE=cert, SSL_CERT_FILE=cert, HF_HOME=os.path.join(tmp, "hf-home"))
        for k in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
            env.pop(k, None)

        def hf(cache, code, offline=False):
            e = dict(env, HF_HUB_CACHE=cache)
            if offline:
                e["HF_HUB_OFFLINE"] = "1"
            r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
            return r.returncode, r.stdout.strip(), r.stderr.strip()

        def flotilla(cache, *extra):
            r = subprocess.run([worker, "hub", "download", "org/tiny", "--json", *extra],
                               env=dict(env, HF_HUB_CACHE=cache), capture_output=True, text=True)
            lines = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
            return r.returncode, lines, r.stderr

        # 1. Flotilla writes, huggingface_hub reads offline.
        cache_a = os.path.join(tmp, "cache-a")
        rc, lines, err = flotilla(cache_a)
        check(rc == 0 and lines and lines[-1]["event"] == "done", "Flotilla downloads org/tiny (%s)" % err.strip())
        folder = lines[-1].get("folder") if lines else None
        rc, out, err = hf(cache_a, "from huggingface_hub import snapshot_download, hf_hub_download, scan_cache_dir\n"
                                   "print(snapshot_download('org/tiny', allow_patterns=['*.json', '*.safetensors']))\n"
                                   "print(hf_hub_download('org/tiny', 'model.safetensors'))\n"
                                   "info = scan_cache_dir()\n"
                                   "print(len(info.warnings), [(r.repo_id, [sorted(v.refs) for v in r.revisions]) "
                                   "for r in info.repos])\n", offline=True)
        out_lines = out.splitlines()
        check(rc == 0 and len(out_lines) == 3 and out_lines[0] == folder,
              "huggingface_hub (offline) finds Flotilla's snapshot %s (%s)" % (folder, err[-300:]))
        check(len(out_lines) == 3 and out_lines[2] == "0 [('org/tiny', [['main']])]",
              "scan_cache_dir: no warning, refs main (%s)" % (out_lines[2] if len(out_lines) == 3 else out))

        # 2. huggingface_hub writes, Flotilla finds it complete.
        cache_b = os.path.join(tmp, "cache-b")
        rc, out, err = hf(cache_b, "from huggingface_hub import snapshot_download\n"
                                   "print(snapshot_download('org/tiny', allow_patterns=['*.json', '*.safetensors']))\n")
        check(rc == 0, "huggingface_hub downloads org/tiny (%s)" % err[-300:])
        open(os.path.join(state, "requests.log"), "w").close()
        rc, lines, err = flotilla(cache_b, "--refresh")
        log = requests_log(state)
        fetched = [r for r in log if r["method"] == "GET" and ("/resolve/" in r["path"] or r["path"].startswith("/cdn/"))]
        check(rc == 0 and lines and lines[-1].get("downloaded") is False and lines[-1].get("folder") == out,
              "Flotilla uses huggingface_hub's snapshot %s" % out)
        check(not fetched and len(log) == 1, "... with one model-info request and no file requested (%d requests)" % len(log))

        # 3. Flotilla's partial file, resumed by huggingface_hub.
        cache_c = os.path.join(tmp, "cache-c")
        with open(os.path.join(state, "control.json.tmp"), "w") as f:
            json.dump({"cut": {"model.safetensors": {"after": 50000, "times": 5}}}, f)
        os.replace(os.path.join(state, "control.json.tmp"), os.path.join(state, "control.json"))
        rc, lines, err = flotilla(cache_c)
        blobs = os.path.join(cache_c, "models--org--tiny", "blobs")
        partial = [b for b in os.listdir(blobs) if b.endswith(".incomplete")] if os.path.isdir(blobs) else []
        kept = os.path.getsize(os.path.join(blobs, partial[0])) if partial else 0
        check(rc == 6 and kept == 250000, "Flotilla's download is cut: exit %d, %d bytes kept" % (rc, kept))
        with open(os.path.join(state, "control.json"), "w") as f:
            f.write("{}")
        open(os.path.join(state, "requests.log"), "w").close()
        time.sleep(0.1)
        rc, out, err = hf(cache_c, "from huggingface_hub import hf_hub_download\n"
                                   "print(hf_hub_download('org/tiny', 'model.safetensors'))\n")
        ranges = [r["range"] for r in requests_log(state) if r["path"].startswith("/cdn/") and r["method"] == "GET"]
        ok = rc == 0 and os.path.exists(out) and hashlib.sha256(open(out, "rb").read()).digest() == \
            hashlib.sha256(weights).digest()
        # huggingface_hub 2.x writes each download to a process-unique <etag>.<uuid>.incomplete and does
        # not resume <etag>.incomplete (huggingface_hub PR 4228); 1.x resumed it with a Range request.
        import huggingface_hub
        major = int(huggingface_hub.__version__.split(".")[0])
        want = [None] if major >= 2 else ["bytes=%d-" % kept]
        check(ok and ranges == want, "huggingface_hub %s completes the file past Flotilla's partial one: ranges %s (%s)"
              % (huggingface_hub.__version__, ranges, err[-300:]))
        rc, lines, err = flotilla(cache_c)
        check(rc == 0 and lines and lines[-1].get("event") == "done", "then Flotilla completes the snapshot")
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
