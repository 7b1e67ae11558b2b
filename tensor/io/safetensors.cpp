#include "tensor/io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "tensor/check.h"
#include "tensor/io/atomic_file.h"
#include "tensor/io/digest.h"

namespace gf {

// Tensor bytes are copied to and from the file unchanged, which is only right on a
// little-endian machine.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using json = nlohmann::json;

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
// A valid header nests three levels deep at most; the limit only stops hostile input from
// building huge nested structures.
constexpr int kMaxJsonDepth = 16;

// Every problem with a file's contents: std::runtime_error "safetensors: '<file>': <problem>".
template <class... Args>
[[noreturn]] void bad(const std::string& what, fmt::format_string<Args...> problem, Args&&... args) {
  GF_FAIL_AS(std::runtime_error, "safetensors: '{}': {}", what, fmt::format(problem, std::forward<Args>(args)...));
}

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Int64: return "I64";
    case DType::Bool: return "BOOL";
    case DType::BFloat16: return "BF16";
  }
  return "?";
}

// The dtypes gradflow reads: one list, for the parser and for its error message.
constexpr DType kReadable[] = {DType::Float32, DType::Float64, DType::Int64, DType::Bool, DType::BFloat16};

std::string readable_names() {
  std::string s;
  for (DType t : kReadable) s += (s.empty() ? "" : ", ") + std::string(st_dtype_name(t));
  return s;
}

bool st_dtype_from_name(const std::string& s, DType& out) {
  for (DType t : kReadable)
    if (s == st_dtype_name(t)) {
      out = t;
      return true;
    }
  return false;
}

// A JSON value for an error message, cut short so a hostile header cannot flood the message.
std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}
std::string brief(const std::string& s) { return s.size() > 60 ? s.substr(0, 57) + "..." : s; }

// Non-negative integers parse as number_unsigned; negative ones as number_integer, and
// fractions or exponents as number_float. Only the first kind is a valid size or offset.
bool as_uint(const json& v, uint64_t& out) {
  if (!v.is_number_unsigned()) return false;
  out = v.get<uint64_t>();
  return true;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// One tensor as the header describes it, already checked for internal consistency.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // relative to the start of the data section
};

// A file's digest (tensor/io/digest.h) of the header without the digest itself (as
// nlohmann::json dumps it: keys sorted, no padding), then the data section. save_safetensors
// writes it under "__metadata__"; every load of a file that carries it checks it, so a flipped bit
// in weights, optimizer state or the header is found before anything uses them. Files from other
// writers (PyTorch's) have none and load unchecked.
constexpr const char* kDigestKey = "gradflow.digest";

struct Header {
  std::vector<Entry> entries;
  std::map<std::string, std::string> metadata;  // without the digest
  std::string digest;                           // kDigestKey's value, "" when the file has none
  std::string canonical;                        // the header as the digest covers it
};

// Parses the JSON text, rejecting duplicate keys (nlohmann would silently keep the last one)
// and absurd nesting, both detected while parsing through the callback.
json parse_json(const std::string& text, const std::string& what) {
  std::vector<std::unordered_set<std::string>> keys_per_object;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth)
          bad(what, "header JSON is nested more than {} levels deep", kMaxJsonDepth);
        if (event == json::parse_event_t::object_start) keys_per_object.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys_per_object.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!keys_per_object.back().insert(key).second)
          bad(what, "header has duplicate key '{}'", brief(key));
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text, cb);
  } catch (const json::exception& e) {
    bad(what, "header is not valid JSON: {}", e.what());
  }
}

