// first_duplicate_json_key (runtime/json_duplicates.h): the path of the first key an object
// repeats, at the top, nested in objects and inside arrays; none for distinct keys (the same key
// in different objects is not a repeat) and for text that does not parse.
#include <gtest/gtest.h>

#include "runtime/json_duplicates.h"

namespace strata {
namespace {

TEST(JsonDuplicates, NamesTheFirstRepeatedKeyByItsPath) {
  EXPECT_EQ(first_duplicate_json_key(R"({"lr": 0.1, "steps": 3, "lr": 0.2})"), "lr");
  EXPECT_EQ(first_duplicate_json_key(R"({"optimizer": {"params": {"lr": 1, "eps": 2, "lr": 3}}})"),
            "optimizer.params.lr");
  EXPECT_EQ(first_duplicate_json_key(R"({"layers": [{"name": "a"}, {"name": "b", "name": "c"}]})"), "layers[].name");
  EXPECT_EQ(first_duplicate_json_key(R"({"a": {"b": 1, "b": 2}, "a": 3})"), "a.b");  // the first found
}

TEST(JsonDuplicates, DistinctKeysAndUnparsableTextHaveNone) {
  EXPECT_EQ(first_duplicate_json_key(R"({"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]})"), std::nullopt);
  EXPECT_EQ(first_duplicate_json_key("{}"), std::nullopt);
  EXPECT_EQ(first_duplicate_json_key(R"([1, 2, {"x": 1}])"), std::nullopt);
  EXPECT_EQ(first_duplicate_json_key(R"({"a": 1, "a")"), std::nullopt);  // not JSON: the caller's parse says so
}

}  // namespace
}  // namespace strata
