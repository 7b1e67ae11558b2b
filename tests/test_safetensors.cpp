#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "tensor/io/atomic_file.h"
#include "tensor/io/safetensors.h"

using namespace gf;
namespace fs = std::filesystem;

namespace {

// A fresh scratch directory per test case, removed afterwards.
struct ScratchDir {
  fs::path dir;
  explicit ScratchDir(const std::string& tag) {
    dir = fs::path(GRADFLOW_BINARY_DIR) / ("test_safetensors_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~ScratchDir() { fs::remove_all(dir); }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file from a hand-written header and data section.
std::string raw_file(const std::string& header, const std::string& data = "") { return le64(header.size()) + header + data; }

std::string error_of(const std::string& bytes) {
  try {
    load_safetensors_from_bytes(bytes, "bad.safetensors");
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "<accepted>";
}

// Rejected with a runtime_error that names the file and contains `needle`.
void expect_rejected(const std::string& bytes, const std::string& needle) {
  std::string msg = error_of(bytes);
  INFO("message: " << msg);
  INFO("expected to contain: " << needle);
  CHECK(msg.find("safetensors: 'bad.safetensors': ") == 0);
  CHECK(msg.find(needle) != std::string::npos);
}

void check_same(const Tensor& a, const Tensor& b) {
  REQUIRE(a.defined());
  REQUIRE(b.defined());
  CHECK(a.dtype() == b.dtype());
  REQUIRE(a.shape() == b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) CHECK(a.flat_get(i) == b.flat_get(i));
}

std::map<std::string, Tensor> sample_tensors() {
  std::map<std::string, Tensor> m;
  m["w32"] = Tensor::of({1.5, -2.25, 3e-7, 1e30, -0.0, 7}, {2, 3}, DType::Float32);  // (2, 3)
  m["w64"] = Tensor::of({0.1, -1e-300, 3.141592653589793}, {3, 1}, DType::Float64);  // (3, 1)
  m["ids"] = Tensor::from_vector<int64_t>({0, -1, INT64_MAX, INT64_MIN}, {4});      // (4,)
  m["mask"] = Tensor::from_vector<bool>({true, false, false, true, true, false}, {1, 2, 3});  // (1, 2, 3)
  m["scalar"] = Tensor::scalar(42.5, DType::Float64);                                 // ()
  m["empty"] = Tensor::zeros({0, 3}, DType::Float32);                                 // (0, 3)
  m["empty_bool"] = Tensor::zeros({0}, DType::Bool);                                  // (0,)
  return m;
}

}  // namespace

TEST_CASE("round trip of F32/F64/I64/BOOL tensors, 0-d and empty ones, and metadata") {
  ScratchDir d("roundtrip");
  auto tensors = sample_tensors();
  std::map<std::string, std::string> meta{{"format", "pt"}, {"note", "ünïcode ✓"}, {"empty", ""}};
  save_safetensors(d / "a.safetensors", tensors, meta);
  SafetensorsFile f = load_safetensors(d / "a.safetensors");
  REQUIRE(f.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    INFO("tensor " << name);
    REQUIRE(f.tensors.count(name) == 1);
    check_same(t, f.tensors.at(name));
    CHECK(f.tensors.at(name).is_contiguous());
  }
  CHECK(f.metadata == meta);
  CHECK(d.names() == std::vector<std::string>{"a.safetensors"});  // no temporary file left behind

  // The bytes on disk are what safetensors_to_bytes produces, and loading those gives the same.
  std::string bytes = read_bytes(d / "a.safetensors");
  CHECK(bytes == safetensors_to_bytes(tensors, meta));
  CHECK(load_safetensors_from_bytes(bytes, "mem").tensors.size() == tensors.size());
}

TEST_CASE("written layout: padded header, tensors in name order, back to back") {
  std::map<std::string, Tensor> m;
  m["b"] = Tensor::of({1, 2}, {2}, DType::Float32);    // (2,)
  m["a"] = Tensor::of({3}, {1}, DType::Float64);       // (1,)
  std::string bytes = safetensors_to_bytes(m);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + 8 + 8);
  std::string header = bytes.substr(8, n);
  CHECK(header.find("\"a\":{\"data_offsets\":[0,8],\"dtype\":\"F64\",\"shape\":[1]}") != std::string::npos);
  CHECK(header.find("\"b\":{\"data_offsets\":[8,16],\"dtype\":\"F32\",\"shape\":[2]}") != std::string::npos);
  // The only metadata: the file's digest (no user metadata was given).
  CHECK(header.find("{\"__metadata__\":{\"gradflow.digest\":\"xxh3-64:") == 0);
  double a;
  float b[2];
  std::memcpy(&a, bytes.data() + 8 + n, 8);
  std::memcpy(b, bytes.data() + 8 + n + 8, 8);
  CHECK(a == 3.0);
  CHECK(b[0] == 1.0f);
  CHECK(b[1] == 2.0f);
}

TEST_CASE("a transposed (non-contiguous) tensor is saved in its logical row-major order") {
  Tensor base = Tensor::arange(6, DType::Float64).reshape({2, 3});  // (2, 3)
  Tensor t = base.transpose(0, 1);                                  // (3, 2) strided view
  REQUIRE_FALSE(t.is_contiguous());
  Tensor narrow = Tensor::arange(10, DType::Int64).reshape({2, 5}).narrow(1, 1, 3);  // (2, 3) offset view
  REQUIRE_FALSE(narrow.is_contiguous());
  SafetensorsFile f = load_safetensors_from_bytes(safetensors_to_bytes({{"t", t}, {"n", narrow}}), "mem");
  Tensor r = f.tensors.at("t");  // (3, 2)
  CHECK(r.shape() == Shape{3, 2});
  CHECK(r.at({0, 1}) == 3);
  CHECK(r.at({2, 0}) == 2);
  CHECK(r.at({2, 1}) == 5);
  check_same(t, r);
  check_same(narrow, f.tensors.at("n"));
  CHECK(f.tensors.at("n").at({1, 0}) == 6);
}

TEST_CASE("saving rejects undefined tensors and the reserved name") {
  CHECK_THROWS_WITH_AS(safetensors_to_bytes({{"x", Tensor()}}), "save_safetensors: tensor 'x' is undefined",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(safetensors_to_bytes({{"__metadata__", Tensor::zeros({1})}}),
                       doctest::Contains("'__metadata__' is reserved"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(safetensors_to_bytes({{"bad\xff", Tensor::zeros({1})}}), doctest::Contains("not valid UTF-8"),
                       std::invalid_argument);
}

TEST_CASE("malformed: file too short, header length beyond the file or absurd") {
  expect_rejected("", "file is 0 bytes, too short for the 8-byte header length");
  expect_rejected(std::string("\x05\x00\x00", 3), "file is 3 bytes, too short");
  expect_rejected(le64(100) + "{}", "header length 100 runs past the end of the file (only 2 bytes follow");
  // Far beyond the file and beyond any sane header: rejected before anything is allocated.
  expect_rejected(le64(~uint64_t{0}) + "{}", "header length 18446744073709551615 exceeds the limit");
  expect_rejected(le64(kSafetensorsMaxHeader + 1) + "{}", "exceeds the limit of 100000000 bytes");
}

TEST_CASE("malformed: bad JSON, non-object header, duplicate keys, deep nesting") {
  expect_rejected(raw_file("{\"a\": "), "header is not valid JSON");
  expect_rejected(raw_file(""), "header is not valid JSON");
  expect_rejected(raw_file("{} x"), "header is not valid JSON");
  expect_rejected(raw_file("{\"k\xff\": 1}"), "header is not valid JSON");  // invalid UTF-8
  expect_rejected(raw_file("[1, 2]   "), "header is a JSON array, not an object");
  expect_rejected(raw_file("\"str\""), "header is a JSON string, not an object");
  const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  expect_rejected(raw_file("{\"a\":" + e + ",\"a\":" + e + "}", std::string(4, '\0')), "duplicate key 'a'");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
                  "duplicate key 'dtype'");
  expect_rejected(raw_file("{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}"),
                  "nested more than 16 levels deep");
}

TEST_CASE("malformed: entries that are not objects or have missing / extra fields") {
  expect_rejected(raw_file(R"({"a": 5})"), "tensor 'a': entry is 5 (a number), not an object");
  expect_rejected(raw_file(R"({"a": {"dtype":"F32","data_offsets":[0,4]}})", std::string(4, '\0')),
                  "tensor 'a': missing field 'shape'");
  expect_rejected(raw_file(R"({"a": {"shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0')),
                  "tensor 'a': missing field 'dtype'");
  expect_rejected(raw_file(R"({"a": {"dtype":"F32","shape":[1]}})", std::string(4, '\0')),
                  "tensor 'a': missing field 'data_offsets'");
  expect_rejected(raw_file(R"({"a": {"dtype":"F32","shape":[1],"data_offsets":[0,4],"foo":1}})", std::string(4, '\0')),
                  "tensor 'a': unexpected field 'foo'");
}

TEST_CASE("malformed: dtype and shape") {
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offs = "[0,4]") {
    return raw_file("{\"t\":{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":" + offs + "}}",
                    std::string(4, '\0'));
  };
  expect_rejected(entry("\"F16\"", "[2]"), "tensor 't': unsupported dtype \"F16\" (gradflow reads F32, F64, I64, BOOL, BF16)");
  expect_rejected(entry("\"f32\"", "[1]"), "unsupported dtype \"f32\"");
  expect_rejected(entry("32", "[1]"), "tensor 't': dtype is 32, not a string");
  expect_rejected(entry("\"F32\"", "[1, -2]"), "tensor 't': shape dim 1 is -2, not a non-negative integer");
  expect_rejected(entry("\"F32\"", "[2.5]"), "tensor 't': shape dim 0 is 2.5, not a non-negative integer");
  expect_rejected(entry("\"F32\"", "[1.0]"), "shape dim 0 is 1.0, not a non-negative integer");
  expect_rejected(entry("\"F32\"", "[\"1\"]"), "shape dim 0 is \"1\", not a non-negative integer");
  expect_rejected(entry("\"F32\"", "[1e400]"), "header is not valid JSON");  // nlohmann: number overflow
  expect_rejected(entry("\"F32\"", "4"), "tensor 't': shape is 4, not an array");
  expect_rejected(entry("\"F32\"", "[9223372036854775808]"), "shape dim 0 is 9223372036854775808, too large");
  expect_rejected(entry("\"F32\"", "[4294967296, 4294967296, 4]"),
                  "tensor 't': element count of shape (4294967296, 4294967296, 4) overflows 64 bits");
  // numel fits but the byte count does not.
  expect_rejected(entry("\"F64\"", "[2305843009213693952]"), "byte size of shape (2305843009213693952,) overflows");
  // A zero dim does not excuse strides that would overflow.
  expect_rejected(entry("\"F32\"", "[0, 4294967296, 4294967296]", "[0,0]"), "overflows 64 bits");
}

TEST_CASE("malformed: data_offsets") {
  auto entry = [](const std::string& offs, size_t data = 8) {
    return raw_file("{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":" + offs + "}}", std::string(data, '\0'));
  };
  expect_rejected(entry("[0]"), "tensor 't': data_offsets is [0], not an array of two integers [begin, end]");
  expect_rejected(entry("[0, 4, 8]"), "not an array of two integers");
  expect_rejected(entry("{\"a\":0}"), "not an array of two integers");
  expect_rejected(entry("[0, \"8\"]"), "tensor 't': data_offsets[1] is \"8\", not a non-negative integer");
  expect_rejected(entry("[-8, 0]"), "data_offsets[0] is -8, not a non-negative integer");
  expect_rejected(entry("[0.0, 8]"), "data_offsets[0] is 0.0, not a non-negative integer");
  expect_rejected(entry("[8, 0]"), "tensor 't': data_offsets [8, 0] are out of order (begin > end)");
  expect_rejected(entry("[0, 800]"), "data_offsets [0, 800] run past the end of the data section (8 bytes)");
  expect_rejected(entry("[18446744073709551608, 18446744073709551615]"), "run past the end of the data section");
  expect_rejected(entry("[0, 4]"), "data_offsets [0, 4] span 4 bytes but F32 shape (2,) needs 8 bytes");
}

TEST_CASE("malformed: overlaps, holes and trailing bytes in the data section") {
  auto two = [](const std::string& a, const std::string& b, size_t data) {
    return raw_file("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":" + a +
                        "},\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":" + b + "}}",
                    std::string(data, '\0'));
  };
  expect_rejected(two("[0,4]", "[0,4]", 4), "tensors 'a' [0, 4] and 'b' [0, 4] overlap");
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           std::string(12, '\0')),
                  "tensors 'a' [0, 8] and 'b' [4, 12] overlap");
  expect_rejected(two("[0,4]", "[8,12]", 12), "hole in the data section: bytes [4, 8) before tensor 'b' [8, 12]");
  expect_rejected(two("[4,8]", "[8,12]", 12), "hole in the data section: bytes [0, 4) before tensor 'a' [4, 8]");
  expect_rejected(two("[0,4]", "[4,8]", 12), "hole in the data section: the last 4 bytes belong to no tensor");
  expect_rejected(raw_file("{}", "xyz"), "the last 3 bytes belong to no tensor");
  // An empty tensor inside another one is an overlap too.
  expect_rejected(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                           std::string(8, '\0')),
                  "overlap");
  // Both tensors reversed in the file and an empty tensor at a boundary are fine.
  SafetensorsFile ok = load_safetensors_from_bytes(
      raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"e":{"dtype":"BOOL","shape":[0,5],"data_offsets":[4,4]}})",
               std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8)),
      "ok");
  CHECK(ok.tensors.at("a").item() == 2.0);
  CHECK(ok.tensors.at("b").item() == 1.0);
  CHECK(ok.tensors.at("e").shape() == Shape{0, 5});
  CHECK(load_safetensors_from_bytes(raw_file("{}        "), "ok").tensors.empty());
}

