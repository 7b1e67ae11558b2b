#include "train/distributed/batch_split.h"

#include <algorithm>
#include <span>

#include "tensor/check.h"

namespace gf::train::distributed {

std::vector<std::pair<size_t, size_t>> split_rows(const std::vector<int64_t>& row_tokens, int parts) {
  GF_CHECK(parts >= 1, "split_rows: {} parts", parts);
  const size_t rows = row_tokens.size(), n = static_cast<size_t>(parts);
  int64_t total = 0;
  for (int64_t t : row_tokens) total += t;
  std::vector<std::pair<size_t, size_t>> out;
  size_t begin = 0, end = 0;
  int64_t sum = 0;  // target tokens of rows [0, end)
  for (size_t r = 0; r + 1 < n; ++r) {
    // In units of 1/parts token, so that the comparisons are exact: the cut's distance to its goal.
    const int64_t goal = total * static_cast<int64_t>(r + 1);
    auto over = [&] { return sum * parts - goal; };
    while (end < rows && (end == begin || over() < 0)) sum += row_tokens[end++];
    if (end > begin + 1 && -(over() - row_tokens[end - 1] * parts) < over()) sum -= row_tokens[--end];  // the nearer boundary
    const size_t keep = std::min(n - r - 1, rows - std::min(rows, begin + 1));  // one row for each later part, while rows last
    while (end > begin + 1 && rows - end < keep) sum -= row_tokens[--end];
    out.emplace_back(begin, end);
    begin = end;
  }
  out.emplace_back(begin, rows);  // the last part takes what is left
  return out;
}

Batch batch_part(const std::vector<EncodedPair>& pairs, const Batch& global, int part, int parts) {
  GF_CHECK(part >= 0 && part < parts, "batch_part: part {} of {}", part, parts);
  if (parts == 1) return global;
  std::vector<int64_t> tokens;  // (B,) target tokens of each row, as collate counts them
  tokens.reserve(global.indices.size());
  for (size_t i : global.indices) tokens.push_back(static_cast<int64_t>(pairs.at(i).tgt.size()) + 1);
  const auto [begin, end] = split_rows(tokens, parts)[static_cast<size_t>(part)];
  if (begin == end) return Batch{};
  return collate(pairs, std::span<const size_t>(global.indices).subspan(begin, end - begin));
}

}  // namespace gf::train::distributed
