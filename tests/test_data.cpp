// The translator's data layer: UTF-8 handling, reading parallel text, vocabularies and
// length-bucketed batching.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include "train/data/batching.h"
#include "train/data/line_reader.h"
#include "train/data/parallel_text.h"
#include "train/data/utf8.h"
#include "train/data/vocab.h"

using namespace gf::train;
namespace fs = std::filesystem;

namespace {

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("gf_test_data_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return path / name;
  }
};

// `bytes` bytes of 'x' and no '\n', written in 1 MiB pieces.
fs::path write_one_line(const TempDir& dir, const std::string& name, size_t bytes) {
  const std::string piece(size_t{1} << 20, 'x');
  std::ofstream out(dir.path / name, std::ios::binary);
  for (size_t left = bytes; left > 0; left -= std::min(left, piece.size())) out.write(piece.data(), static_cast<std::streamsize>(std::min(left, piece.size())));
  REQUIRE(out.good());
  return dir.path / name;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every line of a reader; a line it refuses becomes "<error: message>".
std::vector<std::string> all_lines(LineReader& in) {
  std::vector<std::string> out;
  for (;;) {
    std::string line;
    try {
      if (!in.next(line)) return out;
      out.push_back(line);
    } catch (const std::invalid_argument& e) {
      out.push_back(std::string("<error: ") + e.what() + ">");
    }
  }
}

// doctest::Contains from a std::string (it copies the text).
doctest::Contains contains(const std::string& text) { return doctest::Contains(text.c_str()); }

Tokens toks(std::initializer_list<const char*> ws) { return Tokens(ws.begin(), ws.end()); }

EncodedPair pair_of(size_t src_len, size_t tgt_len) {
  return {std::vector<int64_t>(src_len, 7), std::vector<int64_t>(tgt_len, 9)};
}

}  // namespace

TEST_CASE("utf8: strict validation and Python-style whitespace splitting") {
  CHECK(utf8::is_valid("plain ascii"));
  CHECK(utf8::is_valid("학생 은 é ✓ 😀"));
  CHECK(utf8::find_invalid("ab\xff") == 2);
  CHECK(utf8::find_invalid("\xc0\x80") == 0);          // overlong NUL
  CHECK(utf8::find_invalid("a\xed\xa0\x80") == 1);     // UTF-16 surrogate
  CHECK(utf8::find_invalid("\xf4\x90\x80\x80") == 0);  // past U+10FFFF
  CHECK(utf8::find_invalid("x\xe4\xb8") == 1);         // truncated
  CHECK(utf8::find_invalid("\x80") == 0);              // stray continuation byte
  CHECK(utf8::decode("한a") == std::u32string{0xD55C, 'a'});
  CHECK(utf8::encode(U"한a😀") == "한a😀");
  CHECK_THROWS_WITH_AS(utf8::decode("ok\xfe"), contains("invalid UTF-8 at byte 2"), std::invalid_argument);

  // str.split() splits on Unicode whitespace (no-break space, ideographic space, \x1c...) too.
  CHECK(utf8::split_whitespace("  a\tb\u00a0c\u3000d\x1c" "e\r\n") == toks({"a", "b", "c", "d", "e"}));
  CHECK(utf8::split_whitespace(" \t ").empty());
  CHECK(utf8::split_whitespace("한국어 를") == toks({"한국어", "를"}));
}

TEST_CASE("read_parallel: two aligned files, CRLF, BOM, no final newline, empty lines skipped") {
  TempDir dir("read");
  dir.write("train.de", "\xEF\xBB\xBF" "ein hund .\r\nzwei  katzen\r\n\r\nletzte zeile");
  dir.write("train.en", "a dog .\ntwo cats\nnot empty\nlast line\n");
  const ParallelText t = read_parallel_dir(dir.path, "train", "de", "en");
  CHECK(t.stats.lines == 4);
  CHECK(t.stats.kept == 3);
  CHECK(t.stats.skipped_empty == 1);
  REQUIRE(t.pairs.size() == 3);
  CHECK(t.pairs[0].first == toks({"ein", "hund", "."}));
  CHECK(t.pairs[0].second == toks({"a", "dog", "."}));
  CHECK(t.pairs[1].first == toks({"zwei", "katzen"}));
  CHECK(t.pairs[2].first == toks({"letzte", "zeile"}));
  CHECK(t.pairs[2].second == toks({"last", "line"}));
}