TEST_CASE("malformed: __metadata__ and BOOL bytes") {
  expect_rejected(raw_file(R"({"__metadata__":{"k":1}})"), "__metadata__ value for 'k' is 1, not a string");
  expect_rejected(raw_file(R"({"__metadata__":{"k":"v","n":null}})"), "__metadata__ value for 'n' is null, not a string");
  expect_rejected(raw_file(R"({"__metadata__":["k"]})"), "__metadata__ is [\"k\"], not an object of strings");
  expect_rejected(raw_file(R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x02\x00", 3)),
                  "tensor 'm': BOOL element 1 is byte 2, not 0 or 1");
  auto f = load_safetensors_from_bytes(
      raw_file(R"({"__metadata__":{"k":"v"},"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})",
               std::string("\x01\x00\x01", 3)),
      "ok");
  CHECK(f.metadata.at("k") == "v");
  CHECK(f.tensors.at("m").to_vector<bool>() == std::vector<bool>{true, false, true});
}

TEST_CASE("load_safetensors: unreadable paths name the file and the reason") {
  ScratchDir d("paths");
  CHECK_THROWS_WITH_AS(load_safetensors(d / "missing.safetensors"),
                       doctest::Contains("missing.safetensors': cannot open: No such file or directory"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(load_safetensors(d.dir.string()), doctest::Contains("not a regular file"), std::runtime_error);
  write_file_atomic(d / "trunc.safetensors", safetensors_to_bytes(sample_tensors()).substr(0, 100));
  CHECK_THROWS_WITH_AS(load_safetensors(d / "trunc.safetensors"), doctest::Contains("trunc.safetensors': header length"),
                       std::runtime_error);
}

TEST_CASE("a real file written by PyTorch's tooling: parity case linear.safetensors") {
  // The copy committed with the other parity cases, so this runs on every machine.
  const std::string path = (fs::path(GRADFLOW_SOURCE_DIR) / "tests/parity/standard/linear.safetensors").string();
  REQUIRE_MESSAGE(fs::exists(path), path << " is missing from the repository");
  SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata.count("case") == 1);
  CHECK(f.metadata["case"].find("\"linear\"") != std::string::npos);
  REQUIRE(f.tensors.count("param.weight") == 1);
  REQUIRE(f.tensors.count("in.input") == 1);
  const Tensor& w = f.tensors.at("param.weight");  // (out, in)
  const Tensor& x = f.tensors.at("in.input");      // (B, L, in)
  CHECK(w.dtype() == DType::Float64);
  CHECK(w.ndim() == 2);
  CHECK(x.ndim() == 3);
  CHECK(x.shape().back() == w.shape()[1]);
  CHECK(f.tensors.at("param.bias").shape() == Shape{w.shape()[0]});
  for (const auto& [name, t] : f.tensors)
    for (int64_t i = 0; i < t.numel(); ++i) REQUIRE(std::isfinite(t.flat_get(i)));
  // Loading the file and writing it back gives a file that loads to the same tensors.
  SafetensorsFile again = load_safetensors_from_bytes(safetensors_to_bytes(f.tensors, f.metadata), "rewritten");
  for (const auto& [name, t] : f.tensors) check_same(t, again.tensors.at(name));

  // Every other committed case file parses too (they hold F64, I64 and BOOL tensors).
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(GRADFLOW_SOURCE_DIR) / "tests/parity"))
    if (e.path().extension() == ".safetensors") {
      INFO("file " << e.path());
      CHECK_NOTHROW(load_safetensors(e.path().string()));
      ++files;
    }
  CHECK(files >= 30);
  MESSAGE("parsed " << files << " parity case files");
}

