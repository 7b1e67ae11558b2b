#pragma once
// The files of a folder someone else may have made (a run folder, a lab's output): outside input,
// like a data file. Every reader takes a file only when it is a regular file (after symbolic
// links), so that a FIFO cannot hang it and a link to /dev/zero cannot exhaust its memory, and only
// up to a size bound that it names. Every file gradflow writes in place there (a lock, a log it
// appends to) is opened with O_NOFOLLOW and checked to be a regular file, so that a symbolic link
// planted in the folder cannot make it write through to another file. (Files replaced whole go
// through tensor/io/atomic_file.h, whose rename replaces a link, never its target.)
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace gf {

// Opens `path` with `flags` (O_RDWR / O_WRONLY, O_CREAT, O_APPEND, ...) plus O_NOFOLLOW and
// O_CLOEXEC, for a file of gradflow's own in a folder. Throws std::runtime_error "<op>: '<path>' is
// a symbolic link ..." or "... is not a regular file (a FIFO)" without touching what is there (a
// FIFO or device is opened non-blocking, and O_TRUNC is applied only after the check), or naming
// the errno text. Returns the descriptor, blocking, for the caller to close.
int open_own_file(const std::string& path, int flags, std::string_view op, mode_t mode = 0644);

// `path` opened for reading when it is a regular file (symbolic links followed); throws
// std::runtime_error naming `op` and the file when it is missing, a directory, a FIFO, a device or
// unreadable. Returns the descriptor, blocking, for the caller to close.
int open_regular_file(const std::string& path, std::string_view op);

// The whole of a regular file of at most max_bytes (symbolic links followed). Throws
// std::runtime_error naming `op` and the file for all that open_regular_file refuses, and for a
// file larger than max_bytes ("... holds 2147483648 bytes, more than the 1048576 read from such a
// file"), before reading any of it; a file that grows past the bound while read is refused too.
std::string read_regular_file(const std::string& path, uint64_t max_bytes, std::string_view op);

// "a FIFO", "a directory", "a character device", ... for a stat mode; "a regular file" for one.
const char* file_kind(mode_t mode);

}  // namespace gf
