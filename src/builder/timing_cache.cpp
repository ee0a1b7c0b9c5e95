#include "src/builder/timing_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <utility>

#include "kiln/error.h"
#include "kiln/logger.h"
#include "src/core/file_io.h"
#include "src/core/text.h"

namespace kiln {

namespace {

constexpr const char* kHeader = "kiln timing cache v1";
constexpr uint64_t kMaxTimingCacheBytes = 256u << 20;

// The entries of the file at `path` (none when it does not exist). With `warn`, a file that is
// not a timing cache and lines that are not entries are reported as warnings.
std::map<std::string, std::string> read_entries(const std::string& path, bool warn) {
  std::map<std::string, std::string> entries;
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return entries;  // a new cache
  std::istringstream f(read_whole_file_text(path, "timing cache", kMaxTimingCacheBytes));
  std::string line;
  if (!std::getline(f, line) || line != kHeader) {
    if (warn) {
      log(Severity::kWarning, "timing cache " + quote(path) + " is not a kiln timing cache (first line " +
                                  quote(line.substr(0, 60)) + "); it is ignored and will be rewritten");
    }
    return entries;
  }
  int malformed = 0;
  while (std::getline(f, line)) {
    const auto tab = line.rfind('\t');
    if (tab == std::string::npos || tab == 0 || tab + 1 == line.size()) {
      ++malformed;
      continue;
    }
    entries[line.substr(0, tab)] = line.substr(tab + 1);
  }
  if (warn && malformed > 0) {
    log(Severity::kWarning, "timing cache " + quote(path) + ": " + std::to_string(malformed) +
                                " line(s) that are not entries ignored (a damaged file?); the next save rewrites it");
  }
  return entries;
}

// An exclusive flock on "<path>.lock" for as long as it lives.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    const std::string lock = path + ".lock";
    fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd_ < 0)
      throw Error("cannot lock timing cache " + quote(path) + " (" + quote(lock) + "): " + std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd_);
      throw Error("cannot lock timing cache " + quote(path) + ": " + std::strerror(e));
    }
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

TimingCache::TimingCache(std::string path) : path_(std::move(path)) {
  if (!path_.empty()) entries_ = read_entries(path_, true);
}

const std::string* TimingCache::find(const std::string& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

void TimingCache::put(const std::string& key, const std::string& choice) {
  entries_[key] = choice;
  dirty_ = true;
}

void TimingCache::save() const {
  if (path_.empty() || !dirty_) return;
  FileLock lock(path_);
  // What other builders saved since this one read the file stays; this builder's entries win.
  std::map<std::string, std::string> merged = read_entries(path_, false);
  for (const auto& [k, v] : entries_) merged[k] = v;
  std::ostringstream f;
  f << kHeader << "\n";
  for (const auto& [k, v] : merged) f << k << "\t" << v << "\n";
  const std::string text = f.str();
  write_file_atomically(path_, text.data(), text.size(), "timing cache");
}

}  // namespace kiln
