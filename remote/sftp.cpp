// SFTP transfers (see sftp.h for the atomic-upload rule).
#include "remote/sftp.h"

#include <fcntl.h>
#include <libssh/sftp.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <random>

#include "remote/session_impl.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

constexpr size_t kChunk = 32 * 1024;  // below every server's packet limit

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr); }
  ~Sha256() { EVP_MD_CTX_free(ctx_); }
  void update(const void* p, size_t n) { EVP_DigestUpdate(ctx_, p, n); }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_, md, &len);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
      out += digits[md[i] >> 4];
      out += digits[md[i] & 15];
    }
    return out;
  }

 private:
  EVP_MD_CTX* ctx_;
};

std::string random_suffix() {
  std::random_device rd;
  char buf[20];
  std::snprintf(buf, sizeof buf, "%08x%08x", rd(), rd());
  return buf;
}

std::string parent_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

const char* sftp_error_name(int code) {
  switch (code) {
    case SSH_FX_NO_SUCH_FILE:
      return "no such file";
    case SSH_FX_PERMISSION_DENIED:
      return "permission denied";
    case SSH_FX_FAILURE:
      return "failure (disk full, or the target exists?)";
    case SSH_FX_FILE_ALREADY_EXISTS:
      return "already exists";
    case SSH_FX_NO_SUCH_PATH:
      return "no such path";
    case SSH_FX_WRITE_PROTECT:
      return "write protected";
    case SSH_FX_NO_MEDIA:
      return "no media";
    default:
      return "error";
  }
}

}  // namespace

struct Sftp::Impl {
  Session* session = nullptr;
  Session::Impl* s = nullptr;
  sftp_session sftp = nullptr;