TEST_CASE("atomic write: a failure mid-write leaves the old file intact and loadable") {
  ScratchDir d("atomic");
  const std::string path = d / "model.safetensors";
  auto old_tensors = sample_tensors();
  save_safetensors(path, old_tensors, {{"version", "1"}});
  const std::string old_bytes = read_bytes(path);

  // The producer dies half-way through writing the new content.
  std::string new_bytes = safetensors_to_bytes({{"x", Tensor::ones({1000}, DType::Float64)}});
  CHECK_THROWS_WITH_AS(write_file_atomic_with(path,
                                              [&](const ByteSink& sink) {
                                                sink(new_bytes.data(), new_bytes.size() / 2);
                                                throw std::runtime_error("injected failure");
                                              }),
                       "injected failure", std::runtime_error);
  CHECK(read_bytes(path) == old_bytes);
  CHECK(d.names() == std::vector<std::string>{"model.safetensors"});  // the temporary file is gone

  // save_safetensors refuses bad input before touching the file.
  CHECK_THROWS_AS(save_safetensors(path, {{"a", Tensor::zeros({2})}, {"b", Tensor()}}), std::invalid_argument);
  CHECK(read_bytes(path) == old_bytes);

  // A failing rename (the target is a directory) reports path and errno text, and cleans up.
  const std::string dir_target = d / "adir";
  fs::create_directories(fs::path(dir_target) / "inside");
  try {
    write_file_atomic(dir_target, "data");
    FAIL("expected an exception");
  } catch (const std::runtime_error& e) {
    std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find("write_file_atomic: '" + dir_target + "': cannot rename temporary file") == 0);
    CHECK(msg.find("Is a directory") != std::string::npos);
  }
  CHECK(d.names() == std::vector<std::string>{"adir", "model.safetensors"});

  // A missing directory: the temporary file cannot even be created.
  CHECK_THROWS_WITH_AS(write_file_atomic(d / "no/such/dir/f.bin", "x"),
                       doctest::Contains("f.bin': cannot create temporary file"), std::runtime_error);
  CHECK_THROWS_WITH_AS(write_file_atomic(d / "no/such/dir/f.bin", "x"), doctest::Contains("No such file or directory"),
                       std::runtime_error);

  // The old file still loads to the old tensors; a successful write then replaces it.
  SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata.at("version") == "1");
  for (const auto& [name, t] : old_tensors) check_same(t, f.tensors.at(name));
  save_safetensors(path, {{"x", Tensor::ones({1000}, DType::Float64)}});
  CHECK(read_bytes(path) == new_bytes);
  CHECK(d.names() == std::vector<std::string>{"adir", "model.safetensors"});
}