TEST_CASE("read_parallel: errors name the file and the line") {
  TempDir dir("errors");
  const fs::path a = dir.write("a.en", "one\ntwo\nthree\n");
  const fs::path b = dir.write("a.ko", "하나\n둘\n");
  CHECK_THROWS_WITH_AS(read_parallel_files(a, b),
                       contains(fmt::format("'{}' has 3 lines but '{}' has 2 lines", a.string(), b.string())),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(read_parallel_dir(dir.path, "a", "en", "xx"),
                       contains((dir.path / "a.xx").string() + "' does not exist"), std::runtime_error);
  CHECK_THROWS_AS(read_parallel_files(dir.path, b), std::runtime_error);  // a directory

  const fs::path bad = dir.write("bad.en", "fine\nstill fine\nbroken \xff byte\n");
  const fs::path ok = dir.write("ok.ko", "1\n2\n3\n");
  CHECK_THROWS_WITH_AS(read_parallel_files(bad, ok),
                       contains(bad.string() + ":3: invalid UTF-8 at byte 8 (0xff)"), std::invalid_argument);
}

TEST_CASE("LineReader: a 200 MB line without a newline is refused after about 1 MiB, naming the file and line") {
  TempDir dir("endless");
  const fs::path file = write_one_line(dir, "endless.txt", size_t{200} << 20);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  LineReader in(fd, file.string());
  std::string line;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH_AS(in.next(line), contains(file.string() + ":1: line is longer than 1048576 bytes (the limit; --max-line-bytes raises it)"),
                       std::invalid_argument);
  MESSAGE("refused the 200 MB line in ", seconds_since(t0), " s");
  const off_t read_so_far = ::lseek(fd, 0, SEEK_CUR);
  MESSAGE("bytes read before the refusal: ", read_so_far);
  CHECK(read_so_far <= static_cast<off_t>(kMaxLineBytes + (size_t{2} << 16)));  // the limit and a read's worth, not 200 MB
  // Going on drops the rest of that line: the file then has nothing more.
  CHECK_FALSE(in.next(line));
  CHECK(in.lines() == 1);
  ::close(fd);
}

TEST_CASE("LineReader: a line of exactly the limit is accepted, one byte more is refused, and reading goes on after it") {
  TempDir dir("limit");
  const std::string at(100, 'a'), over(101, 'b'), long_one(200000, 'c');  // longer than a 64 KiB read
  const std::string text = at + "\n" + over + "\r\n" + at + "\r\n" + long_one + "\n" + "\xEF\xBB\xBF" + "after\n";
  const std::vector<std::string> expected = {at, "<error: f.txt:2: line is longer than 100 bytes (the limit; --max-line-bytes raises it)>", at,
                                             "<error: f.txt:4: line is longer than 100 bytes (the limit; --max-line-bytes raises it)>",
                                             "\xEF\xBB\xBF" "after"};  // a BOM only counts as one on line 1
  {  // in memory
    LineReader in(text, "f.txt", 100);
    CHECK(all_lines(in) == expected);
    CHECK(in.lines() == 5);
  }
  {  // from a file, read in 64 KiB pieces: line 4 is refused before its end has arrived
    const fs::path file = dir.write("f.txt", text);
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    LineReader in(fd, "f.txt", 100);
    CHECK(all_lines(in) == expected);
    CHECK(in.lines() == 5);
    ::close(fd);
  }
  {  // a BOM and a '\r' are not part of the line
    const std::string framed = "\xEF\xBB\xBF" + at + "\r\n";
    LineReader in(framed, "g.txt", 100);
    CHECK(all_lines(in) == std::vector<std::string>{at});
  }
}

TEST_CASE("LineReader: a 64 MiB line is read in one pass (the limit raised)") {
  TempDir dir("long");
  const size_t n = size_t{64} << 20;
  const fs::path file = write_one_line(dir, "long.txt", n);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  LineReader in(fd, file.string(), n);
  std::string line;
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(in.next(line));
  // Rescanning the line from its start after every 64 KiB read would look at 1024 * 32 MiB on
  // average, 32 GiB: minutes, not this.
  MESSAGE("read a 64 MiB line in ", seconds_since(t0), " s");
  CHECK(line.size() == n);
  CHECK_FALSE(in.next(line));
  ::close(fd);
}

TEST_CASE("read_parallel_tsv: source<TAB>target lines") {
  TempDir dir("tsv");
  const fs::path good = dir.write("good.tsv", "i am a student .\t저 는 학생 입니다 .\r\n\nhello\tworld\n \t x\n");
  const ParallelText t = read_parallel_tsv(good);
  CHECK(t.stats.lines == 4);
  CHECK(t.stats.skipped_empty == 2);  // the blank line and the one with an empty source
  REQUIRE(t.pairs.size() == 2);
  CHECK(t.pairs[0].first == toks({"i", "am", "a", "student", "."}));
  CHECK(t.pairs[0].second == toks({"저", "는", "학생", "입니다", "."}));
  CHECK(t.pairs[1].second == toks({"world"}));

  const fs::path no_tab = dir.write("no_tab.tsv", "a\tb\nno tab here\n");
  CHECK_THROWS_WITH_AS(read_parallel_tsv(no_tab), contains(no_tab.string() + ":2: no tab"),
                       std::invalid_argument);
  const fs::path two_tabs = dir.write("two_tabs.tsv", "a\tb\tc\n");
  CHECK_THROWS_WITH_AS(read_parallel_tsv(two_tabs), contains(two_tabs.string() + ":1: more than one tab"),
                       std::invalid_argument);
  const fs::path bad = dir.write("bad.tsv", "a\tb\n\xc3\x28\tx\n");
  CHECK_THROWS_WITH_AS(read_parallel_tsv(bad), contains(bad.string() + ":2: invalid UTF-8 at byte 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(read_parallel_tsv(dir.path / "missing.tsv"),
                       contains("read_parallel_tsv: '" + (dir.path / "missing.tsv").string()),
                       std::runtime_error);
}

TEST_CASE("vocab: specials, min_freq and the reference's (-count, word) order") {
  const std::vector<Tokens> sents = {toks({"b", "a", "c", "한"}), toks({"a", "b", "d", "한"}), toks({"a", "e", "B"}),
                                     toks({"B", "z", "z"})};
  // counts: a 3, b 2, B 2, z 2, 한 2, c 1, d 1, e 1
  const Vocab v = Vocab::build(sents, 2);
  CHECK(v.tokens() == std::vector<std::string>{"<pad>", "<unk>", "<bos>", "<eos>", "a", "B", "b", "z", "한"});
  CHECK(Vocab::kPad == 0);
  CHECK(v.id("<pad>") == 0);
  CHECK(v.id("<unk>") == 1);
  CHECK(v.id("<bos>") == 2);
  CHECK(v.id("<eos>") == 3);
  CHECK(v.id("a") == 4);
  CHECK(v.id("c") == Vocab::kUnk);  // seen once: below min_freq
  CHECK_FALSE(v.contains("c"));

  const Vocab all = Vocab::build(sents, 1);
  CHECK(all.size() == 4 + 8);
  CHECK(all.tokens().back() == "e");  // count 1, after c and d
  CHECK(all.id("c") == 9);

  const Vocab none = Vocab::build(sents, 10);
  CHECK(none.size() == 4);

  // Source and target sides of parallel text; literal specials in the text are not duplicated.
  const std::vector<TokenPair> pairs = {{toks({"x", "<unk>"}), toks({"y"})}, {toks({"x", "<unk>"}), toks({"y", "y"})}};
  CHECK(Vocab::build_source(pairs).tokens() == std::vector<std::string>{"<pad>", "<unk>", "<bos>", "<eos>", "x"});
  CHECK(Vocab::build_target(pairs).tokens() == std::vector<std::string>{"<pad>", "<unk>", "<bos>", "<eos>", "y"});
}

TEST_CASE("vocab: encode and decode") {
  const Vocab v = Vocab::build({toks({"the", "dog", "."}), toks({"the", "dog", "."})}, 2);
  const std::vector<int64_t> ids = v.encode(toks({"the", "cat", "."}));
  CHECK(ids == std::vector<int64_t>{v.id("the"), Vocab::kUnk, v.id(".")});
  const std::vector<int64_t> out = {Vocab::kBos, v.id("the"), Vocab::kPad, v.id("dog"), Vocab::kEos, v.id(".")};
  CHECK(v.decode(out) == toks({"the", "dog"}));
  CHECK(v.decode_text(out) == "the dog");
  CHECK(v.decode_text(std::vector<int64_t>{Vocab::kUnk}) == "<unk>");
  CHECK_THROWS_WITH_AS(v.token(99), contains("id 99 is outside [0, 7)"), std::out_of_range);
  CHECK_THROWS_AS(v.decode(std::vector<int64_t>{-1}), std::out_of_range);
}

TEST_CASE("vocab: save and load round trip, atomically") {
  TempDir dir("vocab");
  const Vocab v = Vocab::build({toks({"학생", "은", "a"}), toks({"학생", "은", "b"}), toks({"a", "é"})}, 1);
  const fs::path file = dir.path / "vocab.txt";
  v.save(file);
  const Vocab back = Vocab::load(file);
  CHECK(back.tokens() == v.tokens());
  CHECK(back.id("학생") == v.id("학생"));
  // Saving again over the file replaces it and leaves no temporary file behind.
  Vocab().save(file);
  CHECK(Vocab::load(file).size() == 4);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.path)) ++files;
  CHECK(files == 1);
  CHECK_THROWS_AS(v.save(dir.path / "no_such_dir" / "vocab.txt"), std::runtime_error);
}

