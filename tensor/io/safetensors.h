#pragma once
// Reading and writing the safetensors format (https://github.com/huggingface/safetensors):
//   8 bytes   little-endian uint64 N, the header length
//   N bytes   UTF-8 JSON object: name -> {"dtype", "shape", "data_offsets": [begin, end]},
//             plus an optional "__metadata__" object of string -> string; padded with spaces
//   the rest  the tensors' raw little-endian bytes, back to back; offsets count from here
// Dtypes read and written: F32, F64, I64, BOOL (one byte, 0 or 1) and BF16.
//
// Integrity: the writer records a digest of the file (xxHash's XXH3, 64 bits, over the header
// without the digest and the data) as "__metadata__"."gradflow.digest"; the readers check it when
// present, so a file damaged after it was written is refused by name wherever it is loaded (resume
// then falls back to the previous checkpoint). read_safetensors_header reads no data: it cannot.
// A file whose metadata says "format": "gradflow" (kGradflowFormat: what the training writer puts
// in every file) always carries a digest; one that does not is refused by name, by every reader,
// header readers included: its digest was stripped.
//
// The reader trusts nothing: every malformed file is rejected with a std::runtime_error that
// names the file and what is wrong, before any out-of-bounds read or any allocation larger than
// the file itself.
#include <map>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace gf {

struct SafetensorsFile {
  std::map<std::string, Tensor> tensors;          // each contiguous, in its own storage
  std::map<std::string, std::string> metadata;   // "__metadata__" without the digest; empty if absent
  std::string digest;                             // the digest it carried, which matched; "" if none
};

// The header may not exceed this many bytes (the reference implementation's limit too).
constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// The "__metadata__" "format" value of the files gradflow's training writes (train/loop/run_writer.cpp).
constexpr const char* kGradflowFormat = "gradflow";

// Reads a file. Errors read "safetensors: '<path>': <problem>".
SafetensorsFile load_safetensors(const std::string& path);
// What a file holds, from its header alone (checked as load_safetensors checks it, against the
// file's size): no tensor data is read or allocated. For checking a checkpoint before building the
// model it is meant for.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
};
std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path);
// A file's "__metadata__" without the digest (empty if absent), from its header alone, checked the same way.
std::map<std::string, std::string> read_safetensors_metadata(const std::string& path);
// Parses a whole file held in memory; `what` names it in error messages.
SafetensorsFile load_safetensors_from_bytes(const std::string& bytes, const std::string& what = "<bytes>");

// Writes tensors (in name order, each made contiguous) and metadata to `path`, atomically (see
// tensor/io/atomic_file.h): a crash or error mid-write leaves any previous file intact.
// Throws std::invalid_argument for an undefined tensor, the reserved name "__metadata__" or a name
// or metadata string that is not valid UTF-8, and std::runtime_error if the file cannot be written.
// Returns the file's digest.
std::string save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                             const std::map<std::string, std::string>& metadata = {});
// The exact bytes save_safetensors writes.
std::string safetensors_to_bytes(const std::map<std::string, Tensor>& tensors,
                                 const std::map<std::string, std::string>& metadata = {});

}  // namespace gf