TEST_CASE("atomic write: large streamed content and many small chunks arrive intact") {
  ScratchDir d("stream");
  std::string expect;
  std::mt19937 rng(7);
  write_file_atomic_with(d / "big.bin", [&](const ByteSink& sink) {
    for (int i = 0; i < 300; ++i) {
      std::string chunk(rng() % (i % 10 == 0 ? 200000 : 50), '\0');
      for (char& c : chunk) c = static_cast<char>(rng());
      expect += chunk;
      sink(chunk.data(), chunk.size());
    }
  });
  CHECK(read_bytes(d / "big.bin") == expect);
  write_file_atomic(d / "empty.bin", "");
  CHECK(fs::file_size(d / "empty.bin") == 0);
}

// A pid that belonged to a process of this machine which has ended (and been reaped).
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(::kill(child, 0) != 0);
  return child;
}

TEST_CASE("abandoned temporary files: only this host's dead writers' are removed (shared file systems, issue 36)") {
  ScratchDir d("tempfiles");
  const std::string me = temp_file_host(), dead = std::to_string(dead_pid()), alive = std::to_string(::getpid());
  REQUIRE(!me.empty());
  CHECK(me.find('.') == std::string::npos);
  // What a writer killed mid-file leaves: a partial file whose name records this host and its pid.
  const pid_t writer = ::fork();
  if (writer == 0) {
    struct KillAfterOneByte : WriteFaults {
      Verdict before_write(size_t) override { return {1, Then::Kill}; }
    } kill_it;
    set_write_faults(&kill_it);
    write_file_atomic(d / "w.bin", "xyz");
    ::_exit(1);  // not reached: the fault kills the process inside the write
  }
  REQUIRE(writer > 0);
  int status = 0;
  REQUIRE(::waitpid(writer, &status, 0) == writer);
  REQUIRE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL));
  const std::string left = ".w.bin.tmp-" + me + "-" + std::to_string(writer) + "-";
  REQUIRE(d.names().size() == 1);
  CHECK(d.names()[0].rfind(left, 0) == 0);
  auto touch = [&](const std::string& name) { std::ofstream(d / name) << "partial"; };
  // Another machine on the same NFS folder: its pid means nothing here, alive or not. A host
  // name may be all digits, so one equal to a dead pid must not read as the old "<pid>-<n>".
  const std::vector<std::string> kept = {".model.safetensors.tmp-node7-" + dead + "-0", ".model.safetensors.tmp-" + dead + "-" + dead + "-3",
                                         ".state.json.tmp-ip-10-0-0-7-" + dead + "-12", ".state.json.tmp-" + me + "-" + alive + "-1",
                                         ".old.json.tmp-" + dead + "-0", "model.safetensors"};
  const std::vector<std::string> removed = {d.names()[0], ".model.safetensors.tmp-" + me + "-" + dead + "-0",
                                            ".a.tmp-b.json.tmp-" + me + "-" + dead + "-7"};
  for (const std::string& n : kept) touch(n);
  for (const std::string& n : removed) touch(n);
  CHECK(remove_abandoned_temp_files(d.dir.string()) == removed.size());
  std::vector<std::string> expect = kept;
  std::sort(expect.begin(), expect.end());
  CHECK(d.names() == expect);
}

