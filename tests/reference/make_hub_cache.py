#!/usr/bin/env python3
"""A Hugging Face cache written by the real huggingface_hub, for the engine's cache tests (issue 40).

Writes tests/engine/golden/hub-cache/ (the cache, symlinks and all, minus .locks) and
tests/engine/golden/hub-cache.json (what it holds: commits, parameters, blob bytes), by running
huggingface_hub.snapshot_download against the stand-in Hub (tests/tools/hub_server.py) serving:

  flotilla-test/tiny-llama  the tiny Llama of tests/engine/golden/hf/llama (3 shards + index), three
                            commits: main, the tag v1.0, and one downloaded by its commit id only (no
                            ref names it); each differs in generation_config.json only, so the shards'
                            blobs are shared, as on a real cache. The repo also holds a pickled
                            pytorch_model.bin and a README.md that allow_patterns leaves out.
  flotilla-test/tiny-bert   a BertModel config (model_type bert) + a tiny model.safetensors: not
                            trainable (the engine trains the Llama family).
  flotilla-test/tiny-gpt2   a GPT2LMHeadModel config + a tiny model.safetensors: trained by file.

With --reverse WORKER (by hand, not CI) it also checks the other direction: a cache written by our
downloader (`WORKER hub download NAME`, against the same server) read by huggingface_hub's
scan_cache_dir(), try_to_load_from_cache() and snapshot_download(local_files_only=True); the output
is printed for the notes.

Run by hand; only huggingface_hub and safetensors (+ numpy) are needed, so a light venv does:
  python3 -m venv ~/.cache/flotilla/hub-venv
  ~/.cache/flotilla/hub-venv/bin/pip install huggingface_hub==2.4.0 safetensors==0.8.0 numpy
  ~/.cache/flotilla/hub-venv/bin/python tests/reference/make_hub_cache.py [--out DIR] [--reverse build/bin/flotilla-worker]
(or the full reference venv: py=$(tests/reference/make-venv)).
"""

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
GOLDEN = os.path.join(REPO, "tests", "engine", "golden")
LLAMA_SRC = os.path.join(GOLDEN, "hf", "llama")
SERVER = os.path.join(REPO, "tests", "tools", "hub_server.py")
TRAINING = ["config.json", "generation_config.json", "tokenizer*", "special_tokens_map.json", "*.safetensors",
            "model.safetensors.index.json"]


def commit_id(label):
    return hashlib.sha1(("flotilla-test " + label).encode()).hexdigest()


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=True)
        f.write("\n")


def make_repos(root):
    """The served repos: root/<org>/<name>/<commit folder>/files + repo.json. Returns the commits."""
    import numpy as np
    from safetensors.numpy import save_file

    commits = {}
    llama = os.path.join(root, "flotilla-test", "tiny-llama")
    labels = {"main": "tiny-llama main", "v1.0": "tiny-llama v1.0", "commit_only": "tiny-llama commit only"}
    meta = {"commits": {}, "refs": {}}
    for i, (rev, label) in enumerate(labels.items()):
        c = commit_id(label)
        folder = os.path.join(llama, "c%d" % i)
        os.makedirs(folder)
        for f in sorted(os.listdir(LLAMA_SRC)):
            if f != "reference.safetensors":
                shutil.copy(os.path.join(LLAMA_SRC, f), folder)
        with open(os.path.join(folder, "generation_config.json")) as f:
            gen = json.load(f)
        gen["flotilla_test_revision"] = rev  # the one file that differs between the commits
        write_json(os.path.join(folder, "generation_config.json"), gen)
        with open(os.path.join(folder, "pytorch_model.bin"), "wb") as f:
            f.write(b"pickled weights: never downloaded\n")
        with open(os.path.join(folder, "README.md"), "w") as f:
            f.write("# tiny-llama (%s)\n" % rev)
        meta["commits"][c] = "c%d" % i
        if rev != "commit_only":
            meta["refs"][rev] = c
        commits[rev] = c
    write_json(os.path.join(llama, "repo.json"), meta)

    rng = np.random.default_rng(40)
    others = {
        "tiny-bert": ({"architectures": ["BertModel"], "model_type": "bert", "hidden_size": 8, "vocab_size": 16,
                       "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 16},
                      {"embeddings.word_embeddings.weight": (16, 8), "pooler.dense.weight": (8, 8),
                       "pooler.dense.bias": (8,)}),
        "tiny-gpt2": ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 8, "vocab_size": 16,
                       "n_layer": 1, "n_head": 2, "n_positions": 16},
                      {"wte.weight": (16, 8), "wpe.weight": (16, 8), "ln_f.weight": (8,), "ln_f.bias": (8,)}),
    }
    for name, (config, tensors) in others.items():
        c = commit_id(name + " main")
        folder = os.path.join(root, "flotilla-test", name, "c0")
        os.makedirs(folder)
        write_json(os.path.join(folder, "config.json"), config)
        save_file({k: rng.standard_normal(shape).astype(np.float32) for k, shape in tensors.items()},
                  os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        write_json(os.path.join(root, "flotilla-test", name, "repo.json"),
                   {"commits": {c: "c0"}, "refs": {"main": c}})
        commits[name] = c
    return commits


class Server:
    def __init__(self, root, state):
        # The CDN on another host name, as on the Hub: huggingface_hub follows a redirect that stays on
        # the endpoint host and would then miss X-Repo-Commit on the CDN answer.
        self.proc = subprocess.Popen([sys.executable, SERVER, "--root", root, "--state", state, "--cdn-host", "localhost"],
                                     stdout=subprocess.PIPE, text=True)
        self.port = int(self.proc.stdout.readline().strip())
        self.cert = self.proc.stdout.readline().strip()
        self.endpoint = "https://127.0.0.1:%d" % self.port

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def parameters(folder):
    from safetensors import safe_open
    n = 0
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(folder, f), "np") as st:
                for k in st.keys():
                    size = 1
                    for d in st.get_slice(k).get_shape():
                        size *= d
                    n += size
    return n


