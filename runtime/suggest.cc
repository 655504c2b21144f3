// Did-you-mean: optimal-string-alignment distance over normalized names (see suggest.h).
#include "runtime/suggest.h"

#include <algorithm>
#include <cctype>
#include <limits>
#include <utility>

#include <fmt/format.h>

namespace strata {
namespace {

std::string normalize(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == '-' || c == '.') c = '_';
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

size_t max_distance_for(size_t length) {
  if (length <= 4) return 1;
  if (length <= 8) return 2;
  return 3;
}

bool starts_with(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Optimal string alignment distance between `a` and `b` as given.
size_t osa_distance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  // d[i][j]: distance between a[0, i) and b[0, j); rows kept as a flat (n+1, m+1) table.
  std::vector<size_t> d((n + 1) * (m + 1));
  auto at = [&](size_t i, size_t j) -> size_t& { return d[i * (m + 1) + j]; };
  for (size_t i = 0; i <= n; i++) at(i, 0) = i;
  for (size_t j = 0; j <= m; j++) at(0, j) = j;
  for (size_t i = 1; i <= n; i++) {
    for (size_t j = 1; j <= m; j++) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      size_t best = std::min({at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) best = std::min(best, at(i - 2, j - 2) + 1);
      at(i, j) = best;
    }
  }
  return at(n, m);
}

}  // namespace

size_t name_distance(std::string_view a, std::string_view b) { return osa_distance(normalize(a), normalize(b)); }

std::string suggest(std::string_view unknown, const std::vector<std::string>& known) {
  const std::string wanted = normalize(unknown);
  if (wanted.empty()) return "";
  // Ranked by normalized distance, then by the distance as written, so that "aio.block_sise"
  // prefers "aio.block_size" to "aio_block_size".
  std::pair<size_t, size_t> best_rank{std::numeric_limits<size_t>::max(), 0};
  const std::string* best = nullptr;
  for (const std::string& k : known) {
    const std::pair<size_t, size_t> rank{name_distance(wanted, k), osa_distance(unknown, k)};
    if (rank < best_rank) {
      best_rank = rank;
      best = &k;
    }
  }
  if (best != nullptr && best_rank.first <= max_distance_for(wanted.size())) return *best;
  if (wanted.size() < 4) return "";
  const std::string* only = nullptr;
  for (const std::string& k : known) {
    const std::string nk = normalize(k);
    if (starts_with(nk, wanted) || ends_with(nk, wanted)) {
      if (only != nullptr) return "";  // ambiguous: several names share the fragment
      only = &k;
    }
  }
  return only != nullptr ? *only : "";
}

std::string did_you_mean(std::string_view unknown, const std::vector<std::string>& known, std::string_view quote) {
  const std::string s = suggest(unknown, known);
  if (s.empty()) return "";
  return fmt::format("; did you mean {}{}{}?", quote, s, quote);
}

}  // namespace strata