TEST_CASE("fuzz: random mutations of a valid file are either loaded or rejected cleanly") {
  auto tensors = sample_tensors();
  const std::string valid = safetensors_to_bytes(tensors, {{"k", "v"}});
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>(valid[i]);
  std::mt19937_64 rng(12345);
  auto below = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  int accepted = 0, rejected = 0, other = 0, changed_but_accepted = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string b = valid;
    int kind = static_cast<int>(rng() % 6);
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      switch (kind) {
        case 0:  // flip a byte anywhere
          if (!b.empty()) b[below(b.size())] ^= static_cast<char>(1 + rng() % 255);
          break;
        case 1:  // overwrite a header byte with a JSON-significant character
          if (b.size() > 8) {
            const char syms[] = "{}[]\":,-.0123456789eE \x80\xff";
            b[8 + below(std::min<uint64_t>(b.size() - 8, header_len))] = syms[below(sizeof(syms) - 1)];
          }
          break;
        case 2:  // truncate
          b.resize(below(b.size() + 1));
          break;
        case 3: {  // edit the header length, small and large
          uint64_t n = rng() % 2 ? header_len + (rng() % 33) - 16 : rng() >> below(64);
          if (b.size() >= 8) std::memcpy(b.data(), le64(n).data(), 8);
          break;
        }
        case 4:  // insert or delete bytes
          if (rng() % 2) b.insert(below(b.size() + 1), std::string(1 + below(8), static_cast<char>(rng())));
          else if (!b.empty()) {
            size_t at = below(b.size());
            b.erase(at, 1 + below(std::min<uint64_t>(8, b.size() - at)));
          }
          break;
        case 5:  // change a digit in the header (shapes and offsets)
          for (int tries = 0; tries < 50 && b.size() > 8; ++tries) {
            size_t at = 8 + below(std::min<uint64_t>(b.size() - 8, header_len));
            if (b[at] >= '0' && b[at] <= '9') {
              b[at] = static_cast<char>('0' + rng() % 10);
              break;
            }
          }
          break;
      }
    }
    try {
      SafetensorsFile f = load_safetensors_from_bytes(b, "fuzz");
      ++accepted;
      // A file whose digest key itself was damaged loads as another writer's file, unverified;
      // state.json's copy of the digest catches that for checkpoints (train/run/checkpoint.h).
      if (!f.digest.empty() && safetensors_to_bytes(f.tensors, f.metadata) != valid) ++changed_but_accepted;
      for (const auto& [name, t] : f.tensors) CHECK(static_cast<uint64_t>(t.nbytes()) <= b.size());
    } catch (const std::runtime_error&) {
      ++rejected;
    } catch (const std::invalid_argument&) {
      ++rejected;
    } catch (...) {
      ++other;
    }
  }
  MESSAGE("fuzz: " << accepted << " accepted, " << rejected << " rejected");
  CHECK(other == 0);
  CHECK(rejected > 1000);
  CHECK(changed_but_accepted == 0);  // the digest: any change to what it covers is refused
}

