// Minimal assertion macros for Qt-free engine tests (they must build on a bare GPU node).
//
// CHECK(cond) and CHECK_NEAR(a, b, tol) record failures and keep going; CHECK_THROWS(expr, text)
// expects a flotilla::Error whose message contains `text`. A test's main returns check_summary().
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace flotilla_test {
inline int& failures() {
  static int n = 0;
  return n;
}
inline int& checks() {
  static int n = 0;
  return n;
}
inline int summary(const char* name) {
  std::printf("%s: %d checks, %d failed\n", name, checks(), failures());
  return failures() == 0 ? 0 : 1;
}
}  // namespace flotilla_test

#define CHECK(cond)                                                                 \
  do {                                                                              \
    ++flotilla_test::checks();                                                      \
    if (!(cond)) {                                                                  \
      ++flotilla_test::failures();                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                               \
  } while (0)

#define CHECK_MSG(cond, ...)                                                        \
  do {                                                                              \
    ++flotilla_test::checks();                                                      \
    if (!(cond)) {                                                                  \
      ++flotilla_test::failures();                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                            \
      std::fprintf(stderr, "\n");                                                   \
    }                                                                               \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                                         \
  do {                                                                                                \
    ++flotilla_test::checks();                                                                        \
    const double va_ = (a), vb_ = (b), vt_ = (tol);                                                   \
    if (!(std::fabs(va_ - vb_) <= vt_)) {                                                             \
      ++flotilla_test::failures();                                                                    \
      std::fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s = %.9g vs %s = %.9g (tol %.3g)\n", __FILE__, \
                   __LINE__, #a, va_, #b, vb_, vt_);                                                  \
    }                                                                                                 \
  } while (0)

#define CHECK_THROWS(expr, text)                                                                      \
  do {                                                                                                \
    ++flotilla_test::checks();                                                                        \
    bool thrown_ = false;                                                                             \
    try {                                                                                             \
      expr;                                                                                           \
    } catch (const std::exception& e_) {                                                              \
      thrown_ = true;                                                                                 \
      if (std::string(e_.what()).find(text) == std::string::npos) {                                   \
        ++flotilla_test::failures();                                                                  \
        std::fprintf(stderr, "%s:%d: %s threw '%s', expected text '%s'\n", __FILE__, __LINE__, #expr, \
                     e_.what(), text);                                                                \
      }                                                                                               \
    }                                                                                                 \
    if (!thrown_) {                                                                                   \
      ++flotilla_test::failures();                                                                    \
      std::fprintf(stderr, "%s:%d: %s did not throw\n", __FILE__, __LINE__, #expr);                   \
    }                                                                                                 \
  } while (0)
