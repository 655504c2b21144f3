// The built-in training corpus: Ambrose Bierce's "The Devil's Dictionary" (1911, public domain),
// ~383 KB of English text compiled into the binary, so `strata train` with no arguments has
// something to learn from offline. Source and licence: model/data/README.md. Not a dataset
// loader (token_dataset.h reads files; the trainer turns this text into byte tokens).
// Thread-safety: the bytes are immutable static data; call from any thread, at any time.
#pragma once

#include <string_view>

namespace strata::model {

// The whole text, byte for byte as model/data/devils_dictionary.txt (ASCII, '\n' line ends).
// The view is valid for the life of the program.
std::string_view builtin_corpus();

// "The Devil's Dictionary, Ambrose Bierce (1911; public domain)", for logs.
std::string_view builtin_corpus_name();

}  // namespace strata::model
