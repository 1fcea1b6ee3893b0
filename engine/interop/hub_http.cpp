// libcurl requests for hub downloads (engine/interop/hub_http.h).
// Built only with libcurl (FLOTILLA_HAVE_HUB_DOWNLOADS, engine/CMakeLists.txt).
#ifdef FLOTILLA_HAVE_HUB_DOWNLOADS
#include "engine/interop/hub_http.h"

#include <curl/curl.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "flotilla/build_info.h"

namespace flotilla::interop::hub::detail {

namespace {

constexpr size_t kBodyCap = 64u << 20;

struct Transfer {
  const HttpRequest* request = nullptr;
  HttpResponse* response = nullptr;
  CURL* curl = nullptr;
  double stall_s = 60;
  curl_off_t last_bytes = -1;
  std::chrono::steady_clock::time_point last_change = std::chrono::steady_clock::now();
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  std::string line(data, n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (line.rfind("HTTP/", 0) == 0) {
    t->response->headers.clear();  // a new answer (e.g. after "100 Continue")
    return n;
  }
  const size_t colon = line.find(':');
  if (colon == std::string::npos) return n;
  std::string name = line.substr(0, colon);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  size_t b = colon + 1;
  while (b < line.size() && (line[b] == ' ' || line[b] == '\t')) ++b;
  t->response->headers[name] = line.substr(b);
  return n;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t n = size * count;
  long status = 0;
  curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
  t->response->status = status;
  if (status >= 200 && status < 300 && t->request->sink) {
    if (!t->request->sink(*t->response, data, n)) {
      t->response->stopped = true;
      return 0;  // CURLE_WRITE_ERROR
    }
    t->response->sink_bytes += n;
    return n;
  }
  if (t->response->body.size() + n > kBodyCap) return 0;
  t->response->body.append(data, n);
  return n;
}

// The stall check is done here rather than with CURLOPT_LOW_SPEED_*: libcurl averages the speed over
// a window of several seconds, so a transfer that stops after moving bytes fails only long after
// LOW_SPEED_TIME. Here a transfer fails stall_timeout_s after its last byte (or after its start).
int on_progress(void* user, curl_off_t, curl_off_t now_bytes, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  const auto now = std::chrono::steady_clock::now();
  if (now_bytes != t->last_bytes) {
    t->last_bytes = now_bytes;
    t->last_change = now;
  } else if (std::chrono::duration<double>(now - t->last_change).count() > t->stall_s) {
    t->response->stalled = true;
    return 1;
  }
  if (t->request->tick && !t->request->tick()) {
    t->response->stopped = true;
    return 1;  // CURLE_ABORTED_BY_CALLBACK
  }
  return 0;
}

}  // namespace

HttpResponse http_send(const HttpRequest& request, const HttpOptions& options) {
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  HttpResponse response;
  CURL* curl = curl_easy_init();
  if (!curl) {
    response.curl_code = -1;
    response.curl_error = "libcurl could not start a transfer";
    return response;
  }
  Transfer t;
  t.request = &request;
  t.response = &response;
  t.curl = curl;
  t.stall_s = options.stall_timeout_s;
  char error[CURL_ERROR_SIZE] = {0};
  curl_slist* headers = nullptr;
  for (const std::string& h : request.headers) headers = curl_slist_append(headers, h.c_str());
  const std::string agent = std::string("flotilla/") + FLOTILLA_VERSION_STRING + "; hf_hub-compatible";
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, agent.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
#if LIBCURL_VERSION_NUM >= 0x075500
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "https,http");
#endif
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options.connect_timeout_s * 1000));
  if (!options.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, options.ca_file.c_str());
  if (request.method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  // SIGPIPE blocked in this thread while the transfer runs: with CURLOPT_NOSIGNAL libcurl does not
  // guard against it itself, and a TLS write to a connection the server closed would otherwise kill a
  // process that calls this in-process (the app's `flotilla models pull`, the wizard). A SIGPIPE
  // raised meanwhile is discarded.
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  const CURLcode rc = curl_easy_perform(curl);
  if (!sigismember(&old_set, SIGPIPE)) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  response.curl_code = static_cast<int>(rc);
  if (rc != CURLE_OK)
    response.curl_error = error[0] ? std::string(error) : std::string(curl_easy_strerror(rc));
  if (response.stalled) {
    char said[96];
    std::snprintf(said, sizeof said, "no byte came for %.0f s", options.stall_timeout_s);
    response.curl_error = said;
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return response;
}

std::string url_origin(const std::string& url) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return "";
  const size_t end = url.find_first_of("/?#", scheme + 3);
  std::string origin = url.substr(0, end);
  for (char& c : origin) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return origin;
}

std::string url_encode(const std::string& text, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace flotilla::interop::hub::detail

#endif  // FLOTILLA_HAVE_HUB_DOWNLOADS