namespace {
// A copy of `bytes` with one bit of byte `at` flipped.
std::string flip_bit(std::string bytes, size_t at) {
  bytes.at(at) ^= 0x10;
  return bytes;
}
uint64_t header_length(const std::string& bytes) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return n;
}
}  // namespace

TEST_CASE("digest: a flipped bit anywhere in the data or the header's values is refused by name (issue 36)") {
  const std::string valid = safetensors_to_bytes(sample_tensors(), {{"config", "{\"d_model\": 32}"}});
  const SafetensorsFile ok = load_safetensors_from_bytes(valid, "ok");
  CHECK(ok.digest.rfind("xxh3-64:", 0) == 0);
  CHECK(ok.metadata == std::map<std::string, std::string>{{"config", "{\"d_model\": 32}"}});  // the digest is not metadata
  const uint64_t n = header_length(valid);
  // Every byte of the data section: one flipped bit is a different tensor value, and refused.
  for (size_t at = 8 + n; at < valid.size(); ++at) {
    CAPTURE(at);
    CHECK_THROWS_WITH_AS(load_safetensors_from_bytes(flip_bit(valid, at), "weights.safetensors"),
                         doctest::Contains("safetensors: 'weights.safetensors': the contents hash to xxh3-64:"), std::runtime_error);
  }
  // A metadata value and the digest itself.
  const size_t cfg = valid.find("d_model"), dig = valid.find("xxh3-64:") + 10;
  CHECK_THROWS_WITH_AS(load_safetensors_from_bytes(flip_bit(valid, cfg), "m"), doctest::Contains("damaged or changed after it was written"),
                       std::runtime_error);
  CHECK_THROWS_WITH_AS(load_safetensors_from_bytes(flip_bit(valid, dig), "m"), doctest::Contains("but the header records xxh3-64:"),
                       std::runtime_error);
  // The key is the writer's own.
  CHECK_THROWS_WITH_AS(safetensors_to_bytes(sample_tensors(), {{"gradflow.digest", "x"}}), doctest::Contains("reserved for the file's digest"),
                       std::invalid_argument);
}

TEST_CASE("digest: a file from another writer, without one, loads unverified") {
  const std::string plain = raw_file(R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  const SafetensorsFile f = load_safetensors_from_bytes(plain, "torch");
  CHECK(f.digest.empty());
  CHECK(f.metadata.at("format") == "pt");
  CHECK(f.tensors.at("x").item() == 0.0);
}