  [[noreturn]] void fail(const std::string& doing, const std::string& path) {
    if (!ssh_is_connected(s->ssh)) s->lost("SFTP: " + doing + " " + path);
    const int code = sftp_get_error(sftp);
    throw Error(ExitCode::kIo, "SFTP on " + s->where() + ": cannot " + doing + " " + printable(path) + ": " +
                                   sftp_error_name(code) + " (code " + std::to_string(code) + ")");
  }
  std::string path(const std::string& p) {
    check_remote_path(p);
    if (!sftp) s->lost("using an SFTP channel of a closed connection");
    return session->expand_home(p);
  }
  // Writes bytes produced by `next` (returns 0 at the end) to a new file `remote` (0600).
  template <typename Next>
  std::string write_new(const std::string& remote, Next next) {
    sftp_file f = sftp_open(sftp, remote.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (!f) fail("create", remote);
    Sha256 sha;
    std::vector<char> buf(kChunk);
    while (true) {
      const size_t n = next(buf.data(), buf.size());
      if (n == 0) break;
      sha.update(buf.data(), n);
      size_t done = 0;
      while (done < n) {
        const ssize_t w = sftp_write(f, buf.data() + done, n - done);
        if (w <= 0) {
          sftp_close(f);
          fail("write", remote);
        }
        done += static_cast<size_t>(w);
      }
    }
    if (sftp_extension_supported(sftp, "fsync@openssh.com", "1")) sftp_fsync(f);
    if (sftp_close(f) != SSH_NO_ERROR) fail("close", remote);
    return sha.hex();
  }
};

void check_remote_path(const std::string& path) {
  if (path.empty()) throw_usage("remote path is empty");
  for (char c : path)
    if (c == '\0' || c == '\n' || c == '\r')
      throw_usage("remote path '" + printable(path) +
                  "' contains a NUL byte or a line break; choose another name");
}

Sftp::Sftp(Session& session) : impl_(std::make_unique<Impl>()) {
  session.connect();
  impl_->session = &session;
  impl_->s = &session.impl();
  impl_->sftp = sftp_new(impl_->s->ssh);
  if (!impl_->sftp) impl_->s->lost("opening the SFTP channel");
  if (sftp_init(impl_->sftp) != SSH_OK) {
    sftp_free(impl_->sftp);
    impl_->sftp = nullptr;
    if (!ssh_is_connected(impl_->s->ssh)) impl_->s->lost("starting SFTP");
    throw Error(ExitCode::kComm, "the SFTP subsystem is not available on " + impl_->s->where() +
                                     "; enable `Subsystem sftp` in the node's sshd_config");
  }
  impl_->s->sftps.push_back(&impl_->sftp);
}

Sftp::~Sftp() {
  auto& list = impl_->s->sftps;
  list.erase(std::remove(list.begin(), list.end(), &impl_->sftp), list.end());
  if (impl_->sftp) sftp_free(impl_->sftp);
}

RemoteStat Sftp::stat(const std::string& p) {
  const std::string path = impl_->path(p);
  RemoteStat st;
  sftp_attributes a = sftp_stat(impl_->sftp, path.c_str());
  if (!a) {
    const int code = sftp_get_error(impl_->sftp);
    if (code == SSH_FX_NO_SUCH_FILE || code == SSH_FX_NO_SUCH_PATH) return st;
    impl_->fail("stat", path);
  }
  st.exists = true;
  st.is_dir = a->type == SSH_FILEXFER_TYPE_DIRECTORY;
  st.size = a->size;
  st.mode = a->permissions & 07777;
  st.mtime = static_cast<int64_t>(a->mtime);
  sftp_attributes_free(a);
  return st;
}

void Sftp::mkdir_p(const std::string& p, uint32_t mode) {
  const std::string path = impl_->path(p);
  std::string prefix;
  size_t i = 0;
  while (i < path.size()) {
    const size_t slash = path.find('/', i + 1);
    prefix = path.substr(0, slash == std::string::npos ? path.size() : slash);
    i = slash == std::string::npos ? path.size() : slash;
    if (prefix.empty() || prefix == "/") continue;
    const RemoteStat st = stat(prefix);
    if (st.exists && st.is_dir) continue;
    if (st.exists)
      throw Error(ExitCode::kIo, "remote path " + printable(prefix) + " exists and is not a directory");
    if (sftp_mkdir(impl_->sftp, prefix.c_str(), static_cast<mode_t>(mode)) != SSH_OK && !stat(prefix).is_dir)
      impl_->fail("create directory", prefix);
  }
}

namespace {

// Verifies the uploaded temporary file, sets its mode and renames it over the destination.
void publish(Sftp& sftp, Session& session, Sftp::Impl& m, const std::string& tmp, const std::string& dest,
             const std::string& sha, uint32_t mode) {
  const std::string remote_sha = sftp.remote_sha256(tmp);
  if (remote_sha != sha) {
    sftp_unlink(m.sftp, tmp.c_str());
    throw Error(ExitCode::kIo,
                "upload of " + printable(dest) + " to " + m.s->where() + " is damaged (sha256 " + remote_sha +
                    " on the node, " + sha +
                    " sent); the destination was left untouched. Retry; check the node's disk.");
  }
  if (sftp_chmod(m.sftp, tmp.c_str(), static_cast<mode_t>(mode)) != SSH_OK) m.fail("chmod", tmp);
  const ExecResult r = session.exec("mv -f -- " + shell_quote(tmp) + " " + shell_quote(dest));
  if (r.exit_status != 0) {
    sftp_unlink(m.sftp, tmp.c_str());
    throw Error(ExitCode::kIo, "cannot move the upload into place at " + printable(dest) + " on " +
                                   m.s->where() + ": " + printable(r.err));
  }
}

}  // namespace

std::string Sftp::upload_file(const std::string& local_path, const std::string& remote_path, uint32_t mode) {
  const std::string dest = impl_->path(remote_path);
  std::ifstream in(local_path, std::ios::binary);
  if (!in) throw_io("cannot read " + local_path + " to upload it: " + errno_string(errno));
  const std::string tmp = parent_of(dest) + "/." + base_of(dest) + ".tmp-" + random_suffix();
  const std::string sha = impl_->write_new(tmp, [&](char* buf, size_t cap) {
    in.read(buf, static_cast<std::streamsize>(cap));
    return static_cast<size_t>(in.gcount());
  });
  publish(*this, *impl_->session, *impl_, tmp, dest, sha, mode);
  return sha;
}

std::string Sftp::upload_bytes(const std::string& data, const std::string& remote_path, uint32_t mode) {
  const std::string dest = impl_->path(remote_path);
  const std::string tmp = parent_of(dest) + "/." + base_of(dest) + ".tmp-" + random_suffix();
  size_t pos = 0;
  const std::string sha = impl_->write_new(tmp, [&](char* buf, size_t cap) {
    const size_t n = std::min(cap, data.size() - pos);
    std::copy_n(data.data() + pos, n, buf);
    pos += n;
    return n;
  });
  publish(*this, *impl_->session, *impl_, tmp, dest, sha, mode);
  return sha;
}

std::string Sftp::download(const std::string& remote_path, const std::string& local_path) {
  const std::string src = impl_->path(remote_path);
  sftp_file f = sftp_open(impl_->sftp, src.c_str(), O_RDONLY, 0);
  if (!f) impl_->fail("open", src);
  const std::string tmp = local_path + ".part";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    sftp_close(f);
    throw_io("cannot write " + tmp + ": " + errno_string(errno));
  }
  Sha256 sha;
  std::vector<char> buf(kChunk);
  while (true) {
    const ssize_t n = sftp_read(f, buf.data(), buf.size());
    if (n < 0) {
      ::close(fd);
      sftp_close(f);
      impl_->fail("read", src);
    }
    if (n == 0) break;
    sha.update(buf.data(), static_cast<size_t>(n));
    if (::write(fd, buf.data(), static_cast<size_t>(n)) != n) {
      ::close(fd);
      sftp_close(f);
      throw_io("cannot write " + tmp + ": " + errno_string(errno));
    }
  }
  sftp_close(f);
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || std::rename(tmp.c_str(), local_path.c_str()) != 0)
    throw_io("cannot finish writing " + local_path + ": " + errno_string(errno));
  return sha.hex();
}