def blob_bytes(repo_dir):
    blobs = os.path.join(repo_dir, "blobs")
    return sum(os.path.getsize(os.path.join(blobs, b)) for b in os.listdir(blobs))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(GOLDEN, "hub-cache"))
    ap.add_argument("--reverse", metavar="WORKER", help="also check a cache our downloader writes")
    args = ap.parse_args()

    work = tempfile.mkdtemp(prefix="flotilla-hub-cache-")
    root, state = os.path.join(work, "repos"), os.path.join(work, "state")
    os.makedirs(state)
    commits = make_repos(root)
    server = Server(root, state)
    try:
        # huggingface_hub reads these at import: the endpoint, the stand-in's CA, no Xet, no telemetry.
        os.environ.update({"HF_ENDPOINT": server.endpoint, "SSL_CERT_FILE": server.cert,
                           "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                           "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
        for v in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_CACHE", "HF_HOME"):
            os.environ.pop(v, None)
        os.environ["HF_HOME"] = os.path.join(work, "hf-home")  # no token file of this machine's
        import huggingface_hub
        from huggingface_hub import snapshot_download

        cache = os.path.join(work, "hub")
        done = {}
        llama = "flotilla-test/tiny-llama"
        for rev in ("main", "v1.0", commits["commit_only"]):
            done[rev] = snapshot_download(llama, revision=rev, cache_dir=cache, allow_patterns=TRAINING)
        for name in ("tiny-bert", "tiny-gpt2"):
            snapshot_download("flotilla-test/" + name, cache_dir=cache, allow_patterns=TRAINING)
        shutil.rmtree(os.path.join(cache, ".locks"), ignore_errors=True)

        # What was written, checked: relative links only, nothing pickled, refs for main and v1.0 only.
        for base, _dirs, files in os.walk(cache):
            for f in files:
                p = os.path.join(base, f)
                if os.path.islink(p):
                    assert not os.path.isabs(os.readlink(p)), p
                assert not f.endswith(".bin") and f != "README.md", p
        repo_dir = os.path.join(cache, "models--flotilla-test--tiny-llama")
        refs = sorted(os.listdir(os.path.join(repo_dir, "refs")))
        assert refs == ["main", "v1.0"], refs

        manifest = {"huggingface_hub": huggingface_hub.__version__, "allow_patterns": TRAINING, "repos": {}}
        manifest["repos"][llama] = {
            "refs": {"main": commits["main"], "v1.0": commits["v1.0"]},
            "commit_only": commits["commit_only"],
            "parameters": parameters(done["main"]),
            "blob_bytes": blob_bytes(repo_dir),
        }
        for name in ("tiny-bert", "tiny-gpt2"):
            d = os.path.join(cache, "models--flotilla-test--" + name)
            manifest["repos"]["flotilla-test/" + name] = {
                "refs": {"main": commits[name]},
                "parameters": parameters(os.path.join(d, "snapshots", commits[name])),
                "blob_bytes": blob_bytes(d),
            }
        if os.path.exists(args.out):
            shutil.rmtree(args.out)
        shutil.copytree(cache, args.out, symlinks=True)
        write_json(os.path.join(os.path.dirname(args.out), os.path.basename(args.out) + ".json"), manifest)
        print("huggingface_hub %s wrote %s" % (huggingface_hub.__version__, args.out))
        print(json.dumps(manifest, indent=2, sort_keys=True))

        if args.reverse:
            reverse_check(args.reverse, server, work, commits, cache)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def layout(cache):
    """Every path of a cache with what a link points at, minus huggingface_hub's own extras."""
    out = {}
    for base, dirs, files in os.walk(cache):
        dirs[:] = [d for d in dirs if d not in (".locks", "trees")]
        for f in files:
            p = os.path.join(base, f)
            rel = os.path.relpath(p, cache)
            if rel == "CACHEDIR.TAG":
                continue
            out[rel] = os.readlink(p) if os.path.islink(p) else "file %d bytes" % os.path.getsize(p)
    return out


def reverse_check(worker, server, work, commits, theirs):
    """Our downloader writes a cache; huggingface_hub reads it. Then ours reads theirs."""
    from huggingface_hub import scan_cache_dir, snapshot_download, try_to_load_from_cache

    ours = os.path.join(work, "ours")
    env = dict(os.environ, HF_HUB_CACHE=ours, FLOTILLA_HF_CA_FILE=server.cert)
    for name in ("flotilla-test/tiny-llama", "flotilla-test/tiny-llama@v1.0",
                 "flotilla-test/tiny-llama@" + commits["commit_only"], "flotilla-test/tiny-bert",
                 "flotilla-test/tiny-gpt2"):
        r = subprocess.run([worker, "hub", "download", name], env=env, capture_output=True, text=True)
        print("$ flotilla-worker hub download %s  -> exit %d, %s" % (name, r.returncode, r.stdout.strip()))
        if r.returncode != 0:
            print(r.stderr)
            raise SystemExit("our download failed")
    a, b = layout(ours), layout(theirs)
    same = sorted(set(a) & set(b))
    print("\nsame paths, link targets and sizes as huggingface_hub's own cache: %d of %d (theirs %d)"
          % (sum(a[k] == b[k] for k in same), len(a), len(b)))
    for k in sorted(set(a) ^ set(b)) + [k for k in same if a[k] != b[k]]:
        print("   differs: %s  ours=%s  theirs=%s" % (k, a.get(k), b.get(k)))
    print("\n== huggingface_hub.scan_cache_dir(%s) ==" % "ours")
    info = scan_cache_dir(ours)
    for repo in sorted(info.repos, key=lambda r: r.repo_id):
        print("%s  %s  size_on_disk=%d  files=%d  refs=%s" % (repo.repo_id, repo.repo_type, repo.size_on_disk,
                                                          repo.nb_files, sorted(repo.refs)))
        for rev in sorted(repo.revisions, key=lambda r: r.commit_hash):
            print("   %s refs=%s files=%s" % (rev.commit_hash, sorted(rev.refs),
                                             sorted(f.file_name for f in rev.files)))
    print("warnings:", [str(w) for w in info.warnings])
    assert not info.warnings, info.warnings
    print("\n== try_to_load_from_cache ==")
    for rev in ("main", "v1.0", commits["commit_only"]):
        p = try_to_load_from_cache("flotilla-test/tiny-llama", "config.json", cache_dir=ours, revision=rev)
        print("tiny-llama@%s config.json -> %s" % (rev, os.path.relpath(p, ours) if isinstance(p, str) else p))
        assert isinstance(p, str) and os.path.isfile(p)
    print("\n== snapshot_download(local_files_only=True) ==")
    server.stop()  # no network at all from here
    for rev in ("main", "v1.0", commits["commit_only"]):
        p = snapshot_download("flotilla-test/tiny-llama", revision=rev, cache_dir=ours, local_files_only=True,
                              allow_patterns=TRAINING)
        print("tiny-llama@%s -> %s: %s" % (rev, os.path.relpath(p, ours), sorted(os.listdir(p))))
    print("\n== theirs read by ours: flotilla-worker hub list (HF_HUB_CACHE = huggingface_hub's cache) ==")
    r = subprocess.run([worker, "hub", "list"], env=dict(os.environ, HF_HUB_CACHE=theirs), capture_output=True,
                       text=True)
    print(r.stdout.replace(theirs, "<theirs>"), r.stderr)
    print("reverse check: OK")


if __name__ == "__main__":
    main()
