// The app's own known_hosts file: read fingerprints on record, append a trusted key, forget a host.
//
// Decision: libssh decides OK / UNKNOWN / CHANGED / OTHER (ssh_session_is_known_server); this file
// only reads entries back for messages ("on record: ssh-ed25519 SHA256:...") and writes with
// O_APPEND + fsync (trust) or rewrite + rename (forget), so a crash never leaves half a file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "remote/session_impl.h"

namespace flotilla::remote {
namespace {

std::vector<std::string> split_ws(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

bool names_host(const std::string& field, const std::string& name) {
  size_t start = 0;
  while (start <= field.size()) {
    const size_t comma = field.find(',', start);
    if (field.substr(start, comma == std::string::npos ? std::string::npos : comma - start) == name)
      return true;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return false;
}

void write_all(int fd, const std::string& data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("cannot write known_hosts file " + path + ": " + errno_string(errno));
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string sha256_fingerprint(ssh_key key) {
  unsigned char* hash = nullptr;
  size_t len = 0;
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) != SSH_OK) return "";
  char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
  ssh_clean_pubkey_hash(&hash);
  std::string out = fp ? fp : "";
  ssh_string_free_char(fp);
  return out;
}

std::vector<std::string> known_fingerprints(const std::string& path, const std::string& name) {
  std::vector<std::string> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    const auto w = split_ws(line);
    if (w.size() < 3 || w[0].empty() || w[0][0] == '#' || w[0][0] == '@' || !names_host(w[0], name)) continue;
    ssh_key key = nullptr;
    if (ssh_pki_import_pubkey_base64(w[2].c_str(), ssh_key_type_from_name(w[1].c_str()), &key) == SSH_OK) {
      out.push_back(w[1] + " " + sha256_fingerprint(key));
      ssh_key_free(key);
    }
  }
  return out;
}

void append_known_host_line(const std::string& path, const std::string& line) {
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty() && !std::filesystem::exists(dir)) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) throw_io("cannot create the directory of the known_hosts file " + path + ": " + ec.message());
    ::chmod(dir.c_str(), 0700);
  }
  const int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw_io("cannot open known_hosts file " + path + ": " + errno_string(errno));
  std::string text = line;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  text += '\n';
  // A file whose last line lacks its newline would glue our entry onto it.
  const off_t size = ::lseek(fd, 0, SEEK_END);
  char last = '\n';
  if (size > 0 && ::pread(fd, &last, 1, size - 1) == 1 && last != '\n') text.insert(text.begin(), '\n');
  try {
    write_all(fd, text, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw_io("cannot sync known_hosts file " + path + ": " + errno_string(errno));
}

int forget_host_key(const std::string& known_hosts_path, const std::string& known_hosts_name) {
  std::ifstream f(known_hosts_path);
  if (!f) return 0;
  std::string kept, line;
  int removed = 0;
  while (std::getline(f, line)) {
    const auto w = split_ws(line);
    if (!w.empty() && w[0][0] != '#' && names_host(w[0], known_hosts_name)) {
      ++removed;
      continue;
    }
    kept += line + "\n";
  }
  if (removed == 0) return 0;
  const std::string tmp = known_hosts_path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw_io("cannot write " + tmp + ": " + errno_string(errno));
  try {
    write_all(fd, kept, tmp);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::fsync(fd);
  ::close(fd);
  if (std::rename(tmp.c_str(), known_hosts_path.c_str()) != 0)
    throw_io("cannot replace known_hosts file " + known_hosts_path + ": " + errno_string(errno));
  return removed;
}

}  // namespace flotilla::remote