Entry parse_entry(const std::string& name, const json& v, uint64_t data_size, const std::string& what) {
  const std::string t = fmt::format("tensor '{}': ", brief(name));
  if (!v.is_object()) bad(what, "{}entry is {} (a {}), not an object", t, brief(v), v.type_name());
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
      bad(what, "{}unexpected field '{}' (allowed: dtype, shape, data_offsets)", t, brief(it.key()));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) bad(what, "{}missing field '{}'", t, field);

  Entry e;
  e.name = name;

  const json& dt = v["dtype"];
  if (!dt.is_string()) bad(what, "{}dtype is {}, not a string", t, brief(dt));
  if (!st_dtype_from_name(dt.get_ref<const std::string&>(), e.dtype))
    bad(what, "{}unsupported dtype {} (gradflow reads {})", t, brief(dt), readable_names());

  const json& sh = v["shape"];
  if (!sh.is_array()) bad(what, "{}shape is {}, not an array", t, brief(sh));
  for (size_t i = 0; i < sh.size(); ++i) {
    uint64_t d;
    if (!as_uint(sh[i], d))
      bad(what, "{}shape dim {} is {}, not a non-negative integer", t, i, brief(sh[i]));
    if (d > kInt64Max) bad(what, "{}shape dim {} is {}, too large", t, i, d);
    e.shape.push_back(static_cast<int64_t>(d));
  }
  // Zero-size dims are skipped in the product so that row-major strides, which multiply the
  // other dims, cannot overflow either.
  int64_t stride_product = 1, nbytes = 0;
  for (int64_t d : e.shape)
    if (__builtin_mul_overflow(stride_product, std::max<int64_t>(d, 1), &stride_product))
      bad(what, "{}element count of shape {} overflows 64 bits", t, shape_str(e.shape));
  if (__builtin_mul_overflow(shape_numel(e.shape), static_cast<int64_t>(dtype_size(e.dtype)), &nbytes))
    bad(what, "{}byte size of shape {} overflows 64 bits", t, shape_str(e.shape));

  const json& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2)
    bad(what, "{}data_offsets is {}, not an array of two integers [begin, end]", t, brief(off));
  for (int k = 0; k < 2; ++k) {
    uint64_t x;
    if (!as_uint(off[k], x))
      bad(what, "{}data_offsets[{}] is {}, not a non-negative integer", t, k, brief(off[k]));
    (k == 0 ? e.begin : e.end) = x;
  }
  const std::string range = fmt::format("data_offsets [{}, {}]", e.begin, e.end);
  if (e.begin > e.end) bad(what, "{}{} are out of order (begin > end)", t, range);
  if (e.end > data_size) bad(what, "{}{} run past the end of the data section ({} bytes)", t, range, data_size);
  if (e.end - e.begin != static_cast<uint64_t>(nbytes))
    bad(what, "{}{} span {} bytes but {} shape {} needs {} bytes", t, range, e.end - e.begin, st_dtype_name(e.dtype),
        shape_str(e.shape), nbytes);
  return e;
}

// The spec asks for the tensors to tile the data section exactly: no overlaps, no holes, no
// trailing bytes.
void check_layout(std::vector<Entry>& entries, uint64_t data_size, const std::string& what) {
  std::vector<const Entry*> order;
  for (const Entry& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t pos = 0;
  const Entry* prev = nullptr;
  auto span = [](const Entry* e) { return fmt::format("'{}' [{}, {}]", brief(e->name), e->begin, e->end); };
  for (const Entry* e : order) {
    if (e->begin < pos) bad(what, "tensors {} and {} overlap", span(prev), span(e));
    if (e->begin > pos)
      bad(what, "hole in the data section: bytes [{}, {}) before tensor {} belong to no tensor", pos, e->begin, span(e));
    pos = e->end;
    prev = e;
  }
  if (pos != data_size) bad(what, "hole in the data section: the last {} bytes belong to no tensor", data_size - pos);
}

// The header as its digest covers it, and the digest it records ("" when none).
void take_digest(json& root, Header& h) {
  auto m = root.find("__metadata__");
  if (m != root.end() && m->is_object() && m->contains(kDigestKey) && (*m)[kDigestKey].is_string()) {
    h.digest = (*m)[kDigestKey].get<std::string>();
    m->erase(kDigestKey);
    if (m->empty()) root.erase(m);
  }
  h.canonical = root.dump();
}

Header parse_header(const std::string& text, uint64_t data_size, const std::string& what) {
  json root = parse_json(text, what);
  if (!root.is_object()) bad(what, "header is a JSON {}, not an object", root.type_name());
  Header h;
  take_digest(root, h);
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      const json& m = it.value();
      if (!m.is_object()) bad(what, "__metadata__ is {}, not an object of strings", brief(m));
      for (auto mt = m.begin(); mt != m.end(); ++mt) {
        if (!mt.value().is_string())
          bad(what, "__metadata__ value for '{}' is {}, not a string", brief(mt.key()), brief(mt.value()));
        h.metadata[mt.key()] = mt.value().get<std::string>();
      }
      continue;
    }
    h.entries.push_back(parse_entry(it.key(), it.value(), data_size, what));
  }
  check_layout(h.entries, data_size, what);
  // gradflow's training writer always records a digest beside its format: one without is a file
  // whose digest was stripped (or changed after it was written), which would otherwise load unchecked.
  if (h.digest.empty())
    if (auto f = h.metadata.find("format"); f != h.metadata.end() && f->second == kGradflowFormat)
      bad(what, "it carries gradflow's format metadata (\"format\": \"{}\") but no digest (\"{}\"): the digest was removed or the file "
          "was changed after gradflow wrote it; refusing to load it unchecked",
          kGradflowFormat, kDigestKey);
  return h;
}

