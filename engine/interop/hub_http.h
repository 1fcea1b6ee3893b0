// The HTTPS requests of hub downloads (hub_download.cpp), on libcurl's easy interface. Internal to
// engine/interop.
//
// Decision: redirects are never followed by libcurl. The Hub answers a large (LFS) file with a 302
// to its CDN, and the token must reach the endpoint only; a redirect handled by hand cannot leak
// the Authorization header, whatever libcurl version or option set is in use. The caller decides
// per hop whether the token goes along (only for URLs made from the endpoint and for relative
// redirects, which stay on its host).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace flotilla::interop::hub::detail {

struct HttpOptions {
  std::string ca_file;  // "" = the system's store
  double connect_timeout_s = 20;
  double stall_timeout_s = 60;  // no byte for this long fails the transfer
};

struct HttpResponse {
  long status = 0;                             // 0 when no answer came
  std::map<std::string, std::string> headers;  // names lower-case; the last answer's headers
  std::string body;                            // the body when no sink took it (capped at 64 MiB)
  int curl_code = 0;                           // CURLE_OK = 0
  std::string curl_error;                      // libcurl's words when curl_code != 0
  uint64_t sink_bytes = 0;                     // bytes handed to the sink
  bool stopped = false;                        // the sink or the tick asked to stop
  bool stalled = false;                        // no byte moved for stall_timeout_s
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

struct HttpRequest {
  std::string method = "GET";  // GET or HEAD
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  // Receives the body of a 2xx answer (other answers' bodies go to HttpResponse::body); false stops.
  // `so_far` holds the status and headers of the answer being received.
  std::function<bool(const HttpResponse& so_far, const char* data, size_t size)> sink;
  // Called often during the transfer (also while no byte moves); false stops.
  std::function<bool()> tick;
};

// One request, no redirect followed. Never throws for HTTP or network failures (see the response).
HttpResponse http_send(const HttpRequest& request, const HttpOptions& options);

// "https://host:port" of a URL ("" when it has no scheme).
std::string url_origin(const std::string& url);
// Percent-encodes everything but unreserved characters (and '/' when keep_slash).
std::string url_encode(const std::string& text, bool keep_slash);

}  // namespace flotilla::interop::hub::detail
