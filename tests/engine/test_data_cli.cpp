// The `data` and `tokenizer` commands end to end through the worker binary: every subcommand's
// --help, synth -> inspect, inspect failing with exit code 4 on a bad shard or vocab, tokenizer
// train -> encode -> decode reproducing a file byte for byte, prepare -> inspect, and usage
// errors with exit code 2.
#include <filesystem>
#include <string>

#include "check.h"
#include "test_data_util.h"

using data_test::contains;
using data_test::run;

int main() {
  const std::string w = FLOTILLA_WORKER_PATH;
  const std::string dir = data_test::scratch("data_cli");
  std::string out;

  for (const char* cmd :
       {"data --help", "data synth --help", "data prepare --help", "data inspect --help", "tokenizer --help",
        "tokenizer train --help", "tokenizer encode --help", "tokenizer decode --help"}) {
    const int rc = run(w + " " + cmd, &out);
    CHECK_MSG(rc == 0 && contains(out, "Usage: flotilla-worker"), "%s: rc %d", cmd, rc);
  }
  CHECK(run(w + " data", &out) == 2 && contains(out, "synth"));
  CHECK(run(w + " data frob", &out) == 2 && contains(out, "unknown subcommand 'frob'"));
  CHECK(run(w + " data synth --vocab 64", &out) == 2 && contains(out, "--out DIR is required"));
  CHECK(run(w + " data synth --out " + dir + "/x --bogus 1", &out) == 2 &&
        contains(out, "unexpected argument '--bogus'"));
  CHECK(run(w + " tokenizer encode --tokenizer x", &out) == 2 &&
        contains(out, "exactly one of --text or --input"));

  // synth -> inspect.
  const std::string syn = dir + "/syn";
  CHECK(run(w + " data synth --out " + syn + " --vocab 256 --tokens 20000 --seed 3", &out) == 0);
  CHECK(contains(out, "train_000.bin (20,000 tokens)") && contains(out, "best possible"));
  int rc = run(w + " data inspect '" + syn + "/*.bin' --check-vocab 256", &out);
  CHECK_MSG(rc == 0, "inspect rc %d: %s", rc, out.c_str());
  CHECK(contains(out, "magic 20240520, version 1 (uint16 tokens)") && contains(out, "20,000 (2 bytes each"));
  CHECK(contains(out, "val_000.bin") && contains(out, "validation   ok"));
  CHECK(contains(out, "histogram") && contains(out, "max 255"));
  rc = run(w + " data inspect " + syn + "/train_000.bin --check-vocab 100", &out);
  CHECK(rc == 4 && contains(out, "FAILED") && contains(out, ">= vocab size 100"));
  std::filesystem::resize_file(syn + "/val_000.bin", 1024 + 2 * 2000 - 1);
  rc = run(w + " data inspect '" + syn + "/*.bin'", &out);
  CHECK(rc == 4 && contains(out, "1 of 2 shard(s) failed") && contains(out, "val_000.bin: size 5,023"));

  // tokenizer train -> encode -> decode (a file with invalid UTF-8 round-trips byte for byte).
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "The cat sat on the mat; the dog didn't. Ünïcödé line " + std::to_string(i) + "\n";
  text += std::string("\xff\xfe raw bytes\x80", 13);
  data_test::write_bytes(dir + "/corpus.txt", text);
  const std::string tok = dir + "/tok.json";
  rc = run(w + " tokenizer train --input " + dir + "/corpus.txt --vocab-size 300 --out " + tok, &out);
  CHECK_MSG(rc == 0 && contains(out, "300 tokens") && contains(out, "<|endoftext|> = 299"), "%s",
            out.c_str());
  CHECK(run(w + " tokenizer encode --tokenizer " + tok + " --text 'the cat'", &out) == 0);
  const std::string ids = out.substr(0, out.find('\n'));
  CHECK(!ids.empty() && ids.find_first_not_of("0123456789 ") == std::string::npos);
  CHECK(run(w + " tokenizer decode --tokenizer " + tok + " --ids '" + ids + "'", &out) == 0 &&
        out == "the cat");
  CHECK(run(w + " tokenizer encode --tokenizer " + tok + " --input " + dir + "/corpus.txt > " + dir +
                "/ids.txt",
            &out) == 0);
  CHECK(
      run(w + " tokenizer decode --tokenizer " + tok + " --input " + dir + "/ids.txt > " + dir + "/back.txt",
          &out) == 0);
  CHECK(data_test::read_bytes(dir + "/back.txt") == text);
  CHECK(run(w + " tokenizer decode --tokenizer " + tok + " --ids '1 999'", &out) == 4 &&
        contains(out, "token id 999"));
  CHECK(run(w + " tokenizer encode --tokenizer " + dir + "/none.json --text x", &out) == 4);

  // prepare -> inspect.
  rc = run(w + " data prepare --input " + dir + "/corpus.txt --tokenizer " + tok + " --out " + dir +
               "/prep --val-fraction 0.1 --shard-tokens 2000",
           &out);
  CHECK_MSG(rc == 0 && contains(out, "documents    1") && contains(out, "train tokens") &&
                contains(out, "val_000.bin"),
            "%s", out.c_str());
  CHECK(run(w + " data inspect '" + dir + "/prep/*.bin' --check-vocab 300", &out) == 0);
  rc = run(w + " data prepare --input " + dir + "/corpus.txt --tokenizer " + tok + " --out " + dir + "/prep",
           &out);
  CHECK(rc == 2 && contains(out, "--force"));

  std::filesystem::remove_all(dir);
  return flotilla_test::summary("data_cli");
}
