// The fuzz targets' smoke run for the default suite (built by any compiler, no libFuzzer): feeds
// every file under the directories given on the command line, plus a few thousand seeded mutations
// of each (byte flips, truncations, insertions), to LLVMFuzzerTestOneInput. A crash or abort fails
// the test; so the targets keep building and their invariants hold on real inputs.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i)
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i]))
      if (e.is_regular_file()) {
        std::ifstream f(e.path(), std::ios::binary);
        inputs.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
      }
  if (inputs.empty()) {
    std::fprintf(stderr, "no seed inputs found\n");
    return 1;
  }
  std::mt19937_64 rng(19);
  long runs = 0;
  for (const std::string& seed : inputs) {
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
    ++runs;
    for (int m = 0; m < 300; ++m) {
      std::string s = seed;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits && !s.empty(); ++k) {
        const size_t at = rng() % s.size();
        switch (rng() % 4) {
          case 0:
            s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
            break;
          case 1:
            s.resize(at);
            break;
          case 2:
            s.insert(at, 1, static_cast<char>(rng()));
            break;
          default:
            s[at] = static_cast<char>(rng());
            break;
        }
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
      ++runs;
    }
  }
  std::printf("%zu seeds, %ld inputs run, no crash\n", inputs.size(), runs);
  return 0;
}