// `read(offset, dst, n)` copies n bytes at `offset` of the file; the offsets it is given have been
// checked against `file_size` already.
using ReadFn = std::function<void(uint64_t offset, void* dst, size_t n)>;

// The header of a file (checked, entries bounded by the file size) and where its data starts.
Header read_header(uint64_t file_size, const ReadFn& read, const std::string& what, uint64_t& data_start) {
  if (file_size < 8)
    bad(what, "file is {} bytes, too short for the 8-byte header length", file_size);
  unsigned char len_bytes[8];
  read(0, len_bytes, 8);
  const uint64_t n = read_le64(len_bytes);
  if (n > kSafetensorsMaxHeader)
    bad(what, "header length {} exceeds the limit of {} bytes", n, kSafetensorsMaxHeader);
  if (n > file_size - 8)
    bad(what, "header length {} runs past the end of the file (only {} bytes follow the length)", n, file_size - 8);
  std::string text(n, '\0');
  read(8, text.data(), n);
  data_start = 8 + n;
  return parse_header(text, file_size - data_start, what);
}

// The data section is the tensors in offset order, back to back (check_layout).
void check_digest(const Header& h, const SafetensorsFile& f, const std::string& what) {
  std::vector<const Entry*> order;
  for (const Entry& e : h.entries) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  Digest d;
  d.add(h.canonical.data(), h.canonical.size());
  for (const Entry* e : order) d.add(f.tensors.at(e->name).raw_data(), e->end - e->begin);
  if (d.text() != h.digest)
    bad(what, "the contents hash to {} but the header records {}: the file was damaged or changed after it was written", d.text(),
        brief(h.digest));
}

SafetensorsFile decode(uint64_t file_size, const ReadFn& read, const std::string& what) {
  uint64_t data_start = 0;
  Header h = read_header(file_size, read, what, data_start);
  SafetensorsFile out;
  out.metadata = std::move(h.metadata);
  for (const Entry& e : h.entries) {
    // Sizes are bounded by the file size here, so this allocation is never absurd.
    Tensor t = Tensor::empty(e.shape, e.dtype);
    const size_t nbytes = e.end - e.begin;
    if (nbytes > 0) read(data_start + e.begin, t.raw_data(), nbytes);
    out.tensors.emplace(e.name, std::move(t));
  }
  // Damage is named as damage before any check of the values it produced.
  if (!h.digest.empty()) check_digest(h, out, what);
  out.digest = h.digest;
  for (const Entry& e : h.entries)
    if (e.dtype == DType::Bool) {
      // Any byte but 0 or 1 would be an invalid bool object; inspect the raw bytes first.
      const unsigned char* b = static_cast<const unsigned char*>(out.tensors.at(e.name).raw_data());
      for (size_t i = 0; i < e.end - e.begin; ++i)
        if (b[i] > 1)
          bad(what, "tensor '{}': BOOL element {} is byte {}, not 0 or 1", brief(e.name), i, b[i]);
    }
  return out;
}

