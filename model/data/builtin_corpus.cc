// The built-in corpus (see builtin_corpus.h) over the byte array that model/CMakeLists.txt
// generates from model/data/devils_dictionary.txt.
#include "model/data/builtin_corpus.h"

#include <cstddef>

namespace strata::model {
namespace detail {
extern const unsigned char kBuiltinCorpusBytes[];  // kBuiltinCorpusSize bytes, then a 0
extern const size_t kBuiltinCorpusSize;
}  // namespace detail

std::string_view builtin_corpus() {
  return {reinterpret_cast<const char*>(detail::kBuiltinCorpusBytes), detail::kBuiltinCorpusSize};
}

std::string_view builtin_corpus_name() { return "The Devil's Dictionary, Ambrose Bierce (1911; public domain)"; }

}  // namespace strata::model
