#pragma once
// Lines of text as they arrive: from a file descriptor (a file, a pipe, a terminal) read in 64 KiB
// pieces, or from text held in memory, one line at a time, so that nothing holds a whole file's
// bytes. Every line has its '\n' removed and the '\r' before it (CRLF files), the first line its
// UTF-8 byte-order mark, and is checked to be valid UTF-8 (the error names name:line). A last line
// without '\n' still counts. A line longer than a limit (kMaxLineBytes unless told) is refused as
// soon as that many bytes have arrived without a '\n', so one endless line costs neither unbounded
// memory nor more than one look at each byte.
#include <cstddef>
#include <string>
#include <string_view>

namespace gf::train {

// The longest line readers accept by default, without its line ending: far above any sentence,
// far below what would exhaust memory. translate, eval, train and bleu take --max-line-bytes.
inline constexpr size_t kMaxLineBytes = size_t{1} << 20;

class LineReader {
 public:
  // Reads `fd` (not owned, not closed); `name` stands for it in errors ("stdin", a file's path).
  LineReader(int fd, std::string name, size_t max_line_bytes = kMaxLineBytes);
  // Reads `text`, which must outlive the reader.
  LineReader(std::string_view text, std::string name, size_t max_line_bytes = kMaxLineBytes);

  // The next line; false at the end. Blocks until a whole line, or the end, has arrived.
  // Throws std::invalid_argument "name:line: invalid UTF-8 at byte k (0x..)" or "name:line: line
  // is longer than N bytes ...", std::runtime_error when reading fails. After an invalid_argument
  // the bad line counts as read and the next call returns the line after it.
  bool next(std::string& line);
  // Whether next() would return without waiting: a whole line is here, or can be read now, or the
  // input has ended.
  bool ready();
  size_t lines() const { return lines_; }  // lines returned so far
  const std::string& name() const { return name_; }

 private:
  bool fill(bool wait);  // reads what there is (waits for some when `wait`); false at the end
  size_t line_end();     // the '\n' ending the line at pos_, or npos while it has not arrived
  [[noreturn]] void too_long();                // counts the line and throws
  [[noreturn]] void refuse_unfinished_line();  // too_long() for a line still arriving: drops it
  void skip_rest_of_line();                    // drops the rest of that line, up to its '\n'

  int fd_ = -1;
  std::string name_;
  std::string owned_;     // bytes read from fd_ and not yet returned, from pos_
  std::string_view text_; // what is being cut into lines: owned_, or the memory text
  size_t pos_ = 0;
  size_t scan_ = 0;  // text_[pos_, scan_) holds no '\n': the search for one goes on from here
  size_t max_line_bytes_;
  bool skipping_ = false;  // the rest of a refused line is still to be dropped
  bool ended_ = false;
  size_t lines_ = 0;
};

// The file at `path` opened for reading (std::runtime_error naming `op` and the file when it is
// missing, a directory or unreadable); close it with ::close.
int open_text_file(const std::string& path, std::string_view op);

}  // namespace gf::train