// Closes a file descriptor on every exit path.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// Writes the file: length, padded header, then each tensor's bytes in name order.
// Returns the digest it recorded.
std::string encode(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata,
                   const ByteSink& sink) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<Tensor> data;  // each tensor row-major: a copy only for strided views
  for (const auto& [name, t] : tensors) {
    const uint64_t nbytes = t.nbytes();
    header[name] = {{"dtype", st_dtype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
    data.push_back(t.contiguous());
  }
  Digest digest;
  std::string text;
  try {
    text = header.dump();
    digest.add(text.data(), text.size());
    for (const Tensor& c : data) digest.add(c.raw_data(), c.nbytes());
    header["__metadata__"][kDigestKey] = digest.text();
    text = header.dump();
  } catch (const json::exception&) {
    GF_FAIL("save_safetensors: a tensor name or metadata string is not valid UTF-8");
  }
  // Padding keeps the data section 8-byte aligned in the file, as the reference writer does.
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  sink(len_bytes, 8);
  sink(text.data(), text.size());
  for (const Tensor& c : data)
    if (c.nbytes() > 0) sink(c.raw_data(), c.nbytes());
  return header["__metadata__"][kDigestKey].get<std::string>();
}

void check_savable(const std::map<std::string, Tensor>& tensors, const std::map<std::string, std::string>& metadata) {
  GF_CHECK(!metadata.contains(kDigestKey), "save_safetensors: metadata key '{}' is reserved for the file's digest", kDigestKey);
  for (const auto& [name, t] : tensors) {
    GF_CHECK(name != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    GF_CHECK(t.defined(), "save_safetensors: tensor '{}' is undefined", name);
  }
}

}  // namespace

SafetensorsFile load_safetensors_from_bytes(const std::string& bytes, const std::string& what) {
  auto read = [&](uint64_t offset, void* dst, size_t n) {
    GF_CHECK_AS(std::logic_error, offset <= bytes.size() && n <= bytes.size() - offset,
                "load_safetensors_from_bytes: unchecked read of {} bytes at {} past the end of '{}' ({} bytes)", n, offset,
                what, bytes.size());
    std::memcpy(dst, bytes.data() + offset, n);
  };
  return decode(bytes.size(), read, what);
}

namespace {

// Reads `path` through `use(file_size, read)`, the file open for its duration.
template <class F>
auto with_file(const std::string& path, F&& use) {
  // Non-blocking until it is known to be a regular file: opening a FIFO must not wait for a writer.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)};
  if (f.fd < 0) bad(path, "cannot open: {}", std::strerror(errno));
  struct stat st;
  if (::fstat(f.fd, &st) != 0) bad(path, "cannot stat: {}", std::strerror(errno));
  if (!S_ISREG(st.st_mode)) bad(path, "not a regular file");
  ::fcntl(f.fd, F_SETFL, ::fcntl(f.fd, F_GETFL) & ~O_NONBLOCK);
  ReadFn read = [&](uint64_t offset, void* dst, size_t n) {
    char* p = static_cast<char*>(dst);
    while (n > 0) {
      ssize_t r = ::pread(f.fd, p, n, static_cast<off_t>(offset));
      if (r < 0) {
        if (errno == EINTR) continue;
        bad(path, "read failed: {}", std::strerror(errno));
      }
      if (r == 0) bad(path, "file ended early (did it shrink while being read?)");
      p += r;
      n -= static_cast<size_t>(r);
      offset += static_cast<uint64_t>(r);
    }
  };
  return use(static_cast<uint64_t>(st.st_size), read);
}

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  return with_file(path, [&](uint64_t size, const ReadFn& read) { return decode(size, read, path); });
}

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  return with_file(path, [&](uint64_t size, const ReadFn& read) {
    uint64_t data_start = 0;
    return read_header(size, read, path, data_start).metadata;
  });
}

std::vector<SafetensorsEntry> read_safetensors_header(const std::string& path) {
  return with_file(path, [&](uint64_t size, const ReadFn& read) {
    uint64_t data_start = 0;
    std::vector<SafetensorsEntry> entries;
    for (const Entry& e : read_header(size, read, path, data_start).entries) entries.push_back({e.name, e.dtype, e.shape});
    return entries;
  });
}

std::string safetensors_to_bytes(const std::map<std::string, Tensor>& tensors,
                                 const std::map<std::string, std::string>& metadata) {
  check_savable(tensors, metadata);
  std::string out;
  encode(tensors, metadata, [&](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); });
  return out;
}

std::string save_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                             const std::map<std::string, std::string>& metadata) {
  check_savable(tensors, metadata);
  std::string digest;
  write_file_atomic_with(path, [&](const ByteSink& sink) { digest = encode(tensors, metadata, sink); });
  return digest;
}

}  // namespace gf
