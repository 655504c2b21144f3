// Did-you-mean for names users type: config keys, environment variables, flags, JSON paths,
// subcommands. Compares case-insensitively and treats '-', '_' and '.' as the same character, so
// "--gpu-mme", "GPU_MME" and "gpu.mme" all find "gpu_mem". Not a fuzzy search engine: it returns
// at most one candidate, and only when it is close enough to be a likely typo.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

// Edit distance (insertions, deletions, substitutions and adjacent transpositions, each cost 1)
// between the normalized forms of `a` and `b`.
size_t name_distance(std::string_view a, std::string_view b);

// The known name closest to `unknown`, or "" when none is close: within distance 1 for names of up
// to 4 characters, 2 up to 8, 3 beyond. Failing that, the only known name that starts or ends with
// `unknown` (at least 4 characters), e.g. "block_size" -> "aio_block_size". Ties go to the name
// closer as written ("aio.block_sise" -> "aio.block_size" over "aio_block_size"), then to the
// earlier entry of `known`. An exact (normalized) match is returned as is.
std::string suggest(std::string_view unknown, const std::vector<std::string>& known);

// "; did you mean 'x'?" (with the quotes given) or "" when suggest() finds nothing, to append to
// an error message.
std::string did_you_mean(std::string_view unknown, const std::vector<std::string>& known,
                         std::string_view quote = "'");

}  // namespace strata