std::string Sftp::read_range(const std::string& remote_path, uint64_t offset, size_t max_bytes) {
  const std::string src = impl_->path(remote_path);
  sftp_file f = sftp_open(impl_->sftp, src.c_str(), O_RDONLY, 0);
  if (!f) impl_->fail("open", src);
  std::string out;
  if (sftp_seek64(f, offset) != 0) {
    sftp_close(f);
    impl_->fail("seek in", src);
  }
  std::vector<char> buf(kChunk);
  while (out.size() < max_bytes) {
    const ssize_t n = sftp_read(f, buf.data(), std::min(buf.size(), max_bytes - out.size()));
    if (n < 0) {
      sftp_close(f);
      impl_->fail("read", src);
    }
    if (n == 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
  }
  sftp_close(f);
  return out;
}

std::vector<RemoteEntry> Sftp::list(const std::string& remote_dir) {
  const std::string dir = impl_->path(remote_dir);
  sftp_dir d = sftp_opendir(impl_->sftp, dir.c_str());
  if (!d) impl_->fail("list", dir);
  std::vector<RemoteEntry> out;
  while (sftp_attributes a = sftp_readdir(impl_->sftp, d)) {
    const std::string name = a->name ? a->name : "";
    if (name != "." && name != "..")
      out.push_back({name, a->type == SSH_FILEXFER_TYPE_DIRECTORY, static_cast<uint64_t>(a->size)});
    sftp_attributes_free(a);
  }
  const bool complete = sftp_dir_eof(d) != 0;
  sftp_closedir(d);
  if (!complete) impl_->fail("list", dir);
  std::sort(out.begin(), out.end(),
            [](const RemoteEntry& a, const RemoteEntry& b) { return a.name < b.name; });
  return out;
}

void Sftp::remove(const std::string& remote_path) {
  const std::string path = impl_->path(remote_path);
  if (sftp_unlink(impl_->sftp, path.c_str()) != SSH_OK) impl_->fail("remove", path);
}

std::string Sftp::remote_sha256(const std::string& remote_path) {
  const std::string path = impl_->path(remote_path);
  const ExecResult r = impl_->session->exec("sha256sum -b -- " + shell_quote(path) + " 2>/dev/null", 600);
  if (r.exit_status == 0 && r.out.size() >= 64) {
    const std::string hex = r.out.substr(0, 64);
    if (hex.find_first_not_of("0123456789abcdef") == std::string::npos) return hex;
  }
  // No sha256sum on the node (or odd output): read the file back.
  sftp_file f = sftp_open(impl_->sftp, path.c_str(), O_RDONLY, 0);
  if (!f) impl_->fail("open", path);
  Sha256 sha;
  std::vector<char> buf(kChunk);
  while (true) {
    const ssize_t n = sftp_read(f, buf.data(), buf.size());
    if (n < 0) {
      sftp_close(f);
      impl_->fail("read", path);
    }
    if (n == 0) break;
    sha.update(buf.data(), static_cast<size_t>(n));
  }
  sftp_close(f);
  return sha.hex();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_io("cannot read " + path + ": " + errno_string(errno));
  Sha256 sha;
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    sha.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  return sha.hex();
}

std::string sha256_hex(const std::string& data) {
  Sha256 sha;
  sha.update(data.data(), data.size());
  return sha.hex();
}

}  // namespace flotilla::remote
