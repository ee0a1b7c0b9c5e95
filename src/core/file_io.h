// Whole-file reads and writes for every file kiln opens by name (models, external data, engines,
// tensors, flag files, timing caches). Reads check first that the path is a regular file and
// read exactly the size it has, so a device (/dev/zero, /dev/urandom), a FIFO or a folder gives
// an error naming the file instead of an endless read. Writes create a temporary file with a
// unique name in the target's folder (exclusively, never through a link), write and flush it,
// and rename it over the target: the target is always either the old file or the complete new
// one, and a planted link or a device node is never written through. Paths inside a model's
// folder (external data) are resolved through their links and refused when they leave it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kiln {

// Reads the whole of `path`. `what` names the file in errors ("engine file", "ONNX model"):
// "cannot open <what> '<path>': no such file / it is a directory / it is not a regular file
// (a character device) / it is N bytes, more than the limit of M bytes / <system error>".
// `max_bytes` 0 means no limit beyond the file's size. Thread-safe.
std::vector<uint8_t> read_whole_file(const std::string& path, const std::string& what, uint64_t max_bytes = 0);
std::string read_whole_file_text(const std::string& path, const std::string& what, uint64_t max_bytes = 0);

// Throws the same errors as read_whole_file for a path that cannot be read as a regular file
// (nothing is read); returns the file's size in bytes.
uint64_t check_regular_file(const std::string& path, const std::string& what);

// Reads `length` bytes at `offset` of the regular file `path` into `out` (external data). Throws
// like read_whole_file, and when the range runs past the end of the file.
void read_file_range(const std::string& path, const std::string& what, uint64_t offset, uint64_t length, void* out);

// Replaces `path` by a file holding `size` bytes of `data`, atomically (see above). Refuses a
// target that exists and is not a regular file (a folder, a device node such as /dev/full or
// /dev/null, a FIFO) or that is a symbolic link (kiln does not write through links; give the
// link's target instead). The new file gets mode 0666 minus the umask, like a newly created file.
// Throws kiln::Error "cannot write <what> '<path>': ...". Thread-safe (two writers of the same
// path each rename a complete file; the last rename wins).
void write_file_atomically(const std::string& path, const void* data, size_t size, const std::string& what);
// The same for a file made of several pieces written one after the other (a header and data).
struct FilePiece {
  const void* data = nullptr;
  size_t size = 0;
};
void write_file_atomically(const std::string& path, const std::vector<FilePiece>& pieces, const std::string& what);

// `relative` (a path a model file gives, e.g. an external-data location) resolved inside
// `folder`: absolute paths and paths whose real location (after following every symbolic link,
// of the file and of the folders on the way) lies outside the real `folder` are refused with a
// kiln::Error naming `what` and `folder_what`. Returns the resolved path.
std::filesystem::path resolve_inside_folder(const std::filesystem::path& folder, const std::string& relative,
                                            const std::string& what,
                                            const std::string& folder_what = "the model's folder");

}  // namespace kiln
