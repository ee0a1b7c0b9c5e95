// Checked whole-file reads, atomic writes and confinement of model-relative paths (file_io.h).
#include "src/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <new>
#include <random>

#include "kiln/error.h"
#include "src/core/text.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and reports the error of close() (write-back failures show up there).
  int close() {
    const int r = ::close(fd_);
    fd_ = -1;
    return r;
  }

 private:
  int fd_;
};

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "it is a directory";
  if (S_ISCHR(mode)) return "it is not a regular file (a character device)";
  if (S_ISBLK(mode)) return "it is not a regular file (a block device)";
  if (S_ISFIFO(mode)) return "it is not a regular file (a FIFO)";
  if (S_ISSOCK(mode)) return "it is not a regular file (a socket)";
  if (S_ISLNK(mode)) return "it is a symbolic link";
  return "it is not a regular file";
}

std::string open_error(int err) {
  if (err == ENOENT) return "no such file";
  return std::strerror(err);
}

// Opens `path` for reading as a regular file and returns its size. O_NONBLOCK keeps the open of a
// FIFO without a writer from blocking (the FIFO is refused right after).
int open_regular(const std::string& path, const std::string& what, uint64_t& size) {
  const std::string where = "cannot open " + what + " " + quote(path) + ": ";
  if (path.empty()) throw Error("cannot open " + what + ": no file name given");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw Error(where + open_error(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(where + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(where + file_kind(st.st_mode));
  }
  size = static_cast<uint64_t>(st.st_size);
  return fd;
}

// Reads exactly `length` bytes at `offset`; a file that ends early was truncated meanwhile.
void read_exactly(int fd, const std::string& path, const std::string& what, uint64_t offset, uint64_t length,
                  uint8_t* out) {
  uint64_t done = 0;
  while (done < length) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(length - done, uint64_t{1} << 30));
    const ssize_t n = ::pread(fd, out + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot read " + what + " " + quote(path) + ": " + std::strerror(errno));
    }
    if (n == 0) throw Error("cannot read " + what + " " + quote(path) + ": the file became shorter while it was read");
    done += static_cast<uint64_t>(n);
  }
}

std::vector<uint8_t> allocate_for(const std::string& path, const std::string& what, uint64_t size) {
  try {
    return std::vector<uint8_t>(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    throw Error("out of memory reading " + what + " " + quote(path) + " (" + std::to_string(size) + " bytes)");
  } catch (const std::length_error&) {
    throw Error("out of memory reading " + what + " " + quote(path) + " (" + std::to_string(size) + " bytes)");
  }
}

std::string random_suffix() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^ static_cast<uint64_t>(::getpid())};
  static const char kChars[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string s;
  for (int i = 0; i < 12; ++i) s += kChars[rng() % 36];
  return s;
}

}  // namespace

uint64_t check_regular_file(const std::string& path, const std::string& what) {
  uint64_t size = 0;
  FileDescriptor fd(open_regular(path, what, size));
  return size;
}

std::vector<uint8_t> read_whole_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  uint64_t size = 0;
  FileDescriptor fd(open_regular(path, what, size));
  if (max_bytes && size > max_bytes) {
    throw Error("cannot open " + what + " " + quote(path) + ": it is " + std::to_string(size) +
                " bytes, more than the limit of " + std::to_string(max_bytes) + " bytes");
  }
  std::vector<uint8_t> bytes = allocate_for(path, what, size);
  read_exactly(fd.get(), path, what, 0, size, bytes.data());
  return bytes;
}

std::string read_whole_file_text(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const std::vector<uint8_t> bytes = read_whole_file(path, what, max_bytes);
  return std::string(bytes.begin(), bytes.end());
}

void read_file_range(const std::string& path, const std::string& what, uint64_t offset, uint64_t length, void* out) {
  uint64_t size = 0;
  FileDescriptor fd(open_regular(path, what, size));
  if (offset > size || length > size - offset) {
    throw Error("cannot read " + what + " " + quote(path) + ": " + std::to_string(length) + " bytes at offset " +
                std::to_string(offset) + " run past its end (" + std::to_string(size) + " bytes)");
  }
  read_exactly(fd.get(), path, what, offset, length, static_cast<uint8_t*>(out));
}

