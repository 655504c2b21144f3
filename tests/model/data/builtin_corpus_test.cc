// Tests of the built-in corpus: it is the committed text, byte for byte, and plain English.
#include "model/data/builtin_corpus.h"

#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace strata::model {
namespace {

const std::string kCommittedText = std::string(STRATA_TEST_DATA_DIR) + "/../../model/data/devils_dictionary.txt";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(BuiltinCorpusTest, IsTheCommittedTextByteForByte) {
  const std::string committed = read_file(kCommittedText);
  ASSERT_EQ(committed.size(), 383147u) << kCommittedText;
  const std::string_view corpus = builtin_corpus();
  ASSERT_EQ(corpus.size(), committed.size());
  EXPECT_EQ(corpus.substr(0, 64), std::string_view(committed).substr(0, 64));
  EXPECT_TRUE(corpus == committed);
}

TEST(BuiltinCorpusTest, IsPlainEnglishFromAbasementToZoology) {
  const std::string_view corpus = builtin_corpus();
  EXPECT_TRUE(corpus.starts_with("            The Internet Wiretap 1st Online Edition of\n")) << corpus.substr(0, 80);
  EXPECT_NE(corpus.find("A Public Domain Text, Copyright Expired"), std::string_view::npos);
  EXPECT_NE(corpus.find("ABASEMENT, n."), std::string_view::npos);
  EXPECT_NE(corpus.find("ZOOLOGY, n."), std::string_view::npos);
  EXPECT_EQ(corpus.back(), '\n');
  for (const char c : corpus) {
    ASSERT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << "byte " << static_cast<int>(c);
  }
  EXPECT_NE(builtin_corpus_name().find("public domain"), std::string_view::npos);
}

}  // namespace
}  // namespace strata::model
