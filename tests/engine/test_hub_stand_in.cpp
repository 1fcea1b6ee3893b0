// The stand-in Hugging Face Hub the download tests use (tests/tools/hub_server.py through
// tests/engine/hub_server_util.h) answers as the Hub does: model info with blob ids and LFS sha256,
// a 302 to the CDN path for LFS files, range requests, GatedRepo without the token, and the cut
// fault; the request log records whether an Authorization header came, never its value. Checked with
// python3's own HTTPS client so the fixture is tested apart from the engine's client.
#include <cstdio>
#include <string>

#include "check.h"
#include "tests/engine/hub_server_util.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

// Runs a python3 snippet with the server's endpoint and cert in the environment; its stdout.
std::string py(const HubServer& hub, const std::string& code) {
  const std::string script = hub.dir() + "/client.py";
  std::ofstream(script)
      << "import os, ssl, urllib.request, json, sys\n"
         "ctx = ssl.create_default_context(cafile=os.environ['CA'])\n"
         "E = os.environ['EP']\n"
         "class NoRedirect(urllib.request.HTTPRedirectHandler):\n"
         "    def redirect_request(self, *a, **k): return None\n"
         "op = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx), NoRedirect)\n"
         "def req(path, method='GET', headers={}):\n"
         "    r = urllib.request.Request(E + path if path.startswith('/') else path, method=method, "
         "headers=headers)\n"
         "    try:\n"
         "        resp = op.open(r)\n"
         "    except urllib.error.HTTPError as e:\n"
         "        resp = e\n"
         "    return resp.status if hasattr(resp, 'status') else resp.code, resp.headers, resp.read()\n"
      << code;
  const std::string out = hub.dir() + "/client.out";
  const std::string cmd =
      "EP='" + hub.endpoint() + "' CA='" + hub.cert_file() + "' python3 " + script + " > " + out + " 2>&1";
  const int rc = std::system(cmd.c_str());
  CHECK_MSG(rc == 0, "client failed: %s", read_file(out).c_str());
  return read_file(out);
}

}  // namespace

int main() {
  HubServer hub;
  hub.add_file("org/tiny", "config.json", "{\"model_type\": \"llama\"}\n");
  std::string weights(50000, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i * 7 + 3);
  hub.add_file("org/tiny", "model.safetensors", weights);
  hub.add_file("org/gated", "config.json", "{}\n");
  hub.repo_json("org/gated", R"({"gated": "manual"})");
  hub.start();
  CHECK(hub.port() > 0);
  CHECK(!hub.cert_file().empty());

  std::string out =
      py(hub,
         "s, h, b = req('/api/models/org/tiny/revision/main?blobs=true')\n"
         "j = json.loads(b)\n"
         "m = [x for x in j['siblings'] if x['rfilename'] == 'model.safetensors'][0]\n"
         "print(s, len(j['sha']), m['size'], len(m['lfs']['sha256']))\n"
         "s, h, b = req('/org/tiny/resolve/main/model.safetensors', 'HEAD', {'Authorization': 'Bearer x'})\n"
         "print(s, h['X-Linked-Size'], h['Location'].split('/')[3])\n"
         "s, h, b = req(h['Location'], 'GET', {'Range': 'bytes=49990-'})\n"
         "print(s, h['Content-Range'], len(b))\n"
         "s, h, b = req('/org/gated/resolve/main/config.json', 'HEAD')\n"
         "print(s, h['X-Error-Code'])\n"
         "s, h, b = req('/org/gated/resolve/main/config.json', 'GET', {'Authorization': 'Bearer "
         "hf_test_token'})\n"
         "print(s, len(b))\n");
  CHECK_MSG(out.find("200 40 50000 64\n") != std::string::npos, "%s", out.c_str());
  CHECK_MSG(out.find("302 50000 cdn\n") != std::string::npos, "%s", out.c_str());
  CHECK_MSG(out.find("206 bytes 49990-49999/50000 10\n") != std::string::npos, "%s", out.c_str());
  CHECK_MSG(out.find("401 GatedRepo\n") != std::string::npos, "%s", out.c_str());
  CHECK_MSG(out.find("200 3\n") != std::string::npos, "%s", out.c_str());

  const auto log = hub.requests();
  CHECK(log.size() == 5);
  if (log.size() == 5) {
    CHECK(log[1].method == "HEAD" && log[1].auth && log[1].status == 302);
    CHECK(log[2].path.rfind("/cdn/", 0) == 0 && !log[2].auth && log[2].range == "bytes=49990-");
    CHECK(log[3].error == "GatedRepo" && !log[3].auth);
  }
  CHECK(hub.request_log_text().find("hf_test_token") == std::string::npos);

  // The cut fault: the first GET stops after 1000 bytes, the next is whole.
  hub.control(R"({"cut": {"model.safetensors": {"after": 1000, "times": 1}}})");
  hub.clear_requests();
  out = py(hub,
           "s, h, b = req('/org/tiny/resolve/main/model.safetensors', 'HEAD')\n"
           "for i in range(2):\n"
           "    try:\n"
           "        s2, h2, b2 = req(h['Location'])\n"
           "        print('got', len(b2))\n"
           "    except Exception as e:\n"
           "        print('cut')\n");
  CHECK_MSG(out == "cut\ngot 50000\n", "%s", out.c_str());
  const auto cut = hub.requests();
  CHECK(cut.size() == 3 && cut[1].cut && cut[1].bytes == 1000 && !cut[2].cut);
  return summary("test_hub_stand_in");
}
