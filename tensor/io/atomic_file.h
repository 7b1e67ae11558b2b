#pragma once
// Crash-safe file replacement: the bytes go to a temporary file in the target's directory, which is
// flushed to disk (fsync) and then renamed over the target; finally the directory itself is
// fsync'ed so the rename survives a power cut. A reader, or a crash at any moment, sees either the
// complete old file or the complete new one, never a torn mix. On any failure the temporary file
// is removed and the old file is left untouched. (The one exception: if fsync of the directory
// fails after the rename, the new file is already in place but its durability is not assured;
// that is reported as an error too.) The new file gets mode 0666 minus the umask.
#include <cstddef>
#include <functional>
#include <string>

namespace gf {

// Receives the next chunk of the file; may be called any number of times.
using ByteSink = std::function<void(const void* data, size_t size)>;

// Writes `bytes` to `path` atomically. Throws std::runtime_error naming the path, the failing step
// and the errno text (e.g. "write_file_atomic: 'dir/x.bin': cannot create temporary file
// 'dir/.x.bin.tmp-node1-123-0': No such file or directory").
void write_file_atomic(const std::string& path, const std::string& bytes);

// Streaming variant: `produce` is called once and writes the whole content through the sink it is
// given, so large files need not be built in memory first. If `produce` throws, the temporary file
// is removed, the old file stays as it was, and the exception propagates unchanged.
void write_file_atomic_with(const std::string& path, const std::function<void(const ByteSink& sink)>& produce);

// Where a test makes the writers above fail on purpose (a kill mid-file, a full disk). The shipped
// program installs nothing, so every write goes through; tests install one through the training
// run's test seam (train/loop/test_seam.h), which is the only implementation.
class WriteFaults {
 public:
  virtual ~WriteFaults() = default;
  enum class Then { Write, Kill, NoSpace };
  struct Verdict {
    size_t allowed;  // of the next n bytes, how many are written first
    Then then;       // Write: all n were allowed; Kill: SIGKILL after `allowed`; NoSpace: fail with ENOSPC after them
  };
  // Called before n more bytes go to a file.
  virtual Verdict before_write(size_t n) = 0;
};
// Installs `faults` for every writer of this process (nullptr: none, the default). Not owned.
void set_write_faults(WriteFaults* faults);

// This machine's name as temporary files record it: gethostname() with every character other than
// a letter, a digit or '-' made '_', at most 64 characters.
std::string temp_file_host();

// Deletes the temporary files that writers killed mid-write left in `dir`: hidden
// ".<name>.tmp-<host>-<pid>-<n>" files of this host whose process no longer exists; returns how
// many. A live writer's file is left alone, and so is every file of another host (on a shared file
// system this machine cannot tell whether that writer lives) and every file whose name records no
// host.
size_t remove_abandoned_temp_files(const std::string& dir);

}  // namespace gf