TEST_CASE("vocab: load errors name the file and the line") {
  TempDir dir("vocab_bad");
  const fs::path wrong_special = dir.write("a.txt", "<pad>\n<bos>\n<unk>\n<eos>\nx\n");
  CHECK_THROWS_WITH_AS(Vocab::load(wrong_special),
                       contains(wrong_special.string() + ":2: expected '<unk>', found '<bos>'"),
                       std::invalid_argument);
  const fs::path dup = dir.write("b.txt", "<pad>\n<unk>\n<bos>\n<eos>\nx\ny\nx\n");
  CHECK_THROWS_WITH_AS(Vocab::load(dup), contains(dup.string() + ":7: duplicate token 'x' (first on line 5)"),
                       std::invalid_argument);
  const fs::path empty = dir.write("c.txt", "<pad>\n<unk>\n<bos>\n<eos>\nx\n\ny\n");
  CHECK_THROWS_WITH_AS(Vocab::load(empty), contains(empty.string() + ":6: empty token"),
                       std::invalid_argument);
  const fs::path space = dir.write("d.txt", "<pad>\n<unk>\n<bos>\n<eos>\nx y\n");
  CHECK_THROWS_WITH_AS(Vocab::load(space), contains(space.string() + ":5: token contains whitespace"),
                       std::invalid_argument);
  const fs::path bad = dir.write("e.txt", "<pad>\n<unk>\n<bos>\n<eos>\n\xff\n");
  CHECK_THROWS_WITH_AS(Vocab::load(bad), contains(bad.string() + ":5: invalid UTF-8"), std::invalid_argument);
  const fs::path short_file = dir.write("f.txt", "<pad>\n<unk>\n");
  CHECK_THROWS_WITH_AS(Vocab::load(short_file), contains(short_file.string() + ":3: file ends before"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Vocab::load(dir.path / "missing.txt"), contains("Vocab::load: '"), std::runtime_error);
  const fs::path crlf = dir.write("g.txt", "<pad>\r\n<unk>\r\n<bos>\r\n<eos>\r\nx\r\n");
  CHECK(Vocab::load(crlf).id("x") == 4);

  CHECK_THROWS_WITH_AS(Vocab(std::vector<std::string>{"<pad>", "<unk>"}), contains("token 2 must be '<bos>'"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(Vocab(std::vector<std::string>{"<pad>", "<unk>", "<bos>", "<eos>", "a", "a"}),
                       contains("token 5 'a' duplicates token 4"), std::invalid_argument);
}

TEST_CASE("batching: the reference's greedy cut, worked by hand") {
  // (src, tgt) lengths, indices 0..5; sorted by (src, tgt), stable: 3 (1,1), 1 (2,1), 4 (2,1), 0 (2,3),
  // 5 (4,2), 2 (5,5). With max_tokens 20 (tgt counts +2):
  //   [3]: 1*(1+3)=4; +1: 2*(2+3)=10; +4: 3*(2+3)=15; +0: 4*(2+5)=28 > 20 -> cut
  //   [0]: 1*(2+5)=7; +5: 2*(4+5)=18; +2: 3*(5+7)=36 > 20 -> cut
  //   [2]: 1*(5+7)=12
  const std::vector<EncodedPair> pairs = {pair_of(2, 3), pair_of(2, 1), pair_of(5, 5),
                                          pair_of(1, 1), pair_of(2, 1), pair_of(4, 2)};
  const auto buckets = bucket_by_length(pairs, {0, 1, 2, 3, 4, 5}, 20);
  CHECK(buckets == std::vector<std::vector<size_t>>{{3, 1, 4}, {0, 5}, {2}});
  // Exactly max_tokens still fits: 3 * (2 + 5) = 21.
  const std::vector<EncodedPair> same(4, pair_of(2, 3));
  CHECK(bucket_by_length(same, {0, 1, 2, 3}, 21) == std::vector<std::vector<size_t>>{{0, 1, 2}, {3}});
  // A pair too big for max_tokens still gets a batch of its own.
  CHECK(bucket_by_length(pairs, {2, 3}, 5) == std::vector<std::vector<size_t>>{{3}, {2}});
  CHECK_THROWS_WITH_AS(bucket_by_length(pairs, {0}, 0), contains("max_tokens 0 < 1"), std::invalid_argument);
}

TEST_CASE("batching: collate pads source and wraps the target in <bos> ... <eos>") {
  const std::vector<EncodedPair> pairs = {{{11, 12, 13}, {21}}, {{14}, {22, 23, 24}}};
  const std::vector<size_t> idx = {0, 1};
  const Batch b = collate(pairs, idx);
  CHECK(b.rows == 2);
  CHECK(b.src_len == 3);
  CHECK(b.tgt_len == 5);
  CHECK(b.src == std::vector<int64_t>{11, 12, 13, 14, 0, 0});
  CHECK(b.tgt == std::vector<int64_t>{2, 21, 3, 0, 0, 2, 22, 23, 24, 3});
  CHECK(b.indices == idx);
  CHECK(b.src_tokens == 4);
  CHECK(b.tgt_tokens == 2 + 4);
  CHECK(b.padded_tokens() == 2 * (3 + 5));
  CHECK_THROWS_WITH_AS(collate(pairs, std::vector<size_t>{}), contains("collate: empty batch"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(collate(pairs, std::vector<size_t>{5}), contains("pair index 5 is out of range for 2"),
                       std::invalid_argument);
}

TEST_CASE("batching: token cap, every pair once per epoch, seeded shuffle") {
  std::vector<EncodedPair> pairs;
  uint64_t x = 12345;
  for (int i = 0; i < 3000; ++i) {  // lengths 1..30 from a small LCG
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    pairs.push_back(pair_of(1 + (x >> 33) % 30, 1 + (x >> 45) % 30));
  }
  pairs.push_back(pair_of(0, 3));   // empty source: skipped
  pairs.push_back(pair_of(80, 3));  // too long: skipped
  const BatchPlan plan(pairs, 600, 64);
  CHECK(plan.skipped_empty() == 1);
  CHECK(plan.skipped_too_long() == 1);
  CHECK(plan.pairs_used() == 3000);
  CHECK(plan.max_tokens() == 600);

  std::vector<int> seen(pairs.size(), 0);
  for (size_t b = 0; b < plan.size(); ++b) {
    const Batch batch = plan.batch(b);
    CHECK(batch.padded_tokens() <= 600);
    CHECK(batch.src.size() == static_cast<size_t>(batch.rows * batch.src_len));
    CHECK(batch.tgt.size() == static_cast<size_t>(batch.rows * batch.tgt_len));
    for (size_t i : batch.indices) ++seen[i];
  }
  CHECK(std::count(seen.begin(), seen.begin() + 3000, 1) == 3000);
  CHECK(seen[3000] == 0);
  CHECK(seen[3001] == 0);

  // Each epoch visits every batch once; the order depends only on seed + epoch.
  const std::vector<size_t> e1 = plan.epoch_order(7, 1), e1_again = plan.epoch_order(7, 1), e2 = plan.epoch_order(7, 2);
  std::vector<size_t> sorted = e1;
  std::sort(sorted.begin(), sorted.end());
  std::vector<size_t> identity(plan.size());
  std::iota(identity.begin(), identity.end(), 0);
  CHECK(sorted == identity);
  CHECK(e1 == e1_again);
  CHECK(e1 != e2);
  CHECK(plan.epoch_order(6, 2) == e1);  // seeded with seed + epoch
  CHECK(e1 != identity);

  CHECK_THROWS_WITH_AS(BatchPlan(pairs, 0), contains("BatchPlan: max_tokens 0 < 1"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(BatchPlan(pairs, 100, -1), contains("BatchPlan: max_len -1 < 0"), std::invalid_argument);
}

TEST_CASE("seeded_shuffle is a deterministic permutation") {
  std::vector<size_t> a(50), b;
  std::iota(a.begin(), a.end(), 0);
  b = a;
  seeded_shuffle(a, 42);
  seeded_shuffle(b, 42);
  CHECK(a == b);
  std::vector<size_t> c = a;
  std::sort(c.begin(), c.end());
  CHECK(c.front() == 0);
  CHECK(c.back() == 49);
  CHECK(std::adjacent_find(c.begin(), c.end()) == c.end());
  std::vector<size_t> empty;
  seeded_shuffle(empty, 1);
  CHECK(empty.empty());
}

TEST_CASE("end to end: text -> vocab -> ids -> batches -> text") {
  TempDir dir("e2e");
  dir.write("train.en", "the dog runs .\nthe cat runs .\nthe dog sleeps .\n");
  dir.write("train.ko", "개 는 달립니다 .\n고양이 는 달립니다 .\n개 는 잡니다 .\n");
  const ParallelText text = read_parallel_dir(dir.path, "train", "en", "ko");
  const Vocab src = Vocab::build_source(text.pairs), tgt = Vocab::build_target(text.pairs);
  const std::vector<EncodedPair> enc = encode_pairs(text.pairs, src, tgt);
  CHECK(enc[1].src == std::vector<int64_t>{src.id("the"), Vocab::kUnk, src.id("runs"), src.id(".")});
  const BatchPlan plan(enc, 1000);
  REQUIRE(plan.size() == 1);
  const Batch b = plan.batch(0);
  for (int64_t r = 0; r < b.rows; ++r) {
    const std::span<const int64_t> row(b.tgt.data() + r * b.tgt_len, static_cast<size_t>(b.tgt_len));
    std::string expected;
    for (const std::string& w : text.pairs[b.indices[static_cast<size_t>(r)]].second)
      expected += (expected.empty() ? "" : " ") + (tgt.contains(w) ? w : std::string("<unk>"));
    CHECK(tgt.decode_text(row) == expected);
  }
}