void write_file_atomically(const std::string& path, const void* data, size_t size, const std::string& what) {
  write_file_atomically(path, std::vector<FilePiece>{{data, size}}, what);
}

void write_file_atomically(const std::string& path, const std::vector<FilePiece>& pieces, const std::string& what) {
  const std::string where = "cannot write " + what + " " + quote(path) + ": ";
  if (path.empty()) throw Error("cannot write " + what + ": no file name given");
  // The target itself, not what a link points to.
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      throw Error(where +
                  "it is a symbolic link; kiln does not write through links (give the path of the file "
                  "it points to)");
    }
    if (!S_ISREG(st.st_mode)) throw Error(where + file_kind(st.st_mode) + "; kiln replaces only regular files");
  } else if (errno != ENOENT) {
    throw Error(where + std::strerror(errno));
  }
  const fs::path target(path);
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) {
    throw Error(where + "folder " + quote(folder.string()) +
                (fs::exists(folder, ec) ? " is not a directory" : " does not exist"));
  }
  // A fresh name in the target's folder (so that the rename stays on one file system), created
  // exclusively: an existing file or link of that name is never opened.
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 16 && fd < 0; ++attempt) {
    tmp = (folder / ("." + target.filename().string() + ".tmp-" + random_suffix())).string();
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) throw Error(where + std::strerror(errno));
  }
  if (fd < 0) throw Error(where + "could not create a temporary file in " + quote(folder.string()));
  FileDescriptor file(fd);
  const auto fail = [&](const std::string& reason) {
    ::unlink(tmp.c_str());
    throw Error(where + reason);
  };
  for (const FilePiece& piece : pieces) {
    const auto* p = static_cast<const uint8_t*>(piece.data);
    size_t done = 0;
    while (done < piece.size) {
      const ssize_t n = ::write(file.get(), p + done, std::min<size_t>(piece.size - done, size_t{1} << 30));
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(std::strerror(errno));
      }
      done += static_cast<size_t>(n);
    }
  }
  // On disk before the rename, so that a crash leaves the old file or the whole new one.
  if (::fsync(file.get()) != 0 && errno != EINVAL) fail(std::strerror(errno));
  if (file.close() != 0) fail(std::strerror(errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail(std::strerror(errno));
}

fs::path resolve_inside_folder(const fs::path& folder, const std::string& relative, const std::string& what,
                               const std::string& folder_what) {
  const fs::path rel(relative);
  if (relative.empty()) throw Error(what + ": the path is empty");
  if (rel.is_absolute() || rel.has_root_name()) {
    throw Error(what + " " + quote(relative) + " is an absolute path; it must be relative to " + folder_what);
  }
  for (const auto& part : rel) {
    if (part == "..") throw Error(what + " " + quote(relative) + " leaves " + folder_what + " ('..')");
  }
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(folder.empty() ? fs::path(".") : folder, ec);
  if (ec) throw Error(what + ": cannot resolve " + folder_what + " " + quote(folder.string()) + ": " + ec.message());
  const fs::path real = fs::weakly_canonical(base / rel, ec);
  if (ec) throw Error(what + " " + quote(relative) + ": cannot resolve the path: " + ec.message());
  // `real` must start with every component of `base`.
  auto b = base.begin(), r = real.begin();
  for (; b != base.end(); ++b, ++r) {
    if (b->empty() && std::next(b) == base.end()) break;  // a trailing separator
    if (r == real.end() || *r != *b) {
      throw Error(what + " " + quote(relative) + " resolves to " + quote(real.string()) + ", outside " + folder_what +
                  " " + quote(base.string()) + " (through '..' or a symbolic link); kiln reads only files inside " +
                  folder_what);
    }
  }
  return real;
}

}  // namespace kiln
