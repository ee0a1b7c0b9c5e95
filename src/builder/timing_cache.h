// The builder's timing cache file (BuilderConfig::timing_cache_path, `kiln build --timing-cache`):
// the kernel chosen for each timed layer configuration, so a rebuild skips timing what it has
// seen. Text: the header line, then one "key<TAB>choice" line per entry.
//
// Several builders may share one file: save() takes an exclusive lock (flock on "<path>.lock"),
// merges what is on disk (entries another builder saved meanwhile are kept; this builder's win
// where both have a key) and replaces the file atomically, so the file is always either the old
// one or a complete new one and no builder's entries are lost. A file that is not a timing cache,
// or lines that are not entries, are ignored with a warning (and rewritten by the next save).
#pragma once

#include <map>
#include <string>

namespace kiln {

class TimingCache {
 public:
  // Reads `path` when it exists; an empty path is a cache that is never read or written.
  explicit TimingCache(std::string path);
  const std::string* find(const std::string& key) const;
  void put(const std::string& key, const std::string& choice);
  // Writes the entries (when any were put) as described above. Throws kiln::Error naming the
  // file when it cannot be written.
  void save() const;
  size_t size() const { return entries_.size(); }

 private:
  std::string path_;
  std::map<std::string, std::string> entries_;
  bool dirty_ = false;
};

}  // namespace kiln
