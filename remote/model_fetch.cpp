// A model fetched on the node by its own worker (see model_fetch.h). The scripts are constants;
// only validated, shell_quote()d values are appended.
#include "remote/model_fetch.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>


#include "remote/remote_run.h"
#include "remote/sftp.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

std::string q(const std::string& s) { return shell_quote(s); }

void check_spec(const ModelFetchSpec& spec) {
  if (std::string p = validate_run_id(spec.run_id); !p.empty()) throw_usage(p);
  if (spec.worker.empty() || spec.worker[0] != '/')
    throw_usage("the remote worker path '" + printable(spec.worker) + "' must be absolute");
  check_remote_path(spec.worker);
  if (spec.name.empty() || spec.name[0] == '-')
    throw_usage("model name '" + printable(spec.name) + "' is refused");
  check_remote_path(spec.name);
  if (spec.files != "training" && spec.files != "config" && spec.files != "adapter")
    throw_usage("model files '" + printable(spec.files) + "' must be training, config or adapter");
  if (spec.tag.empty() || spec.tag.size() > 32) throw_usage("model fetch tag must be 1 to 32 characters");
  for (char c : spec.tag)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-')
      throw_usage("model fetch tag '" + printable(spec.tag) + "' may hold letters, digits and '-' only");
}

// d=<run dir>; f=model-fetch-<tag>
std::string prologue(Session& session, const ModelFetchSpec& spec) {
  std::string s = "d=";
  s += q(remote_run_dir(session, spec.run_id));
  s += "\nf=model-fetch-";
  s += spec.tag;  // checked: letters, digits, '-'
  s += "\n";
  return s;
}

}  // namespace

void start_model_fetch(Session& session, const ModelFetchSpec& spec) {
  check_spec(spec);
  session.connect();
  std::string script = prologue(session, spec);
  script +=
      "mkdir -p \"$d\" && cd \"$d\" || { echo 'FLOTILLA_ERROR cannot create the run directory'; exit 77; }\n"
      "rm -f \"$f.jsonl\" \"$f.err\" \"$f.exit\" \"$f.exit.tmp\" \"$f.pid\"\n"
      "s=; command -v setsid >/dev/null 2>&1 && s=setsid\n"
      "$s nohup sh -c '\"$@\" >\"$0.jsonl\" 2>\"$0.err\"; echo \"$?\" >\"$0.exit.tmp\" && mv -f "
      "\"$0.exit.tmp\" "
      "\"$0.exit\"' \"$f\"";
  for (const std::string& a : {spec.worker, std::string("hub"), std::string("download"), spec.name,
                               std::string("--files"), spec.files, std::string("--json")}) {
    script += ' ';
    script += q(a);
  }
  script +=
      " </dev/null >/dev/null 2>&1 &\n"
      "echo \"$!\" >\"$f.pid\"\n"
      "echo FLOTILLA_FETCHING\n";
  const ExecResult r = session.exec(script, 60);
  if (r.exit_status != 0 || r.out.find("FLOTILLA_FETCHING") == std::string::npos)
    throw Error(ExitCode::kComm, "cannot start fetching model " + spec.name + " on " + session.target().host +
                                     ": " + printable(r.out + r.err));
}

ModelFetchPoll poll_model_fetch(Session& session, const ModelFetchSpec& spec, uint64_t offset) {
  check_spec(spec);
  session.connect();
  // The state first, then the lines: once it says exited, every line is on disk. A zombie (an
  // orphan that init has not reaped yet, as in some containers) counts as gone.
  std::string script = prologue(session, spec);
  script +=
      "cd \"$d\" 2>/dev/null || { echo state=lost; exit 0; }\n"
      "p=$(cat \"$f.pid\" 2>/dev/null)\n"
      "if [ -f \"$f.exit\" ]; then echo \"state=exit $(cat \"$f.exit\")\"\n"
      "elif [ -n \"$p\" ] && kill -0 \"$p\" 2>/dev/null && ! grep -qs '^State:[[:space:]]*Z' "
      "\"/proc/$p/status\"; "
      "then echo state=running\n"
      "elif [ -f \"$f.exit\" ]; then echo \"state=exit $(cat \"$f.exit\")\"\n"
      "else echo state=lost; fi\n"
      "tail -c +";
  script += std::to_string(offset + 1);
  script += " \"$f.jsonl\" 2>/dev/null\n";
  const ExecResult r = session.exec(script, 60);
  if (r.exit_status != 0)
    throw Error(ExitCode::kComm,
                "cannot read the model fetch on " + session.target().host + ": " + printable(r.err));
  ModelFetchPoll p;
  p.offset = offset;
  const size_t eol = r.out.find('\n');
  const std::string state = r.out.substr(0, eol);
  const std::string data = eol == std::string::npos ? std::string() : r.out.substr(eol + 1);
  if (state.rfind("state=exit ", 0) == 0) {
    p.finished = true;
    p.exit_code = std::atoi(state.c_str() + 11);
  } else if (state != "state=running") {
    p.finished = true;
    p.lost = true;
  }
  size_t start = 0;
  for (size_t nl = data.find('\n'); nl != std::string::npos; nl = data.find('\n', start)) {
    const ModelFetchEvent e = interop::hub::parse_download_event(data.substr(start, nl - start));
    if (e.kind != ModelFetchEvent::Kind::kOther) p.events.push_back(e);
    start = nl + 1;
  }
  p.offset = offset + start;
  if (p.finished) {
    const ExecResult err = session.exec(
        prologue(session, spec) + "cd \"$d\" 2>/dev/null && tail -c 2000 \"$f.err\" 2>/dev/null\n", 30);
    p.stderr_tail = err.out;
    while (!p.stderr_tail.empty() && (p.stderr_tail.back() == '\n' || p.stderr_tail.back() == '\r'))
      p.stderr_tail.pop_back();
  }
  return p;
}

void stop_model_fetch(Session& session, const ModelFetchSpec& spec) {
  check_spec(spec);
  session.connect();
  const ExecResult r = session.exec(prologue(session, spec) +
                                        "cd \"$d\" 2>/dev/null || exit 0\n"
                                        "p=$(cat \"$f.pid\" 2>/dev/null)\n"
                                        "[ -n \"$p\" ] && [ ! -f \"$f.exit\" ] || exit 0\n"
                                        "kill -TERM -- \"-$p\" 2>/dev/null || kill -TERM \"$p\" 2>/dev/null\n"
                                        "exit 0\n",
                                    30);
  if (r.exit_status != 0)
    throw Error(ExitCode::kComm,
                "cannot stop the model fetch on " + session.target().host + ": " + printable(r.err));
}

}  // namespace flotilla::remote
